-- Take parked follow-ups whose delivery is overdue (the runner that acked their parent
-- stopped before delivering them), holding them for the caller until ARGV[2].
-- KEYS[1]: outbox hash   KEYS[2]: outbox_due zset
-- ARGV[1]: now ms   ARGV[2]: hold until (ms)   ARGV[3]: most entries
-- Returns: flat array of token, encoded follow-ups
local tokens = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[3]))
local out = {}
for _, token in ipairs(tokens) do
  local entry = redis.call('HGET', KEYS[1], token)
  if entry then
    redis.call('ZADD', KEYS[2], ARGV[2], token)
    out[#out + 1] = token
    out[#out + 1] = entry
  else
    redis.call('ZREM', KEYS[2], token)
  end
end
return out

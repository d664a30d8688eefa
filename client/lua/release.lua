-- Give back claimed jobs this runner will not finish (shutdown past its grace):
-- due now, and the attempt is not counted.
-- KEYS[1]: lease zset   KEYS[2]: pending zset   KEYS[3]: attempt hash
-- ARGV[1]: wake channel   ARGV[2]: topic   ARGV[3]: now ms
-- ARGV[4..]: pairs of id, attempt
-- Returns: the refused (normally none): per job, id and 'newer' or 'gone' (see refuse)
local before = head_due(KEYS[2])
local stale = {}
for i = 4, #ARGV, 2 do
  local id = ARGV[i]
  local current = redis.call('HGET', KEYS[3], id)
  if current == ARGV[i + 1] then
    redis.call('ZREM', KEYS[1], id)
    redis.call('ZADD', KEYS[2], ARGV[3], id)
    redis.call('HINCRBY', KEYS[3], id, -1)
  else
    refuse(stale, id, current)
  end
end
if #stale < #ARGV - 3 then -- two reply entries per refused id, two args per id
  wake_if_earlier(ARGV[1], ARGV[2], tonumber(ARGV[3]), before)
end
return stale

-- Enqueue jobs into one topic. A caller id that is live (stored and not dead) is left unchanged.
-- KEYS[1]: pending zset   KEYS[2]: job hash   KEYS[3]: dead zset   KEYS[4]: dead_info hash   KEYS[5]: seq counter
-- ARGV[1]: wake channel   ARGV[2]: topic
-- ARGV[3..]: triples of id ("" to generate one), due ms, encoded record
-- Returns: flat array of id, status per job: 1 = enqueued, 0 = already live (duplicate, not enqueued)
local before = head_due(KEYS[1])
local earliest = nil
local out = {}
for i = 3, #ARGV, 3 do
  local id, due, record = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  if id == '' then
    repeat
      id = tostring(redis.call('INCR', KEYS[5]))
    until redis.call('HEXISTS', KEYS[2], id) == 0
  end
  if redis.call('HEXISTS', KEYS[2], id) == 1 and not redis.call('ZSCORE', KEYS[3], id) then
    out[#out + 1] = id
    out[#out + 1] = 0
  else
    -- a dead-lettered id may be enqueued afresh
    redis.call('ZREM', KEYS[3], id)
    redis.call('HDEL', KEYS[4], id)
    redis.call('HSET', KEYS[2], id, record)
    redis.call('ZADD', KEYS[1], due, id)
    local d = tonumber(due)
    if earliest == nil or d < earliest then earliest = d end
    out[#out + 1] = id
    out[#out + 1] = 1
  end
end
wake_if_earlier(ARGV[1], ARGV[2], earliest, before)
return out

-- Return jobs whose lease expired (their runner died or stalled) to pending, due now.
-- The attempt stays counted; the runner that claims it next dead-letters it if none are left.
-- KEYS[1]: lease zset   KEYS[2]: pending zset   KEYS[3]: error hash (JSON of the last failure)
-- ARGV[1]: now ms   ARGV[2]: most jobs to requeue   ARGV[3]: wake channel   ARGV[4]: topic
-- Returns: how many were requeued
local before = head_due(KEYS[2])
local reason = cjson.encode({ error = 'lease expired: the runner stopped or lost Redis before finishing the attempt', at = tonumber(ARGV[1]) })
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
for _, id in ipairs(expired) do
  redis.call('ZREM', KEYS[1], id)
  redis.call('ZADD', KEYS[2], ARGV[1], id)
  redis.call('HSET', KEYS[3], id, reason)
end
if #expired > 0 then
  wake_if_earlier(ARGV[3], ARGV[4], tonumber(ARGV[1]), before)
end
return #expired

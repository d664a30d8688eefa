-- Return jobs whose lease expired (their runner died or stalled) to pending, due now.
-- The attempt stays counted; the runner that claims it next dead-letters it if none are left.
-- KEYS[1]: lease zset   KEYS[2]: time index (index.lua)   KEYS[3]: error hash (JSON of the last failure)
-- KEYS[4]: job hash   KEYS[5]: fair hash (prelude.lua: tenant keys)
-- ARGV[1]: wake channel   ARGV[2]: topic   ARGV[3]: now ms   ARGV[4]: most jobs to requeue
-- ARGV[5]: the failure recorded for each (JSON, encoded by the caller: redis::Failure)
-- Returns: how many were requeued
local before = head_due(KEYS[2])
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[3], 'LIMIT', 0, tonumber(ARGV[4]))
local dues = {}
for j, id in ipairs(expired) do
  redis.call('ZREM', KEYS[1], id)
  redis.call('HSET', KEYS[3], id, ARGV[5])
  dues[j] = tonumber(ARGV[3])
end
fair_front(KEYS[5], expired)
keys_released(KEYS[5], expired)
wait_again(KEYS[2], KEYS[4], expired, dues)
if #expired > 0 then
  wake_if_earlier(ARGV[1], ARGV[2], tonumber(ARGV[3]), before)
end
return #expired

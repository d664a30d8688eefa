-- Return jobs whose lease expired (their runner died or stalled) to pending, due now.
-- The attempt stays counted; the runner that claims it next dead-letters it if none are left.
-- KEYS[1]: lease zset   KEYS[2]: time index (index.lua)   KEYS[3]: error hash (JSON of the last failure)
-- KEYS[4]: job hash   KEYS[5]: fair hash (prelude.lua: tenant keys)   KEYS[6]: attempt hash
-- ARGV[1]: wake channel   ARGV[2]: topic   ARGV[3]: now ms   ARGV[4]: most jobs to requeue
-- ARGV[5]: the failure recorded for each (JSON without a story, encoded by the caller:
--   redis::Failure); the job's story is kept (it is the stored failure's last field,
--   `"attempts":[...]`: client/src/story.rs) with this attempt added, its lease expired
-- Returns: how many were requeued
local before = head_due(KEYS[2])
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[3], 'LIMIT', 0, tonumber(ARGV[4]))
local dues = {}
local failures = hmget_all(KEYS[3], expired)
local attempts = hmget_all(KEYS[6], expired)
local head = string.sub(ARGV[5], 1, -2) -- the failure without its closing brace
for j, id in ipairs(expired) do
  redis.call('ZREM', KEYS[1], id)
  local lost = '{"attempt":' .. (attempts[j] or '0') .. ',"outcome":"lease_expired","ended_at_ms":'
    .. ARGV[3] .. '}'
  local story = nil
  local old = failures[j]
  local at = old and string.find(old, ',"attempts":[', 1, true)
  if at then
    story = string.sub(old, at, -3) .. ',' .. lost .. ']}' -- old ends with ']}'
  else
    story = ',"attempts":[' .. lost .. ']}'
  end
  redis.call('HSET', KEYS[3], id, head .. story)
  dues[j] = tonumber(ARGV[3])
end
fair_front(KEYS[5], expired)
keys_released(KEYS[5], expired)
wait_again(KEYS[2], KEYS[4], expired, dues)
if #expired > 0 then
  wake_if_earlier(ARGV[1], ARGV[2], tonumber(ARGV[3]), before)
end
return #expired

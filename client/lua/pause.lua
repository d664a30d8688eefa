-- Pause or resume a topic. A paused topic accepts jobs and claims none; resuming wakes
-- the runners if jobs are pending.
-- KEYS[1]: paused flag   KEYS[2]: time index (index.lua)
-- ARGV[1]: wake channel   ARGV[2]: topic   ARGV[3]: '1' to pause, '0' to resume
-- Returns: 1 if this changed the topic's state, 0 if it already was so
if ARGV[3] == '1' then
  return redis.call('SET', KEYS[1], '1', 'NX') and 1 or 0
end
local changed = redis.call('DEL', KEYS[1])
local head = head_due(KEYS[2])
if changed == 1 and head ~= nil then
  wake_if_earlier(ARGV[1], ARGV[2], head, nil)
end
return changed

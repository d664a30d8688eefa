-- Move a schedule's cursor (the last fire time enqueued or passed over) forward, never back.
-- KEYS[1]: the schedule's cursor
-- ARGV[1]: fire time ms
-- Returns: 1 if moved, 0 if the cursor was already there or later
local current = tonumber(redis.call('GET', KEYS[1]) or '-1')
if tonumber(ARGV[1]) > current then
  redis.call('SET', KEYS[1], ARGV[1])
  return 1
end
return 0

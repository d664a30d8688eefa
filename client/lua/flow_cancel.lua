-- Cancel a flow: every job not yet released (still waiting for others), or released
-- and still parked in the flow's outbox, ends as cancelled here; the jobs enqueued and
-- not ended are returned for the caller to cancel in their topics (which tells the
-- flow, as any cancel of a flow job does).
-- KEYS[1]: flow hash   KEYS[2]: flow outbox hash   KEYS[3]: flow outbox_due zset
-- ARGV[1]: now ms   ARGV[2]: how long a finished flow is kept (ms)
-- ARGV[3]: the encoded end of a job cancelled here   ARGV[4]: the namespace (a job
-- cancelled here is announced on its topic's events channel, for those waiting on it)
-- Returns: false when there is no such flow, else 1 if it is done now (0 if not), then
-- the indices released and not ended
local n = tonumber(redis.call('HGET', KEYS[1], 'n'))
if not n then return false end
redis.call('HSETNX', KEYS[1], 'cancelled', ARGV[1])
local live = {0}
local cancelled = 0
for i = 0, n - 1 do
  if not redis.call('HGET', KEYS[1], 's:' .. i) then
    local waiting = tonumber(redis.call('HGET', KEYS[1], 'w:' .. i) or '0')
    local parked = waiting == 0 and redis.call('HDEL', KEYS[2], 'r:' .. i) == 1
    if parked then redis.call('ZREM', KEYS[3], 'r:' .. i) end
    if waiting > 0 or parked then
      redis.call('HSET', KEYS[1], 's:' .. i, 'cancelled', 'r:' .. i, ARGV[3])
      cancelled = cancelled + 1
      flow_job_ended(KEYS[1], i, ARGV[4])
    else
      live[#live + 1] = i
    end
  end
end
if cancelled > 0 and redis.call('HINCRBY', KEYS[1], 'ended', cancelled) == n
    and redis.call('HSETNX', KEYS[1], 'done', ARGV[1]) == 1 then
  live[1] = 1
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return live

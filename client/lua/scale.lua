-- What an autoscaler reads of one topic, in one call that changes nothing: the jobs ready
-- now and the due time of the oldest of them, those running, suspended, and due within the
-- next `ARGV[2]` ms, and whether the topic is paused.
-- KEYS[1]: time index (index.lua)   KEYS[2]: lease zset   KEYS[3]: suspended hash
-- KEYS[4]: fair hash (jobs due and queued per tenant key)   KEYS[5]: layout 2's zset of waiting
-- jobs   KEYS[6]: paused flag
-- ARGV[1]: now ms   ARGV[2]: the horizon ms (60000: the next minute)
-- Returns: { ready, due time (ms) of the oldest ready job on the time index or -1 when none,
--   running, suspended, due after now and by now + horizon, paused (0/1) }
-- Cost: the heads of the index (one per priority in use) in O(log B), then one ZCARD or ZCOUNT
-- per bucket whose range begins by now + horizon (a bucket holds about 48 jobs; a bulk enqueue
-- due at one time is one bucket however big), plus a few O(1) reads. Jobs already queued per
-- tenant key (a fair topic, with runners claiming) are counted as ready; their own ages are
-- not read (that would walk every key).
local now = tonumber(ARGV[1])
local ahead = now + tonumber(ARGV[2])
local ready, soon = 0, 0

-- Count the jobs of index `idx` due by now and due after now but by `ahead`.
local function count(idx)
  local b = redis.call('ZRANGEBYSCORE', idx, '-inf', string.format('%d', ahead), 'WITHSCORES')
  local n = #b / 2
  for i = 1, n do
    local key = bucket_key(idx, b[2 * i - 1])
    local bound = tonumber(b[2 * i])
    if i == n then
      -- the last bucket begun by then may also hold jobs due after `ahead`
      local by_ahead = redis.call('ZCOUNT', key, '-inf', string.format('%d', ahead))
      if bound <= now then
        local due = redis.call('ZCOUNT', key, '-inf', string.format('%d', now))
        ready = ready + due
        soon = soon + by_ahead - due
      else
        soon = soon + by_ahead
      end
    else
      -- a bucket's jobs are due before the next bucket's bound
      local next_bound = tonumber(b[2 * i + 2])
      if next_bound <= now then
        ready = ready + redis.call('ZCARD', key)
      elseif bound <= now then
        local due = redis.call('ZCOUNT', key, '-inf', string.format('%d', now))
        ready = ready + due
        soon = soon + redis.call('ZCARD', key) - due
      else
        soon = soon + redis.call('ZCARD', key)
      end
    end
  end
end

count(KEYS[1])
if redis.call('EXISTS', KEYS[1] .. ':priority') == 1 then
  for p = 1, LOWEST do count(level_index(KEYS[1], p)) end
end
local head = head_due(KEYS[1])
local legacy = redis.call('ZRANGE', KEYS[5], 0, 0, 'WITHSCORES')
if legacy[1] then
  ready = ready + redis.call('ZCOUNT', KEYS[5], '-inf', string.format('%d', now))
  soon = soon + redis.call('ZCOUNT', KEYS[5], '(' .. string.format('%d', now), string.format('%d', ahead))
  local due = tonumber(legacy[2])
  if head == nil or due < head then head = due end
end
ready = ready + tonumber(redis.call('HGET', KEYS[4], 'n') or '0')
local oldest = -1
if head ~= nil and head <= now then oldest = head end
return { ready, oldest, redis.call('ZCOUNT', KEYS[2], '-inf', '(+inf'), redis.call('HLEN', KEYS[3]),
  soon, redis.call('EXISTS', KEYS[6]) }

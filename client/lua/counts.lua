-- How many jobs of one topic wait (due by now, and later), run and are dead.
-- KEYS[1]: time index (index.lua)   KEYS[2]: job hash   KEYS[3]: lease zset   KEYS[4]: dead zset
-- KEYS[5]: paused flag   KEYS[6]: layout 2's zset of waiting jobs   KEYS[7]: suspended hash
-- KEYS[8]: fair hash (jobs due and queued per tenant key: ready)   KEYS[9]: count of expired jobs
-- ARGV[1]: now ms
-- Returns: { ready, waiting (ready and scheduled), running, dead, paused (0/1), suspended (of the
--   waiting: sleeping or waiting for a signal), expired (ever) }
-- Every stored job is waiting, running or dead: the waiting ones are counted without
-- reading the index. The ready ones are summed over the buckets whose range has begun
-- (a bucket over a hundred jobs), all of each but the last, which is counted by score.
local now = ARGV[1]
-- (the lease zset's one member at +inf is no job: prelude.lua, leases_write)
local running = redis.call('ZCOUNT', KEYS[3], '-inf', '(+inf')
local dead = redis.call('ZCARD', KEYS[4])
local waiting = math.max(0, redis.call('HLEN', KEYS[2]) - running - dead)
local ready = 0
local function count_ready(idx)
  local begun = redis.call('ZRANGEBYSCORE', idx, '-inf', now)
  for i, name in ipairs(begun) do
    local key = bucket_key(idx, name)
    if i < #begun then
      ready = ready + redis.call('ZCARD', key)
    else
      ready = ready + redis.call('ZCOUNT', key, '-inf', now)
    end
  end
end
count_ready(KEYS[1])
if redis.call('EXISTS', KEYS[1] .. ':priority') == 1 then
  for p = 1, LOWEST do count_ready(level_index(KEYS[1], p)) end
end
ready = ready + redis.call('ZCOUNT', KEYS[6], '-inf', now)
ready = ready + tonumber(redis.call('HGET', KEYS[8], 'n') or '0')
return { ready, math.max(waiting, ready), running, dead, redis.call('EXISTS', KEYS[5]), redis.call('HLEN', KEYS[7]),
  tonumber(redis.call('GET', KEYS[9]) or '0') }

-- Tell a flow how some of its jobs ended (the notices their acks and burials parked).
-- Each end is counted once: a repeated delivery changes nothing, a new end of a job
-- that had ended (a dead letter retried, then acked) replaces the old one without
-- counting again. A dependent whose dependencies have all ended is parked in the
-- flow's outbox under 'r:<index>' for the caller (or a sweep) to enqueue. A dead job
-- that acks after a retry revives each dependent it had blocked (dead-lettered unrun
-- because of it, 'b:<index>'): parked under 'v:<index>', enqueued afresh over its
-- dead letter; its own ack revives what it blocked in turn.
-- KEYS[1]: flow hash   KEYS[2]: flow outbox hash   KEYS[3]: flow outbox_due zset
-- ARGV[1]: now ms   ARGV[2]: sweep time (ms) of what is parked now
-- ARGV[3]: how long a finished flow is kept (ms)
-- ARGV[4..]: quadruples of job index, state ('acked', 'dead', 'cancelled'), encoded end,
-- '1' if it was dead-lettered unrun because a dependency it requires did not ack
-- Returns: 1 when the flow should now be cancelled (it is fail_fast and a job died)
-- else 0, then flat token, outbox entry of each dependent parked now
local n = tonumber(redis.call('HGET', KEYS[1], 'n'))
if not n then return {0} end -- the flow is gone (expired or purged)
local fail_fast = redis.call('HGET', KEYS[1], 'ff') == '1'
    and redis.call('HEXISTS', KEYS[1], 'cancelled') == 0
local out = {0}
local function park(token, entry)
  redis.call('HSET', KEYS[2], token, entry)
  redis.call('ZADD', KEYS[3], ARGV[2], token)
  out[#out + 1] = token
  out[#out + 1] = entry
end
for k = 4, #ARGV, 4 do
  local i, state = ARGV[k], ARGV[k + 1]
  local before = redis.call('HGET', KEYS[1], 's:' .. i)
  if ARGV[k + 3] == '1' then
    redis.call('HSET', KEYS[1], 'b:' .. i, '1')
  end
  if redis.call('HDEL', KEYS[1], 'v:' .. i) == 1 then
    redis.call('HINCRBY', KEYS[1], 'reviving', -1) -- a revived job's end
  end
  if before == 'dead' and state == 'acked' then
    -- a dead letter retried and acked: what it blocked runs after all
    local dependents = redis.call('HGET', KEYS[1], 'd:' .. i)
    for m in string.gmatch(dependents or '', '%d+') do
      if redis.call('HGET', KEYS[1], 's:' .. m) == 'dead'
          and redis.call('HDEL', KEYS[1], 'b:' .. m) == 1 then
        park('v:' .. m, redis.call('HGET', KEYS[1], 'j:' .. m))
        redis.call('HSET', KEYS[1], 'v:' .. m, '1')
        redis.call('HINCRBY', KEYS[1], 'reviving', 1)
        redis.call('HDEL', KEYS[1], 'done')
        redis.call('PERSIST', KEYS[1])
      end
    end
  end
  if before ~= state then
    redis.call('HSET', KEYS[1], 's:' .. i, state, 'r:' .. i, ARGV[k + 2])
    if before == 'dead' then redis.call('HINCRBY', KEYS[1], 'dead', -1) end
    if state == 'dead' then
      redis.call('HINCRBY', KEYS[1], 'dead', 1)
      if fail_fast then out[1] = 1 end
    end
    if not before then
      local dependents = redis.call('HGET', KEYS[1], 'd:' .. i)
      if dependents then
        for m in string.gmatch(dependents, '%d+') do
          -- (a job cancelled with its flow is never released)
          if redis.call('HINCRBY', KEYS[1], 'w:' .. m, -1) == 0
              and not redis.call('HGET', KEYS[1], 's:' .. m) then
            park('r:' .. m, redis.call('HGET', KEYS[1], 'j:' .. m))
          end
        end
      end
      redis.call('HINCRBY', KEYS[1], 'ended', 1)
    end
  end
end
-- done: every job ended, none revived and still to end
local counts = redis.call('HMGET', KEYS[1], 'ended', 'reviving', 'done')
if tonumber(counts[1]) == n and tonumber(counts[2] or '0') == 0 and not counts[3] then
  redis.call('HSET', KEYS[1], 'done', ARGV[1])
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
end
return out

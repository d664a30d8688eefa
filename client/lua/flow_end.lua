-- Tell a flow how some of its jobs ended (the notices their acks and burials parked),
-- or that a batch is sealed. Each end is counted once: a repeated delivery changes
-- nothing, a new end of a job that had ended (a dead letter retried, then acked)
-- replaces the old one without counting again. A dependent whose dependencies have all
-- ended is parked in the flow's outbox under 'r:<index>' for the caller (or a sweep) to
-- enqueue; a batch's on_success callback is skipped instead (ended as cancelled, never
-- enqueued) when a job of the batch is dead. A dead job that acks after a retry revives
-- each dependent it had blocked (dead-lettered unrun because of it, 'b:<index>'; a
-- skipped on_success once no job is dead): parked under 'v:<index>', enqueued afresh
-- over its dead letter; its own ack revives what it blocked in turn.
-- KEYS[1]: flow hash   KEYS[2]: flow outbox hash   KEYS[3]: flow outbox_due zset
-- ARGV[1]: now ms   ARGV[2]: sweep time (ms) of what is parked now
-- ARGV[3]: how long a finished flow is kept (ms)   ARGV[4]: the namespace (a callback
-- skipped here is announced on its topic's events channel, for those waiting on it)
-- ARGV[5..]: quadruples of job index, state ('acked', 'dead', 'cancelled'), encoded end,
-- '1' if it was dead-lettered unrun because a dependency it requires did not ack; or
-- 'seal', '', '', '0': seal the batch (its callbacks no longer wait for more jobs)
-- Returns: flags (1: the flow should now be cancelled, it is fail_fast and a job died;
-- 2: it is done now, every job acked; 4: it is done now and failed, a job dead or
-- the flow cancelled; 8: a failed flow is running again, a dead job revived), then
-- flat token, outbox entry of each dependent parked now
local flow = KEYS[1]
local n = tonumber(redis.call('HGET', flow, 'n'))
if not n then return {0} end -- the flow is gone (expired or purged)
local fail_fast = redis.call('HGET', flow, 'ff') == '1'
    and redis.call('HEXISTS', flow, 'cancelled') == 0
local cancel = false
local out = {0}
local reopened = false
local function park(token, m)
  local entry = redis.call('HGET', flow, 'j:' .. m)
  redis.call('HSET', KEYS[2], token, entry)
  redis.call('ZADD', KEYS[3], ARGV[2], token)
  out[#out + 1] = token
  out[#out + 1] = entry
end
local function dead_jobs()
  return tonumber(redis.call('HGET', flow, 'dead') or '0')
end
-- a batch's on_success when a job of the batch is dead: skipped, ended as cancelled
local function skipped(m)
  if redis.call('HGET', flow, 'k:' .. m) ~= 'success' or dead_jobs() == 0 then
    return false
  end
  local reason = 'skipped: ' .. dead_jobs() .. ' job(s) of the batch were dead-lettered'
  local end_ = cjson.encode({state = 'cancelled', reason = reason, attempts = 0,
    at = tonumber(ARGV[1]), result = false}) .. '\n'
  redis.call('HSET', flow, 's:' .. m, 'cancelled', 'r:' .. m, end_, 'b:' .. m, '1')
  redis.call('HINCRBY', flow, 'ended', 1)
  flow_job_ended(flow, m, ARGV[4])
  return true
end
-- job m's last wait ended: release it (a job cancelled with its flow never is)
local function ready(m)
  if not redis.call('HGET', flow, 's:' .. m) and not skipped(m) then
    park('r:' .. m, m)
  end
end
local function revive(m)
  park('v:' .. m, m)
  redis.call('HSET', flow, 'v:' .. m, '1')
  redis.call('HINCRBY', flow, 'reviving', 1)
  if redis.call('HDEL', flow, 'done') == 1 then reopened = true end
  redis.call('PERSIST', flow)
end
local function ended(i, state, encoded, blocked)
  local before = redis.call('HGET', flow, 's:' .. i)
  if blocked == '1' then
    redis.call('HSET', flow, 'b:' .. i, '1')
  end
  if redis.call('HDEL', flow, 'v:' .. i) == 1 then
    redis.call('HINCRBY', flow, 'reviving', -1) -- a revived job's end
  end
  if before ~= state then
    redis.call('HSET', flow, 's:' .. i, state, 'r:' .. i, encoded)
    if before == 'dead' then redis.call('HINCRBY', flow, 'dead', -1) end
    if state == 'dead' then
      redis.call('HINCRBY', flow, 'dead', 1)
      if fail_fast then cancel = true end
    end
    if not before then
      local dependents = redis.call('HGET', flow, 'd:' .. i)
      if dependents then
        for m in string.gmatch(dependents, '%d+') do
          if redis.call('HINCRBY', flow, 'w:' .. m, -1) == 0 then ready(m) end
        end
      end
      redis.call('HINCRBY', flow, 'ended', 1)
    end
  end
  if before == 'dead' and state == 'acked' then
    -- a dead letter retried and acked: what it blocked runs after all
    local dependents = redis.call('HGET', flow, 'd:' .. i)
    for m in string.gmatch(dependents or '', '%d+') do
      local s = redis.call('HGET', flow, 's:' .. m)
      local again = s == 'dead'
          or (s == 'cancelled' and redis.call('HGET', flow, 'k:' .. m) == 'success'
            and dead_jobs() == 0)
      if again and redis.call('HDEL', flow, 'b:' .. m) == 1 then revive(m) end
    end
  end
end
local function seal()
  if redis.call('HGET', flow, 'batch') ~= 'open' then return end
  redis.call('HSET', flow, 'batch', 'sealed')
  for m in string.gmatch(redis.call('HGET', flow, 'cb') or '', '%d+') do
    if redis.call('HINCRBY', flow, 'w:' .. m, -1) == 0 then ready(m) end
  end
end
for k = 5, #ARGV, 4 do
  if ARGV[k] == 'seal' then
    seal()
  else
    ended(ARGV[k], ARGV[k + 1], ARGV[k + 2], ARGV[k + 3])
  end
end
-- done: every job ended, none revived and still to end, and no job can be added
local counts = redis.call('HMGET', flow, 'ended', 'reviving', 'done', 'batch')
if tonumber(counts[1]) == n and tonumber(counts[2] or '0') == 0 and not counts[3]
    and counts[4] ~= 'open' then
  redis.call('HSET', flow, 'done', ARGV[1])
  redis.call('PEXPIRE', flow, ARGV[3])
  local failed = dead_jobs() > 0 or redis.call('HEXISTS', flow, 'cancelled') == 1
  out[1] = failed and 4 or 2
elseif reopened then
  out[1] = 8
end
if cancel then out[1] = out[1] + 1 end
return out

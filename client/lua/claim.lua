-- Claim due jobs of one topic: move up to ARGV[3] jobs due by ARGV[1] from pending to lease,
-- counting an attempt for each. Batched: a handful of calls per claim, not per job.
-- KEYS[1]: time index (index.lua)   KEYS[2]: lease zset   KEYS[3]: job hash   KEYS[4]: attempt hash   KEYS[5]: error hash
-- KEYS[6]: paused flag   KEYS[7]: rate limiter (GCRA: the theoretical arrival time, ms)
-- KEYS[8]: account hash   KEYS[9]: layout 2's zset of waiting jobs (absorbed while it has any)
-- KEYS[10]: journal hash (step.lua)   KEYS[11]: suspended hash (suspend.lua)
-- KEYS[12]: expire zset (prelude.lua: expired_take)
-- ARGV[1]: now ms   ARGV[2]: lease deadline ms   ARGV[3]: most jobs to claim
-- ARGV[4]: the rate's interval between starts in ms (0: no rate limit)   ARGV[5]: burst (extra starts at once)
-- ARGV[6] (optional): take jobs due by this ms, a little after now: the runner holds each until
--   its due time (a claim that Redis or the machine is slow to answer is then not late). Ignored
--   under a rate limit, which counts starts at claim time.
-- Returns: { when to claim next: due ms of the first job still pending, or later when the rate
--            allows no start before; -1 if none, -2 if the topic is paused,
--            then per job: id, due ms, attempt (the lease's fencing token), stored value (the
--            record, after its due time in layout 3: prelude.lua: record_of),
--            then, when a job has a last failure, an account, a journal or a deadline, one last
--            entry with them (prelude.lua: claim_cols_told) }
-- Jobs whose deadline has passed come first, claimed whether due or not, and count against
-- ARGV[3] but not against a rate (they do not start).
-- a plain topic (no pause, deadlines, rolling upgrade, failures, accounts, journals,
-- suspended jobs or priorities) pays one EXISTS for all of them
local plain = not any_exists({ KEYS[6], KEYS[12], KEYS[9], KEYS[5], KEYS[8], KEYS[10], KEYS[11],
  KEYS[1] .. ':priority' })
if not plain and redis.call('EXISTS', KEYS[6]) == 1 then
  return { -2 }
end
local now = tonumber(ARGV[1])
local most = tonumber(ARGV[3])
local interval = tonumber(ARGV[4])
local due_by = math.max(now, tonumber(ARGV[6] or ARGV[1]))
if interval > 0 then due_by = now end
local function remove(id, due) return index_remove(KEYS[1], id, due) end
local expired, expired_dues, deadlines = {}, {}, false
if not plain then
  expired, expired_dues, deadlines = expired_take(KEYS[12], KEYS[2], KEYS[3], remove, now, most)
end
local n_expired = #expired
most = most - n_expired
local tau, tat = 0, now
if interval > 0 then
  -- GCRA: a start is allowed while the theoretical arrival time is at most tau ahead of now
  tau = tonumber(ARGV[5]) * interval
  tat = math.max(tonumber(redis.call('GET', KEYS[7]) or '0'), now)
  most = math.max(0, math.min(most, math.floor((now + tau - tat) / interval) + 1))
  if most <= 0 and n_expired == 0 then
    local head = head_due(KEYS[1], plain)
    if head == nil then return { -1 } end
    return { string.format('%d', math.max(head, math.ceil(tat - tau))) }
  end
end
-- jobs a runner of layout 2 put back after `hourglass migrate` (a rolling upgrade)
if not plain and redis.call('EXISTS', KEYS[9]) == 1 then absorb(KEYS[1], KEYS[9], KEYS[3], 1000) end
local ids, scores, head = index_take(KEYS[1], due_by, most, plain)
if n_expired > 0 then
  for j = 1, #ids do
    expired[#expired + 1] = ids[j]
    expired_dues[#expired_dues + 1] = scores[j]
  end
  ids, scores = expired, expired_dues
end
local out, cols = { -1 }, {}
if #ids > 0 then
  local records = hmget_all(KEYS[3], ids)
  local attempts = hmget_all(KEYS[4], ids)
  local failures, accounts, journaled = {}, {}, {}
  if not plain then
    failures = hmget_if(KEYS[5], ids)
    accounts = hmget_if(KEYS[8], ids)
    journaled = hmget_if(KEYS[10], ids)
    -- a suspended job runs again: it waits for nothing now
    hdel_if(KEYS[11], ids)
  end
  local leased, counted = {}, {}
  local deadline, n, o, k = ARGV[2], 0, 1, 0 -- counters: `#t` searches the table each time
  for i, id in ipairs(ids) do
    -- a pending id without a record was cancelled mid-flight: drop it
    if records[i] then
      local attempt = (tonumber(attempts[i]) or 0) + 1
      leased[n + 1] = deadline
      leased[n + 2] = id
      counted[n + 1] = id
      counted[n + 2] = string.format('%d', attempt) -- as text; twice as fast as tostring
      n = n + 2
      out[o + 1] = id
      out[o + 2] = scores[i]
      out[o + 3] = attempt
      out[o + 4] = records[i] -- the stored value: the runner skips its due time
      o = o + 4
      k = k + 1
      if failures[i] then claim_col(cols, 'f', k, failures[i]) end
      if accounts[i] then claim_col(cols, 'a', k, accounts[i]) end
      if journaled[i] then claim_col(cols, 'j', k, redis.call('HGETALL', KEYS[10] .. ':' .. id)) end
    end
  end
  leases_write(KEYS[2], KEYS[4], leased, counted)
end
if head == nil then head = head_due(KEYS[1], plain) end
if interval > 0 then
  local started = (#out - 1) / 4 - n_expired
  if started > 0 then
    tat = tat + started * interval
    redis.call('SET', KEYS[7], string.format('%.3f', tat), 'PX', math.ceil(tat - now + tau) + 1000)
  end
  -- the next start the rate allows
  if head ~= nil then head = math.max(head, math.ceil(tat - tau)) end
end
-- as a string: an integer reply means "none" (-1) or "paused" (-2)
if head ~= nil then out[1] = string.format('%d', head) end
if deadlines then deadlines_told(KEYS[12], out, 4, cols) end
claim_cols_told(out, cols)
return out

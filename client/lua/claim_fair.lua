-- Claim due jobs of a topic with fairness (tenant keys; prelude.lua says where they live):
-- each due job got its finish tag when it left the time index (fair.lua: fair_tag), so all
-- queued jobs wait in one zset by tag, keys interleaved by what their jobs cost over their
-- weights (start-time fair queueing per job), and a claim pops the smallest tags: one call
-- for the batch. A job that comes up while its key is paused, at its cap of jobs at once or
-- over its rate is parked with its tag and blocks no other key; it goes back when the key may
-- start again. Under share "cpu" a key's jobs beyond its window are tagged as they move up.
-- KEYS[1]: time index (index.lua)   KEYS[2]: lease zset   KEYS[3]: job hash   KEYS[4]: attempt hash
-- KEYS[5]: error hash   KEYS[6]: paused flag   KEYS[7]: rate limiter (claim.lua)   KEYS[8]: account hash
-- KEYS[9]: journal hash (step.lua)   KEYS[10]: suspended hash (suspend.lua)   KEYS[11]: fair hash
-- KEYS[12]: expire zset (prelude.lua: expired_take; those jobs come first, keys' turns aside)
-- ARGV[1]: now ms   ARGV[2]: lease deadline ms   ARGV[3]: most jobs to claim
-- ARGV[4]: the topic's rate interval in ms (0: none)   ARGV[5]: its burst
-- ARGV[6]: take jobs due by this ms (claim.lua; now under any rate)
-- ARGV[7]: share: 'jobs' or 'cpu'   ARGV[8]: jobs at once per key (0: any)
-- ARGV[9]: a key's rate interval in ms (0: none)   ARGV[10]: its burst
-- ARGV[11]: wake channel   ARGV[12]: topic
-- Returns: as claim.lua, with each job's key as a fifth entry (and what jobs have beyond, last)
if redis.call('EXISTS', KEYS[6]) == 1 then
  return { -2 }
end
local fair = KEYS[11]
local now = tonumber(ARGV[1])
local most = tonumber(ARGV[3])
local interval = tonumber(ARGV[4])
local cap, key_iv = tonumber(ARGV[8]), tonumber(ARGV[9])
local due_by = math.max(now, tonumber(ARGV[6]))
if interval > 0 or key_iv > 0 then due_by = now end
local mode = ARGV[7] .. ((cap > 0 or key_iv > 0) and '+limits' or '')
local conf = fair_conf(fair)
-- jobs queued under other settings (a share or limits changed): back to the time index first
if conf.mode ~= mode and redis.call('HEXISTS', fair, 'on') == 1 then
  if fair_unqueue(KEYS[1], KEYS[3], fair, 1000) > 0 then return { string.format('%d', now) } end
end
local tau = tonumber(ARGV[10]) * key_iv
conf.mode, conf.cap, conf.iv, conf.tau, conf.cpu = mode, cap, key_iv, tau, ARGV[7] == 'cpu'
redis.call('HSET', fair, 'mode', mode, 'cap', ARGV[8], 'iv', ARGV[9], 'tau', string.format('%.3f', tau),
  'wake', ARGV[11], 'topic', ARGV[12], 'share', ARGV[7], 'on', '1')
local jobs, len_key, wait = fair .. ':jobs', fair .. ':len', fair .. ':wait'
local running_key, tat_key, win_key = fair .. ':running', fair .. ':tat', fair .. ':w'

-- jobs past their deadline, wherever they wait: leased first, to be ended unrun; a capped key
-- counts them running until they end (keys_released)
local function remove(id, due) return unwait(KEYS[1], fair, id, due) end
local expired, expired_dues, deadlines = expired_take(KEYS[12], KEYS[2], KEYS[3], remove, now, most)
local out, cols = { -1 }, {}
if #expired > 0 then
  local of = hmget_all(fair .. ':of', expired)
  for j = 1, #expired do of[j] = of[j] or '' end
  fair_lease(KEYS, ARGV[2], expired, expired_dues, of, out, cols)
  if cap > 0 then
    keep_hashed(running_key)
    for j = 1, #expired do redis.call('HINCRBY', running_key, of[j], 1) end
  end
  most = most - #expired
end
local n_expired = (#out - 1) / 5

-- the topic's own rate (GCRA, as claim.lua)
local rate = topic_rate(KEYS[7], now, interval, tonumber(ARGV[5]))
most = math.min(most, rate.most)

local paused = {}
if redis.call('EXISTS', fair .. ':paused') == 1 then
  for _, k in ipairs(redis.call('SMEMBERS', fair .. ':paused')) do paused[k] = true end
end
-- keys whose rate allows starts again: their parked jobs back, as many as it allows
if key_iv > 0 then
  for _, k in ipairs(redis.call('ZRANGEBYSCORE', wait, '-inf', now, 'LIMIT', 0, 1000)) do
    redis.call('ZREM', wait, k)
    if not paused[k] then
      local r = redis.call('HMGET', tat_key, k)
      local tat = math.max(tonumber(r[1] or '0'), now)
      local n = math.floor((now + tau - tat) / key_iv) + 1
      if cap > 0 then n = math.min(n, cap - tonumber(redis.call('HGET', running_key, k) or '0')) end
      fair_unpark(fair, k, n)
    end
  end
end

-- jobs that became due get their tags (jobs enqueued due got theirs at once: enqueue.lua)
local ids, dues = index_take(KEYS[1], due_by, 1000)
if #ids > 0 then fair_queue(fair, ids, dues, hmget_all(fair .. ':of', ids), conf) end

-- the smallest tags; jobs whose keys may not start now are parked as they come up
local R, T, Lq, Wq, seen = {}, {}, {}, {}, {}
local picked, keys, parked, parked_keys, held, rated, capped = {}, {}, {}, {}, {}, {}, {}
local V, taken = conf.V, 0
local function park(k, id, tag)
  if not parked[k] then
    parked[k] = {}
    parked_keys[#parked_keys + 1] = k
  end
  local p = parked[k]
  p[#p + 1] = tag
  p[#p + 1] = id
end
for _ = 1, 8 do -- a few rounds at most, should held keys' jobs come up or windows move up
  if taken >= most then break end
  local got = redis.call('ZPOPMIN', jobs, most - taken)
  if #got == 0 then break end
  local round, fresh = {}, {}
  for i = 1, #got, 2 do round[#round + 1] = got[i] end
  local of = hmget_all(fair .. ':of', round)
  for j = 1, #round do
    local k = of[j] or ''
    of[j] = k
    if not seen[k] then
      seen[k] = true
      fresh[#fresh + 1] = k
    end
  end
  if #fresh > 0 and conf.cpu then
    local l, w = hmget_all(len_key, fresh), hmget_all(win_key, fresh)
    for i, k in ipairs(fresh) do Lq[k], Wq[k] = tonumber(l[i] or '0'), tonumber(w[i] or '0') end
  end
  if #fresh > 0 and (cap > 0 or key_iv > 0) then
    local r = cap > 0 and redis.call('HMGET', running_key, unpack(fresh)) or {}
    local t = key_iv > 0 and redis.call('HMGET', tat_key, unpack(fresh)) or {}
    for i, k in ipairs(fresh) do R[k], T[k] = tonumber(r[i] or '0'), tonumber(t[i] or '0') end
  end
  local moved = {}
  -- the largest tag started: a round pops in order of tags, so its last job started has the
  -- round's largest (one tonumber a round, not one a job: each costs two strtod)
  local last = nil
  for j, id in ipairs(round) do
    local k, tag = of[j], got[2 * j]
    if paused[k] then
      park(k, id, tag)
    elseif cap > 0 and R[k] >= cap then
      park(k, id, tag)
      capped[k] = true
    elseif key_iv > 0 and math.max(T[k], now) - tau > now then
      park(k, id, tag)
      held[k] = math.ceil(T[k] - tau)
      capped[k] = true
    else
      taken = taken + 1
      picked[taken] = id
      keys[taken] = k
      last = tag
      if cap > 0 then R[k] = R[k] + 1 end
      if key_iv > 0 then
        T[k] = math.max(T[k], now) + key_iv
        rated[k] = true
      end
      if conf.cpu then
        if not moved[k] then
          moved[k] = true
          moved[#moved + 1] = k
        end
        Lq[k], Wq[k] = Lq[k] - 1, Wq[k] - 1
      end
    end
  end
  if last then
    local t = tonumber(last)
    if t > V then V = t end
  end
  -- under "cpu", the keys that took jobs tag more of their waiting ones
  -- (a key has jobs waiting beyond its window when it has more queued than in it; it tags
  -- more once half its window is gone: one call per key for 16 jobs, not per job)
  if #moved > 0 then
    local set, del, need = {}, {}, {}
    for _, k in ipairs(moved) do
      if Wq[k] > 0 then
        set[#set + 1] = k
        set[#set + 1] = string.format('%d', Wq[k])
      else
        del[#del + 1] = k
      end
      if Lq[k] > Wq[k] and Wq[k] <= WINDOW / 2 then
        need[#need + 1] = k
        Wq[k] = math.min(WINDOW, Lq[k])
      end
    end
    hash_write(win_key, set, del)
    conf.V = V
    if #need > 0 then fair_refill(fair, need, conf) end
  end
end
-- a key that started one under its rate and has jobs parked from before waits its next start
local again = {}
for k in pairs(rated) do
  if not held[k] and not parked[k] then again[#again + 1] = k end
end
if #again > 0 and redis.call('EXISTS', fair .. ':held') == 1 then
  local marked = hmget_all(fair .. ':held', again)
  for i, k in ipairs(again) do
    if marked[i] then redis.call('ZADD', wait, math.ceil(T[k] - tau), k) end
  end
end
for _, k in ipairs(parked_keys) do
  local p = parked[k]
  each_pair('ZADD', fair .. ':parked:' .. k, p)
  if held[k] then redis.call('ZADD', wait, held[k], k) end
end
local marks = {}
for k in pairs(capped) do
  marks[#marks + 1] = k
  marks[#marks + 1] = '1'
end
hash_write(fair .. ':held', marks, {}) -- keys with jobs parked at a limit
if taken > 0 then
  redis.call('HSET', fair, 'V', string.format('%d', V))
  redis.call('HINCRBY', fair, 'n', -taken)
  -- each key's queue length, less what was taken; an emptied key forgets its last tag
  local count, order = {}, {}
  for _, k in ipairs(keys) do
    if not count[k] then order[#order + 1] = k end
    count[k] = (count[k] or 0) + 1
  end
  -- under "cpu" each key's length was read as it came up and counted down as it was taken
  local lens = (not conf.cpu) and hmget_all(len_key, order) or {}
  local left, emptied, runs, tats = {}, {}, {}, {}
  for i, k in ipairs(order) do
    local n = conf.cpu and Lq[k] or tonumber(lens[i] or '0') - count[k]
    if n > 0 then
      left[#left + 1] = k
      left[#left + 1] = string.format('%d', n)
    else
      emptied[#emptied + 1] = k
    end
    if cap > 0 then
      runs[#runs + 1] = k
      runs[#runs + 1] = string.format('%d', R[k])
    end
    if key_iv > 0 then
      tats[#tats + 1] = k
      tats[#tats + 1] = string.format('%.3f', T[k])
    end
  end
  -- a hash table for good, not a listpack searched linearly nor rebuilt each time the
  -- last job acks (a third of what a key limit cost the claim and ack at 1,000 keys)
  if cap > 0 then keep_hashed(running_key) end
  hash_write(len_key, left, emptied)
  each_pair('HSET', running_key, runs)
  each_pair('HSET', tat_key, tats)
  each_chunk('HDEL', fair .. ':F', emptied)
  local gone = fair_lease(KEYS, ARGV[2], picked, {}, keys, out, cols)
  if cap > 0 then
    for _, k in ipairs(gone) do -- no record (a drift): not running after all
      if redis.call('HINCRBY', running_key, k, -1) <= 0 then redis.call('HDEL', running_key, k) end
    end
  end
end

-- a key's rate time at or before now says what no time says (it may start): such times are
-- pruned, 32 looked at per claim, so `:tat` holds the keys started lately, not every key ever
-- seen (the scan's cursor: 'tat_at' in the fair hash). Kept a hash table for good: emptied
-- by the prune and rebuilt small by the next claim, it cost a limit half as much again.
if key_iv > 0 then
  keep_hashed(tat_key)
  local r = redis.call('HSCAN', tat_key, redis.call('HGET', fair, 'tat_at') or '0', 'COUNT', 32)
  local stale, got = {}, r[2]
  for i = 1, #got, 2 do
    local t = tonumber(got[i + 1])
    if t and t <= now then stale[#stale + 1] = got[i] end
  end
  each_chunk('HDEL', tat_key, stale)
  redis.call('HSET', fair, 'tat_at', r[1])
end

-- when to claim next: now while jobs are queued, else the earliest due job or rate-held key
local head = nil
if redis.call('EXISTS', jobs) == 1 then
  head = now
else
  head = head_due(KEYS[1])
  local first = key_iv > 0 and redis.call('ZRANGE', wait, 0, 0, 'WITHSCORES') or {}
  if first[2] and (head == nil or tonumber(first[2]) < head) then head = tonumber(first[2]) end
end
head = rate.started(KEYS[7], (#out - 1) / 5 - n_expired, head)
if head ~= nil then out[1] = string.format('%d', head) end
if deadlines then deadlines_told(KEYS[12], out, 5, cols) end
claim_cols_told(out, cols)
return out

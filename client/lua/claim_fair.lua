-- Claim due jobs of a topic with fairness (tenant keys; prelude.lua says where they live):
-- due jobs move from the time index into their key's queue, and keys take turns by start-time
-- fair queueing: the ready key with the smallest start tag starts its earliest job and its tag
-- grows by the job's cost over the key's weight (cost 1 for share "jobs"; for "cpu", what the
-- key's attempts burned of late, corrected when they end: key_charge.lua). A key that comes
-- back starts at the clock, so an idle key saves no credit. A key at its concurrency limit,
-- over its rate or paused leaves `ready` and blocks no other key.
-- KEYS[1]: time index (prelude.lua)   KEYS[2]: lease zset   KEYS[3]: job hash   KEYS[4]: attempt hash
-- KEYS[5]: error hash   KEYS[6]: paused flag   KEYS[7]: rate limiter (claim.lua)   KEYS[8]: account hash
-- KEYS[9]: journal hash (step.lua)   KEYS[10]: suspended hash (suspend.lua)   KEYS[11]: fair hash
-- ARGV[1]: now ms   ARGV[2]: lease deadline ms   ARGV[3]: most jobs to claim
-- ARGV[4]: the topic's rate interval in ms (0: none)   ARGV[5]: its burst
-- ARGV[6]: take jobs due by this ms (claim.lua; now under any rate)
-- ARGV[7]: share: 'jobs' or 'cpu'   ARGV[8]: jobs at once per key (0: any)
-- ARGV[9]: a key's rate interval in ms (0: none)   ARGV[10]: its burst
-- ARGV[11]: wake channel   ARGV[12]: topic
-- Returns: as claim.lua, with each job's key as an eighth entry
if redis.call('EXISTS', KEYS[6]) == 1 then
  return { -2 }
end
local fair = KEYS[11]
local now = tonumber(ARGV[1])
local most = tonumber(ARGV[3])
local interval = tonumber(ARGV[4])
local key_iv = tonumber(ARGV[9])
local due_by = math.max(now, tonumber(ARGV[6]))
if interval > 0 or key_iv > 0 then due_by = now end
local conf = fair_conf(fair)
-- jobs queued the other way (claim_tagged.lua: the topic's settings changed): back first
if conf.mode ~= 'keys' and redis.call('HEXISTS', fair, 'on') == 1 then
  if fair_unqueue(KEYS[1], KEYS[3], fair, 1000) > 0 then return { string.format('%d', now) } end
end
conf.mode, conf.cap, conf.iv = 'keys', tonumber(ARGV[8]), key_iv
conf.tau = tonumber(ARGV[10]) * key_iv
redis.call('HSET', fair, 'mode', 'keys', 'cap', ARGV[8], 'iv', ARGV[9], 'tau', string.format('%.3f', conf.tau),
  'wake', ARGV[11], 'topic', ARGV[12], 'share', ARGV[7])
local ready, idle, wait = fair .. ':ready', fair .. ':idle', fair .. ':wait'
local function queue(k) return fair .. ':q:' .. k end

-- the topic's own rate (GCRA, as claim.lua)
local rate = topic_rate(KEYS[7], now, interval, tonumber(ARGV[5]))
most = math.min(most, rate.most)

-- tags behind the clock are the clock: forget them
redis.call('ZREMRANGEBYSCORE', idle, '-inf', conf.V)
-- keys whose rate allows a start again
for _, k in ipairs(redis.call('ZRANGEBYSCORE', wait, '-inf', now, 'LIMIT', 0, 1000)) do
  redis.call('ZREM', wait, k)
  if redis.call('EXISTS', queue(k)) == 1 then fair_enter(fair, k, now, conf) end
end
-- jobs that became due into their keys' queues, a bounded number per call (jobs enqueued due
-- go there at once: enqueue.lua)
local PROMOTE = 1000
local ids, dues = index_take(KEYS[1], due_by, PROMOTE)
if #ids > 0 then fair_queue(fair, ids, dues, hmget_all(fair .. ':of', ids), now, conf) end
redis.call('HSET', fair, 'on', '1')

-- Pick: keys come from `ready` by smallest tag (list A, sorted as popped); a served key goes
-- back into list B (sorted by its new tag); the next key is the smaller of A's and B's heads,
-- and more are popped from `ready` whenever both are behind what is left there. What is left
-- in A and B goes back to `ready` at the end, in one call. Tags are integers: a job costs
-- 1,000,000 / weight (share "jobs") or its CPU in us / weight ("cpu"), so they format cheaply.
local weights_key, running_key, tat_key, cost_key = fair .. ':weight', fair .. ':running', fair .. ':tat', fair .. ':cost'
local len_key = fair .. ':len'
local cpu = ARGV[7] == 'cpu'
local avg = cpu and tonumber(redis.call('HGET', fair, 'avg') or '1000') or 1000
local At, Ak, ia = {}, {}, 1
local Bt, Bk, ib = {}, {}, 1
local L, W, R, T, C, take = {}, {}, {}, {}, {}, {}
local threshold = nil -- the smallest tag left in `ready`, or nil
local function refill(n)
  local got = redis.call('ZPOPMIN', ready, n)
  local fresh = {}
  for i = 1, #got, 2 do
    local k = got[i]
    At[#At + 1] = tonumber(got[i + 1])
    Ak[#Ak + 1] = k
    if not L[k] then fresh[#fresh + 1] = k end
  end
  if #fresh > 0 then
    local len = redis.call('HMGET', len_key, unpack(fresh))
    local w = redis.call('HMGET', weights_key, unpack(fresh))
    local r = conf.cap > 0 and redis.call('HMGET', running_key, unpack(fresh)) or {}
    local t = key_iv > 0 and redis.call('HMGET', tat_key, unpack(fresh)) or {}
    local c = cpu and redis.call('HMGET', cost_key, unpack(fresh)) or {}
    for i, k in ipairs(fresh) do
      L[k], W[k], R[k] = tonumber(len[i] or '0'), tonumber(w[i] or '1'), tonumber(r[i] or '0')
      T[k], C[k], take[k] = tonumber(t[i] or '0'), tonumber(c[i] or avg), 0
    end
  end
  local next_one = redis.call('ZRANGE', ready, 0, 0, 'WITHSCORES')
  threshold = next_one[2] and tonumber(next_one[2]) or nil
end
local function back_in(tag, k) -- into B, sorted (ties after their equals)
  local lo, hi = ib, #Bt + 1
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if Bt[mid] <= tag then lo = mid + 1 else hi = mid end
  end
  table.insert(Bt, lo, tag)
  table.insert(Bk, lo, k)
end
local served, touched, resting, held = {}, {}, {}, {}
local taken, V = 0, conf.V
local function rest(tag, k) -- out of `ready`: its tag kept in `idle`
  resting[#resting + 1] = string.format('%d', tag)
  resting[#resting + 1] = k
end
while taken < most do
  local a, b = At[ia], Bt[ib]
  local best = (a and (not b or a <= b)) and a or b
  if best == nil or (threshold and best > threshold) then
    refill(most - taken)
    a, b = At[ia], Bt[ib]
    best = (a and (not b or a <= b)) and a or b
    if best == nil then break end
  end
  local tag, k
  if a == best then
    tag, k = a, Ak[ia]
    ia = ia + 1
  else
    tag, k = b, Bk[ib]
    ib = ib + 1
  end
  if conf.cap > 0 and R[k] >= conf.cap then
    rest(tag, k) -- at its cap (counted elsewhere meanwhile): held
  elseif key_iv > 0 and math.max(T[k], now) - conf.tau > now then
    rest(tag, k) -- its rate allows no start yet
    held[#held + 1] = string.format('%d', math.ceil(T[k] - conf.tau))
    held[#held + 1] = k
  elseif L[k] <= 0 then
    rest(tag, k) -- emptied meanwhile
  else
    if tag > V then V = tag end
    taken = taken + 1
    served[taken] = k
    if take[k] == 0 then touched[#touched + 1] = k end
    take[k] = take[k] + 1
    L[k] = L[k] - 1
    R[k] = R[k] + 1
    local finish = tag + math.max(1, math.floor((cpu and C[k] or 1000000) / W[k]))
    if key_iv > 0 then T[k] = math.max(T[k], now) + key_iv end
    if L[k] <= 0 or (conf.cap > 0 and R[k] >= conf.cap) then
      rest(finish, k)
    elseif key_iv > 0 and T[k] - conf.tau > now then
      rest(finish, k)
      held[#held + 1] = string.format('%d', math.ceil(T[k] - conf.tau))
      held[#held + 1] = k
    else
      back_in(finish, k)
    end
  end
end
-- what is left in A and B goes back to `ready`; the rest to `idle` (and `wait`)
local back = {}
for i = ia, #At do
  back[#back + 1] = string.format('%d', At[i])
  back[#back + 1] = Ak[i]
end
for i = ib, #Bt do
  back[#back + 1] = string.format('%d', Bt[i])
  back[#back + 1] = Bk[i]
end
-- `command key` with the flat pairs of each of `lists` ({ key, pairs }), in chunks
local function pairs_to(command, lists)
  for _, t in ipairs(lists) do
    local key, list = t[1], t[2]
    for i = 1, #list, 2 * CHUNK do
      redis.call(command, key, unpack(list, i, math.min(i + 2 * CHUNK - 1, #list)))
    end
  end
end
pairs_to('ZADD', { { ready, back }, { idle, resting }, { wait, held } })
redis.call('HSET', fair, 'V', string.format('%d', V))

-- each key's earliest jobs, in the order the keys were served
local out = { -1 }
if taken > 0 then
  local popped, at, lens, emptied, runs, tats = {}, {}, {}, {}, {}, {}
  for _, k in ipairs(touched) do
    popped[k] = redis.call('ZPOPMIN', queue(k), take[k])
    at[k] = 1
    if L[k] > 0 then
      lens[#lens + 1] = k
      lens[#lens + 1] = string.format('%d', L[k])
    else
      emptied[#emptied + 1] = k
    end
    if conf.cap > 0 then
      runs[#runs + 1] = k
      runs[#runs + 1] = string.format('%d', R[k])
    end
    if key_iv > 0 then
      tats[#tats + 1] = k
      tats[#tats + 1] = string.format('%.3f', T[k])
    end
  end
  pairs_to('HSET', { { len_key, lens }, { running_key, runs }, { tat_key, tats } })
  each_chunk('HDEL', len_key, emptied)
  redis.call('HINCRBY', fair, 'n', -taken)
  local ids, dues, keys = {}, {}, {}
  for _, k in ipairs(served) do
    local p, i = popped[k], at[k]
    if p[i] then
      ids[#ids + 1] = p[i]
      dues[#dues + 1] = p[i + 1]
      keys[#keys + 1] = k
      at[k] = i + 2
    end
  end
  local gone = fair_lease(KEYS, ARGV[2], ids, dues, keys, out)
  if conf.cap > 0 then
    for _, k in ipairs(gone) do -- no record (a drift): not running after all
      if redis.call('HINCRBY', running_key, k, -1) <= 0 then redis.call('HDEL', running_key, k) end
    end
  end
end

-- when to claim next: now while a key is ready, else the earliest due job or rate-held key
local head = nil
if redis.call('ZCARD', ready) > 0 then
  head = now
else
  head = head_due(KEYS[1])
  local held = redis.call('ZRANGE', wait, 0, 0, 'WITHSCORES')
  if held[2] and (head == nil or tonumber(held[2]) < head) then head = tonumber(held[2]) end
end
head = rate.started(KEYS[7], (#out - 1) / 8, head)
if head ~= nil then out[1] = string.format('%d', head) end
return out

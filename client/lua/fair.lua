-- Prepended, after prelude.lua, to the scripts that queue, pick or move jobs per tenant key
-- (claim_fair.lua, claim_tagged.lua, enqueue.lua, cancel.lua, key_pause.lua, fair_off.lua);
-- where the state lives: prelude.lua, "Tenant keys". Not in the prelude: every other script
-- would define these functions on every call for nothing.

-- Key `k` leaves `ready` (and `wait`): it has no job to start, or is paused; its tag is kept.
local function fair_rest(fair, k)
  local tag = redis.call('ZSCORE', fair .. ':ready', k)
  if tag then
    redis.call('ZREM', fair .. ':ready', k)
    redis.call('ZADD', fair .. ':idle', tag, k)
  end
  redis.call('ZREM', fair .. ':wait', k)
end

-- A job's cost in tags under share "jobs" at weight 1 (a key of weight w: UNIT / w).
local FAIR_UNIT = 1000000

-- Tagged mode (claim_tagged.lua: share "jobs", no per-key limit): each due job gets its
-- finish tag when queued, max(V, the key's last tag) + UNIT / weight, kept per key in
-- `<fair>:F`, and waits in the one zset `<fair>:jobs` (id -> tag) with every other key's:
-- a claim pops the smallest tags. `by`/`order`: the jobs per key as fair_queue groups them.
local function fair_tag(fair, by, order, conf)
  local F = redis.call('HMGET', fair .. ':F', unpack(order))
  local W = redis.call('HMGET', fair .. ':weight', unpack(order))
  local tagged, last, lens, total = {}, {}, {}, 0
  for i, k in ipairs(order) do
    local t = by[k] -- due, id, due, id, ... in the order the jobs came
    local n = #t / 2
    local idx = {}
    for j = 1, n do idx[j] = j end
    local ordered = true
    for j = 2, n do if tonumber(t[2 * j - 1]) < tonumber(t[2 * j - 3]) then ordered = false break end end
    if not ordered then
      table.sort(idx, function(a, b) return tonumber(t[2 * a - 1]) < tonumber(t[2 * b - 1]) end)
    end
    local f = math.max(conf.V, tonumber(F[i] or '0'))
    local step = math.max(1, math.floor(FAIR_UNIT / tonumber(W[i] or '1')))
    for _, j in ipairs(idx) do
      f = f + step
      tagged[#tagged + 1] = string.format('%d', f)
      tagged[#tagged + 1] = t[2 * j]
    end
    last[#last + 1] = k
    last[#last + 1] = string.format('%d', f)
    lens[#lens + 1] = k
    lens[#lens + 1] = n
    total = total + n
  end
  for i = 1, #tagged, 2 * CHUNK do
    redis.call('ZADD', fair .. ':jobs', unpack(tagged, i, math.min(i + 2 * CHUNK - 1, #tagged)))
  end
  redis.call('HSET', fair .. ':F', unpack(last))
  for i = 1, #lens, 2 do redis.call('HINCRBY', fair .. ':len', lens[i], lens[i + 1]) end
  redis.call('HINCRBY', fair, 'n', total)
end

-- Queue due jobs `ids` (due at `dues`, of keys `keys`: false for none) in their keys' queues;
-- a key whose queue was empty enters its index. In tagged mode, fair_tag instead.
local function fair_queue(fair, ids, dues, keys, now, conf)
  local by, order, total = {}, {}, 0
  for j, id in ipairs(ids) do
    local k = keys[j] or ''
    local t = by[k]
    if not t then
      t = {}
      by[k] = t
      order[#order + 1] = k
    end
    t[#t + 1] = string.format('%d', dues[j])
    t[#t + 1] = id
  end
  if conf.mode == 'tagged' then return fair_tag(fair, by, order, conf) end
  for _, k in ipairs(order) do
    local t, added, q = by[k], 0, fair .. ':q:' .. k
    for i = 1, #t, 2 * CHUNK do
      added = added + redis.call('ZADD', q, unpack(t, i, math.min(i + 2 * CHUNK - 1, #t)))
    end
    if added > 0 and redis.call('HINCRBY', fair .. ':len', k, added) == added
        and not redis.call('ZSCORE', fair .. ':wait', k) then
      fair_enter(fair, k, now, conf)
    end
    total = total + added
  end
  redis.call('HINCRBY', fair, 'n', total)
end

-- Take job `id` (waiting, due at `due`) off the time index or, on a topic with fairness,
-- off its key's queue: 1 if it was in either, else 0.
local function unwait(idx, fair, id, due)
  if index_remove(idx, id, due) == 1 then return 1 end
  if redis.call('EXISTS', fair) == 0 then return 0 end
  local k = redis.call('HGET', fair .. ':of', id) or ''
  local q = fair .. ':q:' .. k
  if redis.call('ZREM', fair .. ':jobs', id) == 0 and redis.call('ZREM', fair .. ':parked:' .. k, id) == 0
      and redis.call('ZREM', q, id) == 0 then
    return 0
  end
  redis.call('HINCRBY', fair, 'n', -1)
  if redis.call('HINCRBY', fair .. ':len', k, -1) <= 0 then redis.call('HDEL', fair .. ':len', k) end
  if redis.call('EXISTS', q) == 0 then fair_rest(fair, k) end
  return 1
end

-- Lease the jobs a fair claim picked (claim_fair.lua, claim_tagged.lua; KEYS as theirs):
-- ids[j] due at dues[j] of key keys[j], until `deadline`, each attempt counted; appended to
-- `out` as claim.lua answers, with the key as an eighth entry. Returns the keys of picked
-- jobs that have no record (cancelled meanwhile: a drift), which were not leased.
local function fair_lease(KEYS, deadline, ids, dues, keys, out)
  local records = hmget_all(KEYS[3], ids)
  local attempts = hmget_all(KEYS[4], ids)
  local failures = hmget_if(KEYS[5], ids)
  local accounts = hmget_if(KEYS[8], ids)
  local journaled = hmget_if(KEYS[9], ids)
  hdel_if(KEYS[10], ids)
  local leased, counted, gone = {}, {}, {}
  local o = #out
  for i, id in ipairs(ids) do
    if records[i] then
      local attempt = (tonumber(attempts[i]) or 0) + 1
      leased[#leased + 1] = deadline
      leased[#leased + 1] = id
      counted[#counted + 1] = id
      counted[#counted + 1] = string.format('%d', attempt)
      out[o + 1] = id
      out[o + 2] = dues[i] or string.format('%d', due_of(records[i]) or 0)
      out[o + 3] = attempt
      out[o + 4] = record_of(records[i])
      out[o + 5] = failures[i] or false
      out[o + 6] = accounts[i] or false
      out[o + 7] = journaled[i] and redis.call('HGETALL', KEYS[9] .. ':' .. id) or false
      out[o + 8] = keys[i]
      o = o + 8
    else
      gone[#gone + 1] = keys[i]
    end
  end
  if #leased > 0 then
    keep_hashed(KEYS[4])
    for i = 1, #leased, 2 * CHUNK do
      redis.call('ZADD', KEYS[2], unpack(leased, i, math.min(i + 2 * CHUNK - 1, #leased)))
      redis.call('HSET', KEYS[4], unpack(counted, i, math.min(i + 2 * CHUNK - 1, #counted)))
    end
  end
  return gone
end

-- Move up to `most` jobs queued per key (either mode: `<fair>:jobs`, `:parked:<key>`,
-- `:q:<key>`) back to the time index `idx` at their due times (from the job hash `job`; one
-- no longer stored is dropped): fair claiming switched off or to the other mode. Returns how
-- many are still queued.
local function fair_unqueue(idx, job, fair, most)
  local moved = 0
  local function back(src, ids, dues)
    each_chunk('ZREM', src, ids)
    local keep, when = {}, {}
    for j, id in ipairs(ids) do
      if dues[j] then
        keep[#keep + 1] = id
        when[#when + 1] = dues[j]
      end
    end
    index_add(idx, keep, when)
    moved = moved + #ids
    redis.call('HINCRBY', fair, 'n', -#ids)
  end
  -- tagged: due times from the stored values
  local function tagged(src)
    local ids = redis.call('ZRANGE', src, 0, most - moved - 1)
    if #ids == 0 then return end
    local values, dues = hmget_all(job, ids), {}
    for j = 1, #ids do dues[j] = values[j] and (due_of(values[j]) or 0) or false end
    back(src, ids, dues)
  end
  tagged(fair .. ':jobs')
  for _, k in ipairs(redis.call('HKEYS', fair .. ':len')) do
    if moved >= most then break end
    tagged(fair .. ':parked:' .. k)
    local q = fair .. ':q:' .. k
    local got = redis.call('ZRANGE', q, 0, most - moved - 1, 'WITHSCORES')
    if #got > 0 then
      local ids, dues = {}, {}
      for i = 1, #got, 2 do
        ids[#ids + 1] = got[i]
        dues[#dues + 1] = tonumber(got[i + 1])
      end
      back(q, ids, dues)
    end
    if redis.call('EXISTS', q) == 0 and redis.call('EXISTS', fair .. ':parked:' .. k) == 0 then
      redis.call('HDEL', fair .. ':len', k)
    end
  end
  local left = tonumber(redis.call('HGET', fair, 'n') or '0')
  if left <= 0 and redis.call('EXISTS', fair .. ':jobs') == 0 then
    redis.call('DEL', fair .. ':ready', fair .. ':wait', fair .. ':idle', fair .. ':len', fair .. ':F')
    redis.call('HSET', fair, 'n', '0')
    return 0
  end
  return math.max(left, 1)
end

-- The topic's own rate for a fair claim (GCRA, as claim.lua keeps it in `key`): how many it
-- may start now (`most`; math.huge without a rate), and `started(key, n, head)` to count n
-- starts and answer when the next may be, given the next due time `head`.
local function topic_rate(key, now, interval, burst)
  if interval <= 0 then
    return { most = math.huge, started = function(_, _, head) return head end }
  end
  local tau = burst * interval
  local tat = math.max(tonumber(redis.call('GET', key) or '0'), now)
  return {
    most = math.floor((now + tau - tat) / interval) + 1,
    started = function(k, n, head)
      if n > 0 then
        tat = tat + n * interval
        redis.call('SET', k, string.format('%.3f', tat), 'PX', math.ceil(tat - now + tau) + 1000)
      end
      if head ~= nil then head = math.max(head, math.ceil(tat - tau)) end
      return head
    end,
  }
end

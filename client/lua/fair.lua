-- What a script uses of this file is prepended to it after prelude.lua's and index.lua's
-- (client/src/scripts.rs: with_libraries): tenant keys' queues, for the scripts that queue,
-- pick or move jobs per tenant key (claim_fair.lua, enqueue.lua, cancel.lua, key_pause.lua,
-- fair_off.lua, release.lua, requeue.lua); where the state lives: prelude.lua, "Tenant keys".

-- A job's cost in tags under share "jobs" at weight 1 (a key of weight w: UNIT / w); under
-- "cpu" a job costs the key's CPU per job in us (its moving average, key_charge.lua).
local FAIR_UNIT = 1000000
-- Under share "cpu", the most jobs of one key tagged at once: the rest are tagged as their
-- turn comes, with what the key's jobs cost by then.
local WINDOW = 32

-- What a job of each key in `order` costs in tags now (fair hash `fair`, `conf`: fair_conf).
local function fair_steps(fair, order, conf)
  local W = redis.call('HMGET', fair .. ':weight', unpack(order))
  local C = conf.cpu and redis.call('HMGET', fair .. ':cost', unpack(order)) or {}
  local avg = conf.cpu and tonumber(redis.call('HGET', fair, 'avg') or '1000') or FAIR_UNIT
  local steps = {}
  for i, k in ipairs(order) do
    local cost = conf.cpu and tonumber(C[i] or avg) or FAIR_UNIT
    steps[k] = math.max(1, math.floor(cost / tonumber(W[i] or '1')))
  end
  return steps
end

-- Tag jobs (ids and dues, each key's in `by[k]` as due, id, due, id, ... in order `order`):
-- each gets max(V, its key's last tag) + its key's step and joins `<fair>:jobs`; under
-- "cpu", beyond a key's WINDOW they wait in its `:q:<key>` instead. `fresh`: these jobs are
-- new to the queue (counted in `:len` and 'n'), not moved up from `:q:`.
local function fair_tag(fair, by, order, conf, fresh)
  local F = redis.call('HMGET', fair .. ':F', unpack(order))
  local inw = conf.cpu and redis.call('HMGET', fair .. ':w', unpack(order)) or {}
  local steps = fair_steps(fair, order, conf)
  local tagged, last, lens, wins, total = {}, {}, {}, {}, 0
  local front = fresh and redis.call('EXISTS', fair .. ':front') == 1
  for i, k in ipairs(order) do
    local t = by[k]
    local early = 0
    if front then -- jobs given back after they started: just before the key's first tag
      local ids = {}
      for j = 2, #t, 2 do ids[#ids + 1] = t[j] end
      local marked = redis.call('HMGET', fair .. ':front', unpack(ids))
      local rest, first = {}, {}
      for j, id in ipairs(ids) do
        local list = marked[j] and first or rest
        list[#list + 1] = t[2 * j - 1]
        list[#list + 1] = id
      end
      if #first > 0 then
        each_chunk('HDEL', fair .. ':front', (function()
          local f = {}
          for j = 2, #first, 2 do f[#f + 1] = first[j] end
          return f
        end)())
        local head = redis.call('ZRANGE', fair .. ':parked:' .. k, 0, 0, 'WITHSCORES')
        local lo = math.min(conf.V, tonumber(head[2] or conf.V))
        for j = 2, #first, 2 do
          tagged[#tagged + 1] = string.format('%d', lo - (#first - j) / 2 - 1)
          tagged[#tagged + 1] = first[j]
        end
        early = #first / 2
        t = rest
      end
    end
    local n = #t / 2
    local idx = {}
    for j = 1, n do idx[j] = j end
    local ordered = true
    for j = 2, n do if tonumber(t[2 * j - 1]) < tonumber(t[2 * j - 3]) then ordered = false break end end
    if not ordered then
      table.sort(idx, function(a, b) return tonumber(t[2 * a - 1]) < tonumber(t[2 * b - 1]) end)
    end
    local room = n
    if conf.cpu then
      local q = fair .. ':q:' .. k
      room = (fresh and redis.call('EXISTS', q) == 1) and 0 or math.max(0, WINDOW - tonumber(inw[i] or '0'))
      if room < n then
        local wait = {}
        for j = room + 1, n do
          wait[#wait + 1] = t[2 * idx[j] - 1]
          wait[#wait + 1] = t[2 * idx[j]]
        end
        each_pair('ZADD', q, wait)
      end
      room = math.min(room, n)
      if room + early > 0 then
        wins[#wins + 1] = k
        wins[#wins + 1] = string.format('%d', tonumber(inw[i] or '0') + room + early)
      end
    end
    local f = math.max(conf.V, tonumber(F[i] or '0'))
    for j = 1, room do
      f = f + steps[k]
      tagged[#tagged + 1] = string.format('%d', f)
      tagged[#tagged + 1] = t[2 * idx[j]]
    end
    if room > 0 then
      last[#last + 1] = k
      last[#last + 1] = string.format('%d', f)
    end
    lens[#lens + 1] = k
    lens[#lens + 1] = n + early
    total = total + n + early
  end
  each_pair('ZADD', fair .. ':jobs', tagged)
  each_pair('HSET', fair .. ':F', last)
  hash_write(fair .. ':w', wins, {})
  if fresh then
    local had = hmget_all(fair .. ':len', order)
    for i = 2, #lens, 2 do lens[i] = string.format('%d', tonumber(had[i / 2] or '0') + lens[i]) end
    hash_write(fair .. ':len', lens, {})
    redis.call('HINCRBY', fair, 'n', total)
  end
end

-- Jobs `ids` of a topic with fairness go back to wait after they started (released, or their
-- lease expired): marked in `<fair>:front` so that, tagged again, each goes before its key's
-- other jobs and a key served one at a time keeps its order (fair.lua: fair_tag).
local function fair_front(fair, ids)
  if #ids == 0 or redis.call('HEXISTS', fair, 'on') == 0 then return end
  local marks = {}
  for _, id in ipairs(ids) do
    marks[#marks + 1] = id
    marks[#marks + 1] = '1'
  end
  hash_write(fair .. ':front', marks, {})
end

-- Queue due jobs `ids` (due at `dues`, of keys `keys`: false for none): tagged by key.
local function fair_queue(fair, ids, dues, keys, conf)
  local by, order = {}, {}
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
  fair_tag(fair, by, order, conf, true)
end

-- Under share "cpu": keys `order` took jobs out of their windows; tag as many of their
-- waiting jobs (`:q:<key>`, earliest due first) as fit again.
local function fair_refill(fair, order, conf)
  local inw = redis.call('HMGET', fair .. ':w', unpack(order))
  local by, with = {}, {}
  for i, k in ipairs(order) do
    local room = WINDOW - tonumber(inw[i] or '0')
    if room > 0 then
      local got = redis.call('ZPOPMIN', fair .. ':q:' .. k, room)
      if #got > 0 then
        local t = {}
        for j = 1, #got, 2 do
          t[#t + 1] = got[j + 1]
          t[#t + 1] = got[j]
        end
        by[k] = t
        with[#with + 1] = k
      end
    end
  end
  if #with > 0 then fair_tag(fair, by, with, conf, false) end
  return #with
end

-- Take job `id` (waiting, due at `due`) off the time index or, on a topic with fairness,
-- out of its key's queue: 1 if it was in either, else 0.
local function unwait(idx, fair, id, due)
  if index_remove(idx, id, due) == 1 then
    if redis.call('EXISTS', fair .. ':front') == 1 then redis.call('HDEL', fair .. ':front', id) end
    return 1
  end
  if redis.call('EXISTS', fair) == 0 then return 0 end
  local k = redis.call('HGET', fair .. ':of', id) or ''
  if redis.call('ZREM', fair .. ':jobs', id) == 1 or redis.call('ZREM', fair .. ':parked:' .. k, id) == 1 then
    if redis.call('HEXISTS', fair .. ':w', k) == 1 and redis.call('HINCRBY', fair .. ':w', k, -1) <= 0 then
      redis.call('HDEL', fair .. ':w', k)
    end
  elseif redis.call('ZREM', fair .. ':q:' .. k, id) == 0 then
    return 0
  end
  redis.call('HINCRBY', fair, 'n', -1)
  if redis.call('HINCRBY', fair .. ':len', k, -1) <= 0 then
    redis.call('HDEL', fair .. ':len', k)
    redis.call('HDEL', fair .. ':F', k)
  end
  return 1
end

-- Lease the jobs a fair claim picked (claim_fair.lua; KEYS as its):
-- ids[j] due at dues[j] of key keys[j], until `deadline`, each attempt counted; appended to
-- `out` as claim.lua answers, with the key as a fifth entry, and what the jobs have beyond
-- that into `cols` (prelude.lua: claim_col). Returns the keys of picked jobs that have no
-- record (cancelled meanwhile: a drift), which were not leased.
local function fair_lease(KEYS, deadline, ids, dues, keys, out, cols)
  local records = hmget_all(KEYS[3], ids)
  local attempts = hmget_all(KEYS[4], ids)
  local failures = hmget_if(KEYS[5], ids)
  local accounts = hmget_if(KEYS[8], ids)
  local journaled = hmget_if(KEYS[9], ids)
  hdel_if(KEYS[10], ids)
  local leased, counted, gone = {}, {}, {}
  local o, n = #out, 0 -- counters: `#t` searches the table each time
  for i, id in ipairs(ids) do
    if records[i] then
      local attempt = (tonumber(attempts[i]) or 0) + 1
      leased[n + 1] = deadline
      leased[n + 2] = id
      counted[n + 1] = id
      counted[n + 2] = string.format('%d', attempt)
      n = n + 2
      out[o + 1] = id
      -- a number answers as an integer: no string.format per job
      out[o + 2] = dues[i] or due_of(records[i]) or 0
      out[o + 3] = attempt
      out[o + 4] = records[i] -- the stored value: the runner skips its due time
      out[o + 5] = keys[i]
      local k = (o - 1) / 5 + 1
      o = o + 5
      if failures[i] then claim_col(cols, 'f', k, failures[i]) end
      if accounts[i] then claim_col(cols, 'a', k, accounts[i]) end
      if journaled[i] then claim_col(cols, 'j', k, redis.call('HGETALL', KEYS[9] .. ':' .. id)) end
    else
      gone[#gone + 1] = keys[i]
    end
  end
  leases_write(KEYS[2], KEYS[4], leased, counted)
  return gone
end

-- Move up to `most` jobs queued per key (`<fair>:jobs`, `:parked:<key>`, `:q:<key>`) back to
-- the time index `idx` at their due times (from the job hash `job`; one no longer stored is
-- dropped): fair claiming switched off or changed its share or limits. Returns how many are
-- still queued.
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
    redis.call('DEL', fair .. ':ready', fair .. ':wait', fair .. ':idle', fair .. ':len', fair .. ':F', fair .. ':w', fair .. ':held')
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

-- What a script uses of this file is prepended to it after prelude.lua's (client/src/
-- scripts.rs: with_libraries; only `local` definitions at the top level): the time index,
-- priorities within a topic, and putting jobs back on the index. Uses the batching helpers
-- and the stored values of prelude.lua; fair.lua and the scripts use these.

-- The time index (layout 3, client/src/layout.rs): the waiting jobs of a topic by due time.
-- `idx` is a zset of buckets, bucket name -> its bound (ms); bucket `idx:<name>` is a zset
-- job id -> due ms. The buckets cut time into ranges: a bucket holds the jobs due from its
-- bound up to the next bucket's, the first one also those due before its bound (the bound
-- then moves down to them). No bucket is empty. A bucket that grows past SPLIT_AT entries
-- is cut into buckets of about BUCKET: Redis keeps a zset of up to 128 entries as one
-- listpack (about 20 bytes a job, against 110 in one big zset), and a change touches a small
-- structure whatever the backlog.
local BUCKET = 48
local SPLIT_AT = 96
local LISTPACK_MOST = 128 -- Redis's zset-max-listpack-entries, as it ships

local function bucket_key(idx, name) return idx .. ':' .. name end

-- The name and bound of the bucket whose range holds `due`, or nil when there is none.
local function bucket_holding(idx, due)
  local b = redis.call('ZREVRANGEBYSCORE', idx, due, '-inf', 'WITHSCORES', 'LIMIT', 0, 1)
  if b[1] then return b[1], tonumber(b[2]) end
  b = redis.call('ZRANGE', idx, 0, 0, 'WITHSCORES')
  if b[1] then return b[1], tonumber(b[2]) end
  return nil
end

-- Cut bucket `name` (over SPLIT_AT entries) into buckets of about BUCKET entries, never
-- between two equal due times: the first piece stays, each later one gets a new name.
local function split(idx, name)
  local key = bucket_key(idx, name)
  -- one due time throughout (a bulk enqueue due at once): nothing to cut, and not read
  local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if first[2] == last[2] then return end
  local all = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES') -- id, due, id, due, ...
  local n = #all / 2
  local starts = {} -- the entry (1-based) each new piece starts at
  local cut = BUCKET + 1
  while cut <= n do
    while cut <= n and all[2 * cut] == all[2 * cut - 2] do cut = cut + 1 end
    if n - cut + 1 < BUCKET / 2 then break end -- a crumb: the piece before keeps it
    starts[#starts + 1] = cut
    cut = cut + BUCKET
  end
  if #starts == 0 then return end
  for p, first in ipairs(starts) do
    local last = (starts[p + 1] or (n + 1)) - 1
    local piece = tostring(redis.call('INCR', idx .. ':next'))
    redis.call('ZADD', idx, all[2 * first], piece)
    local entries = {}
    for e = first, last do
      entries[#entries + 1] = all[2 * e]
      entries[#entries + 1] = all[2 * e - 1]
    end
    for c = 1, #entries, 2 * CHUNK do
      redis.call('ZADD', bucket_key(idx, piece), unpack(entries, c, math.min(c + 2 * CHUNK - 1, #entries)))
    end
  end
  -- the first piece stays under its name. A zset that grew past 128 entries is a skiplist,
  -- and Redis does not make it a listpack again as it shrinks (about 130 bytes an entry
  -- instead of 15 to 20, and slower to change): a first piece small enough is written afresh
  if starts[1] - 1 <= LISTPACK_MOST and redis.call('OBJECT', 'ENCODING', key) == 'skiplist' then
    local head = {}
    for e = 1, starts[1] - 1 do
      head[#head + 1] = all[2 * e]
      head[#head + 1] = all[2 * e - 1]
    end
    redis.call('DEL', key)
    redis.call('ZADD', key, unpack(head))
  else
    redis.call('ZREMRANGEBYRANK', key, starts[1] - 1, -1)
  end
end

-- Add jobs to the index: ids[j] due at dues[j] (numbers). The batch is taken in order of
-- due time, so jobs due in one bucket's range cost one lookup and one ZADD together.
local function index_put(idx, ids, dues)
  local sorted, ordered = {}, true
  for j = 1, #ids do
    sorted[j] = j
    if j > 1 and dues[j] < dues[j - 1] then ordered = false end
  end
  -- most batches come in order (due now, or one after another): sorting costs a comparison
  -- call per pair, a microsecond or two a job
  if not ordered then table.sort(sorted, function(a, b) return dues[a] < dues[b] end) end
  local touched, order, fresh = {}, {}, {}
  local name, low, high = nil, nil, nil -- the last bucket looked up and its range [low, high)
  for _, j in ipairs(sorted) do
    local due = dues[j]
    if not (name and due >= low and (high == nil or due < high)) then
      local bound
      name, bound = bucket_holding(idx, due)
      if name == nil then
        name = tostring(redis.call('INCR', idx .. ':next'))
        bound = due
        redis.call('ZADD', idx, due, name)
        fresh[name] = true
      elseif due < bound then
        bound = due -- before every bound: the first bucket's bound moves down
        redis.call('ZADD', idx, due, name)
      end
      local after = redis.call('ZRANGEBYSCORE', idx, '(' .. string.format('%d', bound), '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
      low, high = bound, tonumber(after[2])
    end
    local t = touched[name]
    if not t then
      t = {}
      touched[name] = t
      order[#order + 1] = name
    end
    -- as text: Redis 7.0 formats a Lua number argument with printf's %.17g (glibc's
    -- multiprecision path), about 4% of its samples at full speed; %d is cheap
    t[#t + 1] = string.format('%d', due)
    t[#t + 1] = ids[j]
  end
  for _, b in ipairs(order) do
    local t = touched[b]
    -- a bucket's worth or more due after all that an existing bucket holds (a bulk enqueue
    -- due now, behind the last one's): they start a bucket of their own, which the split
    -- below would otherwise make by reading the bucket back and moving them again
    if not fresh[b] and #t >= 2 * BUCKET then
      local top = tonumber(redis.call('ZRANGE', bucket_key(idx, b), -1, -1, 'WITHSCORES')[2])
      local after = #t + 1 -- the first entry (odd index in t) due after `top`
      while after > 1 and tonumber(t[after - 2]) > top do after = after - 2 end
      if #t - after + 1 >= 2 * BUCKET then
        local piece = tostring(redis.call('INCR', idx .. ':next'))
        redis.call('ZADD', idx, t[after], piece)
        local rest = {}
        for i = after, #t do rest[#rest + 1] = t[i] end
        for i = #t, after, -1 do t[i] = nil end
        touched[piece], fresh[piece] = rest, true
        order[#order + 1] = piece
      end
    end
  end
  for _, b in ipairs(order) do
    local key, t = bucket_key(idx, b), touched[b]
    local added = 0
    for i = 1, #t, 2 * CHUNK do
      added = added + redis.call('ZADD', key, unpack(t, i, math.min(i + 2 * CHUNK - 1, #t)))
    end
    -- split when this batch took it past SPLIT_AT, or brought a bucket's worth: a bucket of
    -- one due time cannot be cut, and is not read again for every job added to it
    local size = redis.call('ZCARD', key)
    if size > SPLIT_AT and (size - added <= SPLIT_AT or added >= BUCKET) then split(idx, b) end
  end
end

-- Drop a bucket that has become empty.
local function drop_if_empty(idx, name)
  local key = bucket_key(idx, name)
  if redis.call('EXISTS', key) == 0 then redis.call('ZREM', idx, name) end
end

-- Remove job `id`, due at `due`, from the index: 1 if it was there, else 0.
local function index_del(idx, id, due)
  local name = bucket_holding(idx, due)
  if name == nil then return 0 end
  local removed = redis.call('ZREM', bucket_key(idx, name), id)
  if removed == 1 then drop_if_empty(idx, name) end
  return removed
end

-- Take up to `most` (in all) jobs due by `now` off one index, earliest first, appended to
-- `ids` and `dues` (due times as strings). Returns the index's head (a number) when a job due
-- by `now` is left in the bucket it took the last ones from, else nil (not known).
local function index_pop(idx, now, most, ids, dues)
  while #ids < most do
    local first = redis.call('ZRANGE', idx, 0, 0, 'WITHSCORES')
    if first[1] == nil or tonumber(first[2]) > now then break end
    local key = bucket_key(idx, first[1])
    local want = most - #ids
    -- one more than wanted: when it comes, the bucket is not emptied and it is the index's head
    local got = redis.call('ZRANGEBYSCORE', key, '-inf', now, 'WITHSCORES', 'LIMIT', 0, want + 1)
    local n = math.min(#got / 2, want)
    for i = 1, 2 * n, 2 do
      ids[#ids + 1] = got[i]
      dues[#dues + 1] = got[i + 1]
    end
    if n > 0 then redis.call('ZREMRANGEBYRANK', key, 0, n - 1) end
    if #got / 2 > want then return tonumber(got[#got]) end
    if redis.call('EXISTS', key) == 1 then break end -- what is left is due later
    redis.call('ZREM', idx, first[1])
  end
  return nil
end

-- Runners sleep until their next known due time; when a job becomes due
-- earlier than anything pending before it, they must hear of it.

-- The due time (number) of the first job waiting on one index, or nil when none waits.
local function index_head(idx)
  local first = redis.call('ZRANGE', idx, 0, 0)
  if first[1] == nil then return nil end
  local head = redis.call('ZRANGE', bucket_key(idx, first[1]), 0, 0, 'WITHSCORES')
  if head[2] then return tonumber(head[2]) end
  return nil
end

-- Priority within a topic (client/src/job.rs: LOWEST_PRIORITY): a job of priority 0 (the highest,
-- and every job's unless it asks) waits on the time index `idx` itself; one of priority p
-- (1..9) on an index of its own, `idx:p<p>`, and the hash `idx:priority` says so (id -> p,
-- only for such jobs while they live). A claim takes the due jobs of priority 0 first, then
-- of 1, and so on: due order within a priority, never a job before it is due. A topic whose
-- live jobs all have priority 0 has no `idx:priority` and pays one EXISTS per call below.
local LOWEST = 9

local function level_index(idx, p)
  if p == 0 then return idx end
  return idx .. ':p' .. p
end

-- The priority of each of `ids` (numbers, 0 for none), or nil when no live job has one.
local function levels_of(idx, ids)
  local key = idx .. ':priority'
  if #ids == 0 or redis.call('EXISTS', key) == 0 then return nil end
  local got = hmget_all(key, ids)
  for j = 1, #ids do got[j] = tonumber(got[j] or '0') end
  return got
end

-- Add jobs to the index: ids[j] due at dues[j] (numbers), each at its priority.
local function index_add(idx, ids, dues)
  local levels = levels_of(idx, ids)
  if levels == nil then return index_put(idx, ids, dues) end
  local by = {}
  for j, id in ipairs(ids) do
    local p = levels[j]
    local b = by[p]
    if not b then
      b = { ids = {}, dues = {} }
      by[p] = b
    end
    b.ids[#b.ids + 1] = id
    b.dues[#b.dues + 1] = dues[j]
  end
  for p = 0, LOWEST do
    if by[p] then index_put(level_index(idx, p), by[p].ids, by[p].dues) end
  end
end

-- Remove job `id`, due at `due`, from the index of its priority: 1 if it was there, else 0.
local function index_remove(idx, id, due)
  local levels = levels_of(idx, { id })
  return index_del(level_index(idx, levels and levels[1] or 0), id, due)
end

-- Take up to `most` jobs due by `now` off the index, the highest priority first, earliest
-- first within one: ids, due times (strings), and head_due's answer when it is known on the
-- way (else nil). `plain`: the caller knows the topic has no priorities (no `idx:priority`).
local function index_take(idx, now, most, plain)
  local ids, dues = {}, {}
  local head = index_pop(idx, now, most, ids, dues)
  if plain then return ids, dues, head end
  if #ids < most and redis.call('EXISTS', idx .. ':priority') == 1 then
    for p = 1, LOWEST do
      index_pop(level_index(idx, p), now, most, ids, dues)
      if #ids >= most then break end
    end
  end
  return ids, dues, nil
end

-- The due time (number) of the first waiting job of any priority, or nil when none waits.
-- `plain` as for index_take.
local function head_due(idx, plain)
  local head = index_head(idx)
  if not plain and redis.call('EXISTS', idx .. ':priority') == 1 then
    for p = 1, LOWEST do
      local h = index_head(level_index(idx, p))
      if h and (head == nil or h < head) then head = h end
    end
  end
  return head
end

-- Put jobs that are stored (in `job`) back on the index: ids[j] due at dues[j], each value
-- rewritten with its new due time. A job no longer stored (cancelled) is left out.
local function wait_again(idx, job, ids, dues)
  local values = hmget_all(job, ids)
  local fields, back, when = {}, {}, {}
  for j, id in ipairs(ids) do
    if values[j] then
      fields[#fields + 1] = id
      fields[#fields + 1] = stored_value(dues[j], record_of(values[j]))
      back[#back + 1] = id
      when[#when + 1] = dues[j]
    end
  end
  for i = 1, #fields, 2 * CHUNK do
    redis.call('HSET', job, unpack(fields, i, math.min(i + 2 * CHUNK - 1, #fields)))
  end
  index_add(idx, back, when)
end

-- Move up to `most` jobs that wait in layout 2's zset `legacy` onto the index (`hourglass
-- migrate`, and every claim while runners of layout 2 may still add to it): how many are
-- left there.
local function absorb(idx, legacy, job, most)
  local old = redis.call('ZRANGE', legacy, 0, most - 1, 'WITHSCORES')
  if #old == 0 then return 0 end
  local ids, dues = {}, {}
  for i = 1, #old, 2 do
    ids[#ids + 1] = old[i]
    dues[#dues + 1] = tonumber(old[i + 1])
  end
  each_chunk('ZREM', legacy, ids)
  wait_again(idx, job, ids, dues)
  return redis.call('ZCARD', legacy)
end

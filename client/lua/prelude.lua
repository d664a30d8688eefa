-- Prepended to every script at load: batching helpers and the wake-up rule.
-- Every script that may wake the runners takes ARGV[1]: wake channel, ARGV[2]: topic.

-- The Redis layout these scripts write (client/src/layout.rs: LAYOUT).
local LAYOUT = '3'

-- Lua's unpack fails beyond about 8000 values: every multi-value call goes in chunks.
local CHUNK = 1000

-- Run `command key <items...>` in chunks (ZREM, HDEL, ...); the replies are not needed.
local function each_chunk(command, key, items)
  for i = 1, #items, CHUNK do
    redis.call(command, key, unpack(items, i, math.min(i + CHUNK - 1, #items)))
  end
end

-- `command key` with the flat pairs `list` (score, member or field, value, ...), in chunks.
local function each_pair(command, key, list)
  for i = 1, #list, 2 * CHUNK do
    redis.call(command, key, unpack(list, i, math.min(i + 2 * CHUNK - 1, #list)))
  end
end

-- HMGET `key` for all `fields`, in chunks: out[i] is the value of fields[i], or false.
local function hmget_all(key, fields)
  if #fields <= CHUNK then
    return #fields > 0 and redis.call('HMGET', key, unpack(fields)) or {}
  end
  local out = {}
  for i = 1, #fields, CHUNK do
    local last = math.min(i + CHUNK - 1, #fields)
    local part = redis.call('HMGET', key, unpack(fields, i, last))
    for j = 1, last - i + 1 do out[i + j - 1] = part[j] end
  end
  return out
end

-- hmget_all and each_chunk('HDEL', ...) for hashes that are often absent (a topic's
-- errors, accounts, progress): an absent key costs one EXISTS instead of an argument
-- and a reply per field. hmget_if's out[i] is then nil, not false.
local function hmget_if(key, fields)
  if redis.call('EXISTS', key) == 0 then return {} end
  return hmget_all(key, fields)
end

local function hdel_if(key, fields)
  if #fields > 0 and redis.call('EXISTS', key) == 1 then each_chunk('HDEL', key, fields) end
end

-- The same for a zset that is often absent (a topic's deadlines).
local function zrem_if(key, members)
  if #members > 0 and redis.call('EXISTS', key) == 1 then each_chunk('ZREM', key, members) end
end

-- The attempt hash holds only the jobs in flight: a few dozen fields, which Redis
-- stores as a listpack and searches linearly on every HMGET, HSET and HDEL (an
-- eighth of Redis's time at full speed). One field longer than any job id (ids
-- are at most 512 bytes) makes Redis keep it as a hash table for good, and
-- keeps the key from being deleted and recreated small when the last job leaves.
-- Made here, not once at the top: every script runs the prelude on every call, and
-- string.rep('~', 520) (520 appends) was 3.5 of the prelude's 5.7 us a call.
local function keep_hashed(key)
  redis.call('HSETNX', key, string.rep('~~~~~~~~~~~~~~~~~~~~', 26), '') -- 520 '~'
end

-- A fenced change (ack, retry, bury, release) refused for `id`, whose attempt is
-- now `current` (false: the job is gone). Replies list id, then 'newer' (a later
-- attempt owns the job) or 'gone' (cancelled, or this change already went
-- through on an earlier try) for each: redis::Refusal reads them.
local function refuse(out, id, current)
  out[#out + 1] = id
  out[#out + 1] = current and 'newer' or 'gone'
end

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
  redis.call('ZREMRANGEBYRANK', key, starts[1] - 1, -1)
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
  local touched, order = {}, {}
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
-- `ids` and `dues` (due times as strings).
local function index_pop(idx, now, most, ids, dues)
  while #ids < most do
    local first = redis.call('ZRANGE', idx, 0, 0, 'WITHSCORES')
    if first[1] == nil or tonumber(first[2]) > now then break end
    local key = bucket_key(idx, first[1])
    local got = redis.call('ZRANGEBYSCORE', key, '-inf', now, 'WITHSCORES', 'LIMIT', 0, most - #ids)
    for i = 1, #got, 2 do
      ids[#ids + 1] = got[i]
      dues[#dues + 1] = got[i + 1]
    end
    if #got > 0 then redis.call('ZREMRANGEBYRANK', key, 0, #got / 2 - 1) end
    if redis.call('EXISTS', key) == 1 then break end -- what is left is due later, or is not wanted now
    redis.call('ZREM', idx, first[1])
  end
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
-- first within one: ids, due times (strings).
local function index_take(idx, now, most)
  local ids, dues = {}, {}
  index_pop(idx, now, most, ids, dues)
  if #ids < most and redis.call('EXISTS', idx .. ':priority') == 1 then
    for p = 1, LOWEST do
      index_pop(level_index(idx, p), now, most, ids, dues)
      if #ids >= most then break end
    end
  end
  return ids, dues
end

-- The due time (number) of the first waiting job of any priority, or nil when none waits.
local function head_due(idx)
  local head = index_head(idx)
  if redis.call('EXISTS', idx .. ':priority') == 1 then
    for p = 1, LOWEST do
      local h = index_head(level_index(idx, p))
      if h and (head == nil or h < head) then head = h end
    end
  end
  return head
end

-- A job's stored value (layout 3): a zero byte, the due time it last waited for (8 bytes,
-- a big-endian double) and the record (client/src/record.rs), so that cancelling or
-- replacing a waiting job finds its bucket. Values of layout 2 (the record alone, whose
-- first byte is never zero) are read as they are.
local function stored_value(due, record)
  return '\0' .. struct.pack('>d', due) .. record
end

local function record_of(value)
  if value and string.byte(value, 1) == 0 then return string.sub(value, 10) end
  return value
end

-- The due time in a stored value, or nil for a value of layout 2.
local function due_of(value)
  if value and string.byte(value, 1) == 0 then return (struct.unpack('>d', value, 2)) end
  return nil
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

-- Publish "<topic> <due ms>" when `earliest` is before `before` (the head due before this script ran).
local function wake_if_earlier(channel, topic, earliest, before)
  if earliest ~= nil and (before == nil or earliest < before) then
    redis.call('PUBLISH', channel, topic .. ' ' .. string.format('%d', earliest))
  end
end

-- Which handler version serves a topic (rollout_sync.lua, rollout_set.lua): set `fields`
-- (a flat field, value list) in the rollout hash `key`, stamped with when and by whom,
-- and bump its generation (what runners log once).
local function rollout_changed(key, fields, now, who)
  fields[#fields + 1] = 'at'
  fields[#fields + 1] = now
  fields[#fields + 1] = 'by'
  fields[#fields + 1] = who
  redis.call('HSET', key, unpack(fields))
  redis.call('HINCRBY', key, 'gen', 1)
end

-- A job ended (acked, dead, cancelled) on a topic that keeps ends: keep `record`
-- at `key` for `keep` ms and tell its waiters ("<id>\n<json>", client/src/wait.rs).
local function ended(key, record, keep, channel, id)
  redis.call('SET', key, record, 'PX', keep)
  redis.call('PUBLISH', channel, id .. '\n{"event":"end"}')
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

-- Expiry: a job enqueued with a deadline (not started by then, it is not run) has it in the
-- zset `expire` (id -> ms) until it ends (ack, bury, cancel). A claim first takes the waiting
-- jobs whose deadline has passed, due or not, off wherever they wait (`remove(id, due)`: 1 if
-- it was waiting) and leases them with the jobs it claims: the runner ends them unrun
-- (runner/src/worker/decide.rs), so a paused runner or a backlog delays nobody's expiry past
-- the next claim. One running past its deadline is left to its own end. Returns ids and due
-- times (strings) of up to `most` of them, and whether the topic has deadlines at all.
local function expired_take(expire, lease, job, remove, now, most)
  local ids, dues = {}, {}
  if redis.call('EXISTS', expire) == 0 then return ids, dues, false end
  local past = redis.call('ZRANGEBYSCORE', expire, '-inf', now, 'LIMIT', 0, most + 64)
  if #past == 0 then return ids, dues, true end
  local values = hmget_all(job, past)
  local gone = {}
  for j, id in ipairs(past) do
    if #ids >= most then break end
    if not redis.call('ZSCORE', lease, id) then
      local due = due_of(values[j])
      if due and remove(id, due) == 1 then
        ids[#ids + 1] = id
        dues[#dues + 1] = string.format('%d', due)
      else
        gone[#gone + 1] = id -- neither waiting nor running: nothing left to expire
      end
    end
  end
  each_chunk('ZREM', expire, gone)
  return ids, dues, true
end

-- The deadlines of the claimed jobs `out` (claim.lua's answer, `stride` entries a job),
-- appended to `out` as one last entry when any has one: a list with each job's deadline (ms)
-- or false, in the order of the jobs.
local function deadlines_told(expire, out, stride)
  local ids = {}
  for o = 2, #out, stride do ids[#ids + 1] = out[o] end
  local told, any = {}, false
  for i = 1, #ids, CHUNK do
    local part = redis.call('ZMSCORE', expire, unpack(ids, i, math.min(i + CHUNK - 1, #ids)))
    for j = 1, #part do
      told[i + j - 1] = part[j] or false
      any = any or part[j] ~= false
    end
  end
  if any then out[#out + 1] = told end
end

-- Delete the journals of jobs `ids` (acked, cancelled, dropped dead letters): `marks` is the
-- topic's journal hash, id -> '1' for each job that has one at `<marks>:<id>` (step.lua).
-- A topic that never journals pays one EXISTS.
local function forget_journals(marks, ids)
  if #ids == 0 or redis.call('EXISTS', marks) == 0 then return end
  local has = hmget_all(marks, ids)
  local gone = {}
  for j, id in ipairs(ids) do
    if has[j] then
      redis.call('DEL', marks .. ':' .. id)
      gone[#gone + 1] = id
    end
  end
  each_chunk('HDEL', marks, gone)
end

-- Tenant keys (claim_fair.lua): a job may carry a key (its tenant, customer, ...), kept in
-- the hash `<fair>:of` (id -> key; a job without one has key ''). A topic with fairness
-- gives each due job a finish tag when it leaves the time index (fair.lua: fair_tag) and keeps
-- it in the one zset `<fair>:jobs` (id -> tag) with every other key's; a claim pops the
-- smallest tags. A job that comes up while its key is paused (the set `<fair>:paused`), at its
-- cap of jobs at once or over its rate is parked, tag and all, in `<fair>:parked:<key>`
-- (id -> tag) and goes back when the key may start again: on resume, when one of its jobs ends
-- (keys_released), or at the time `<fair>:wait` holds for it (key -> ms). Under share "cpu" a
-- key has at most WINDOW jobs tagged (counted in `<fair>:w`) and the rest wait in
-- `<fair>:q:<key>` (id -> due ms), tagged as their turn comes with the key's latest cost.
-- `<fair>:front`: jobs given back after they started, tagged first (fair_front);
-- `<fair>:held`: keys with jobs parked at a limit, cap or rate (key -> '1').
-- `<fair>:len`: key -> its jobs queued (tagged, parked or waiting); `<fair>:F`: key -> its
-- last tag (forgotten when it has none queued: an idle key saves no credit). The hash `fair`
-- holds the virtual clock 'V' (the largest tag started), the jobs queued 'n', and what the
-- last claim was told: 'mode' (the share, with '+limits' when a key has a limit), 'cap' (jobs
-- at once per key, 0: any), 'iv' and 'tau' (a key's rate: ms between starts, burst), 'wake'
-- and 'topic' (to wake runners); `<fair>:running`: key -> its jobs running, with a cap;
-- `<fair>:tat`: key -> the time (ms) its rate allows its next start from, pruned once past
-- (claim_fair.lua, its scan's cursor 'tat_at'; kept a hash table: keep_hashed).
-- What tags, picks and moves jobs per key is in fair.lua; here, what every script that ends a
-- lease needs.

-- The fair hash's settings.
local function fair_conf(fair)
  local c = redis.call('HMGET', fair, 'V', 'cap', 'iv', 'tau', 'wake', 'topic', 'mode')
  local mode = c[7] or 'none'
  return { V = tonumber(c[1] or '0'), cap = tonumber(c[2] or '0'), iv = tonumber(c[3] or '0'),
    tau = tonumber(c[4] or '0'), wake = c[5], topic = c[6], mode = mode,
    cpu = string.sub(mode, 1, 3) == 'cpu' }
end

-- Up to `n` of key `k`'s parked jobs (the earliest tags) back among the jobs to claim: how many.
local function fair_unpark(fair, k, n)
  if n <= 0 then return 0 end
  local parked = fair .. ':parked:' .. k
  local got = redis.call('ZPOPMIN', parked, n)
  if #got == 0 then return 0 end
  local back = {}
  for i = 1, #got, 2 do
    back[#back + 1] = got[i + 1]
    back[#back + 1] = got[i]
  end
  each_pair('ZADD', fair .. ':jobs', back)
  if redis.call('EXISTS', parked) == 0 then redis.call('HDEL', fair .. ':held', k) end
  return #got / 2
end

-- Set or delete fields of hash `key`: pairs `set` (field, value, ...), fields `del`.
local function hash_write(key, set, del)
  each_pair('HSET', key, set)
  each_chunk('HDEL', key, del)
end

-- Jobs `ids` left their leases (ack, retry, bury, release, lease expiry, sleep, cancel): each
-- is counted off its key's running jobs, and a key with jobs parked at a limit (marked in
-- `<fair>:held`) lets as many back as it may run again (the runners are woken). A topic
-- whose jobs were never claimed with a cap pays one EXISTS; one with a cap a few calls per
-- batch, not per key.
local function keys_released(fair, ids)
  local running = fair .. ':running'
  if #ids == 0 or redis.call('EXISTS', running) == 0 then return end
  local keys = hmget_all(fair .. ':of', ids)
  local freed, order = {}, {}
  for j = 1, #ids do
    local k = keys[j] or ''
    if not freed[k] then order[#order + 1] = k end
    freed[k] = (freed[k] or 0) + 1
  end
  local was = hmget_all(running, order)
  local set, del, left = {}, {}, {}
  for i, k in ipairs(order) do
    left[k] = tonumber(was[i] or '0') - freed[k]
    if left[k] > 0 then
      set[#set + 1] = k
      set[#set + 1] = string.format('%d', left[k])
    else
      del[#del + 1] = k
    end
  end
  hash_write(running, set, del)
  if redis.call('EXISTS', fair .. ':held') == 0 then return end
  local capped = hmget_all(fair .. ':held', order)
  local conf = nil
  local woke = false
  for i, k in ipairs(order) do
    if capped[i] then
      conf = conf or fair_conf(fair)
      local room = conf.cap - math.max(left[k], 0)
      if room > 0 and redis.call('SISMEMBER', fair .. ':paused', k) == 0
          and not redis.call('ZSCORE', fair .. ':wait', k) then
        if fair_unpark(fair, k, room) > 0 then woke = true end
      end
    end
  end
  if woke and conf.wake then
    local time = redis.call('TIME')
    redis.call('PUBLISH', conf.wake, conf.topic .. ' ' .. string.format('%d', tonumber(time[1]) * 1000))
  end
end

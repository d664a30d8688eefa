-- What a script uses of this file is prepended to it at load, before what it uses of
-- index.lua (the time index) and fair.lua (client/src/scripts.rs: with_libraries; at the
-- top level only `local` definitions, each to the next `local` line): batching helpers,
-- stored values, the wake-up rule, expiry, tenant-key state.
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

-- Whether any of `keys` exists: one EXISTS for the keys most topics never have (a pause,
-- deadlines, failures, accounts, journals, ...), each of which would cost a call of its own.
local function any_exists(keys)
  return redis.call('EXISTS', unpack(keys)) > 0
end

-- The attempt hash holds only the jobs in flight: a few dozen fields, which Redis
-- stores as a listpack and searches linearly on every HMGET, HSET and HDEL (an
-- eighth of Redis's time at full speed). One field longer than any job id (ids
-- are at most 512 bytes) makes Redis keep it as a hash table for good, and
-- keeps the key from being deleted and recreated small when the last job leaves.
-- Made here, not once at the top: every script runs the prelude on every call, and
-- string.rep('~', 520) (520 appends) was 3.5 of the prelude's 5.7 us a call.
local function beyond_any_id() return string.rep('~~~~~~~~~~~~~~~~~~~~', 26) end -- 520 '~'
local function keep_hashed(key)
  redis.call('HSETNX', key, beyond_any_id(), '')
end

-- Lease jobs (claim.lua, fair.lua: fair_lease): `leased` holds deadline, id pairs for the
-- lease zset, `counted` id, attempt pairs for the attempt hash. The first write of each
-- carries keep_hashed's field for the attempt hash, and the same for the lease zset, which
-- holds the jobs in flight (64 at the default concurrency): as a listpack every claim's ZADD
-- and every ack's ZREM walks it (about 1.5 us an operation more than a skiplist's at 64
-- jobs, measured in a script). One member longer than any job id, at score +inf, keeps it a
-- skiplist for good; no expiry scan reaches +inf, and whatever counts or lists leases reads
-- scores below it (counts.lua, key_stats.lua). Each goes first in its write, so Redis makes a
-- new key the right kind at once, without two calls of their own a claim.
local function leases_write(lease, attempts, leased, counted)
  for i = 1, #leased, 2 * CHUNK do
    local last = math.min(i + 2 * CHUNK - 1, #leased)
    if i == 1 then
      local keep = beyond_any_id()
      redis.call('ZADD', lease, '+inf', keep, unpack(leased, i, last))
      redis.call('HSET', attempts, keep, '', unpack(counted, i, last))
    else
      redis.call('ZADD', lease, unpack(leased, i, last))
      redis.call('HSET', attempts, unpack(counted, i, last))
    end
  end
end

-- A fenced change (ack, retry, bury, release) refused for `id`, whose attempt is
-- now `current` (false: the job is gone). Replies list id, then 'newer' (a later
-- attempt owns the job) or 'gone' (cancelled, or this change already went
-- through on an earlier try) for each: redis::Refusal reads them.
local function refuse(out, id, current)
  out[#out + 1] = id
  out[#out + 1] = current and 'newer' or 'gone'
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

-- Job `i` of the flow whose hash is `flow` ended in the flow, never reaching its topic
-- (cancelled while it waited, a skipped callback): tell those waiting on it in its topic
-- (`namespace` names the topic's events channel, client/src/keys.rs).
local function flow_job_ended(flow, i, namespace)
  local described = cjson.decode(redis.call('HGET', flow, 'x:' .. i))
  redis.call('PUBLISH', namespace .. ':{' .. described.topic .. '}:events',
    described.id .. '\n{"event":"end"}')
end

-- A job ended (acked, dead, cancelled) on a topic that keeps ends: keep `record`
-- at `key` for `keep` ms, list it among the topic's recent ends (the zset `index`, id -> ms,
-- cut by ended_trim) and tell its waiters ("<id>\n<json>", client/src/wait.rs).
local function ended(key, record, keep, channel, id, index, now)
  redis.call('SET', key, record, 'PX', keep)
  redis.call('ZADD', index, now, id)
  redis.call('PUBLISH', channel, id .. '\n{"event":"end"}')
end

-- The recent ends' index (ended) holds the newest ENDED_KEPT ends and none older than `keep`
-- ms: trimmed once per script call, in steps, so it costs a call a few commands.
local ENDED_KEPT = 10000

local function ended_trim(index, now, keep)
  redis.call('ZREMRANGEBYSCORE', index, '-inf', '(' .. string.format('%d', now - keep))
  local excess = redis.call('ZCARD', index) - ENDED_KEPT
  if excess > 0 then redis.call('ZREMRANGEBYRANK', index, 0, excess - 1) end
end

-- Logs per job (client/src/logs.rs): the hash `logs` holds each stored job's lines ("<ms>
-- <attempt> <stream> <text>"), at most `keep` bytes of them: an attempt's `chunk` is added
-- when it ends, and past `keep` the oldest lines go first, a first line '0 0 dropped <n>'
-- then counting the bytes that went. A topic's logs are all absent while no job logged.
local function logs_joined(old, chunk, keep)
  local all = (old or '') .. chunk
  if #all <= keep then return all end
  local dropped = 0
  local n, rest = string.match(all, '^0 0 dropped (%d+)\n()')
  if n then
    dropped = tonumber(n)
    all = string.sub(all, rest)
  end
  -- room for the marker line (at most 33 bytes)
  local nl = string.find(all, '\n', math.max(1, #all - keep + 40), true) or #all
  dropped = dropped + nl
  return '0 0 dropped ' .. string.format('%d', dropped) .. '\n' .. string.sub(all, nl + 1)
end

-- Add job `id`'s attempt's `chunk` ('' for none: nothing to do) to its logs.
local function logs_add(key, id, chunk, keep)
  if chunk == '' then return end
  redis.call('HSET', key, id, logs_joined(redis.call('HGET', key, id), chunk, keep))
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

-- A claim's answer (claim.lua, claim_fair.lua) gives each job `stride` entries: id, due ms,
-- attempt, record (and its key, under fairness). What most jobs lack comes after them, only
-- when a claimed job has it: one last entry, a list of tag, pairs, ... where pairs is a list of
-- job number (1-based, in the answer's order), value, ...; the tags in this order:
--   'f' its last failure   'a' its account   'j' its journal (HGETALL)   'd' its deadline ms
-- `cols` collects them: claim_col puts one, claim_cols_told appends the entry.
local CLAIM_COLS = { 'f', 'a', 'j', 'd' }

local function claim_col(cols, tag, k, value)
  local c = cols[tag]
  if c == nil then
    c = {}
    cols[tag] = c
  end
  local m = #c
  c[m + 1] = k
  c[m + 2] = value
end

-- The deadlines of the claimed jobs in `out` (`stride` entries a job), into `cols`.
local function deadlines_told(expire, out, stride, cols)
  local ids = {}
  for o = 2, #out, stride do ids[#ids + 1] = out[o] end
  for i = 1, #ids, CHUNK do
    local part = redis.call('ZMSCORE', expire, unpack(ids, i, math.min(i + CHUNK - 1, #ids)))
    for j = 1, #part do
      if part[j] then claim_col(cols, 'd', i + j - 1, part[j]) end
    end
  end
end

local function claim_cols_told(out, cols)
  local tail = {}
  for _, tag in ipairs(CLAIM_COLS) do
    if cols[tag] then
      tail[#tail + 1] = tag
      tail[#tail + 1] = cols[tag]
    end
  end
  if #tail > 0 then out[#out + 1] = tail end
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

-- Enqueue jobs into one topic. A caller id that is live (stored and not dead) is left
-- unchanged, and so is a repeat of an id earlier in the same call, unless the job asks to
-- replace a waiting one. An id reserved by an earlier unique-for enqueue is a duplicate
-- until the reservation expires, even after that job is gone. Batched: a handful of calls
-- per enqueue, not per job.
-- KEYS[1]: time index (index.lua)   KEYS[2]: job hash   KEYS[3]: dead zset   KEYS[4]: dead_info hash
-- KEYS[5]: seq counter    KEYS[6]: lease zset  KEYS[7]: attempt hash  KEYS[8]: error hash
-- KEYS[9]: the topic's layout key (stamped with LAYOUT: data a build of this layout wrote)
-- KEYS[10]: account hash   KEYS[11]: layout 2's zset of waiting jobs   KEYS[12]: journal hash (step.lua)
-- KEYS[13]: fair hash (prelude.lua: tenant keys)   KEYS[14]: expire zset (id -> deadline ms)
-- KEYS[14 + j]: the unique-for reservation key of job j (same hash tag; used only if it asks)
-- ARGV[1]: wake channel   ARGV[2]: topic   ARGV[3]: now ms (the producer's clock)
-- ARGV[4]: how many arguments each job has: 3 when no job of the call has any of the options
--          below (each argument costs Redis and Lua a string: the common bulk load sends a
--          third of them), else 9
-- ARGV[5..]: per job: id ("" to generate one), due ms, its stored value (a zero byte, the due ms
--            as a big-endian double, the encoded record: prelude.lua stored_value's bytes, built by
--            the client: record.rs encode_stored), then the options: unique-for ms (0: none),
--            replace (1: replace the waiting job with this id), account ('' for none), key ('' for none),
--            deadline ms ('' for none: not started by then, it expires; claim.lua), priority
--            ('' or '0': the highest; 1..9, index.lua: index_add)
-- Returns: flat array of id, status per job: 1 = enqueued, 0 = duplicate (already live or
--          reserved; not enqueued), 2 = replaced a waiting job (payload and due time),
--          3 = not replaced: that job is running, 4 = not replaced: that job has a journal (a
--          durable handler's steps ran on its payload)
local STRIDE = tonumber(ARGV[4])
local FIRST = 5
local levels = KEYS[1] .. ':priority'
redis.call('SET', KEYS[9], LAYOUT, 'NX')
local before = head_due(KEYS[1])
local ids, blanks = {}, 0
for i = FIRST, #ARGV, STRIDE do
  local id = ARGV[i]
  ids[(i - FIRST) / STRIDE + 1] = id
  if id == '' then blanks = blanks + 1 end
end
-- generated ids: one counter bump for the whole call
if blanks > 0 then
  local next_id = redis.call('INCRBY', KEYS[5], blanks) - blanks
  for j, id in ipairs(ids) do
    if id == '' then
      next_id = next_id + 1
      ids[j] = string.format('%d', next_id) -- as text; twice as fast as tostring
    end
  end
end
local stored = hmget_all(KEYS[2], ids)
local earliest = nil
-- seen: id -> its place k in adds; add_due, add_value, add_key by k (arrays, not hashes by id)
local seen, adds, add_due, add_value, add_key, out = {}, {}, {}, {}, {}, {}
local n_adds, n_out = 0, 0 -- counters: `#t` searches the table each time
for j, id in ipairs(ids) do
  local i = FIRST + (j - 1) * STRIDE
  local unique_for, replace, account, key, deadline, priority = 0, false, '', '', '', ''
  if STRIDE > 3 then
    unique_for, replace = tonumber(ARGV[i + 3]), ARGV[i + 4] == '1'
    account, key, deadline, priority = ARGV[i + 5], ARGV[i + 6], ARGV[i + 7], ARGV[i + 8]
  end
  local status = 1
  local had = false -- an earlier job with this id (dead, or replaced): its account goes
  if ARGV[i] == '' then
    -- a generated id that a caller already chose: take the next free one
    while stored[j] or seen[id] do
      id = tostring(redis.call('INCR', KEYS[5]))
      stored[j] = redis.call('HGET', KEYS[2], id)
    end
  elseif replace and (stored[j] or seen[id]) then
    if redis.call('ZSCORE', KEYS[6], id) then
      status = 3
    elseif not seen[id] and redis.call('HEXISTS', KEYS[12], id) == 1
        and not redis.call('ZSCORE', KEYS[3], id) then
      status = 4
    elseif seen[id] or not redis.call('ZSCORE', KEYS[3], id) then
      -- waiting: new payload and due time, attempts start over
      status = 2
      had = true
      if not seen[id] then
        local due = due_of(stored[j])
        if due then
          unwait(KEYS[1], KEYS[13], id, due)
        else
          redis.call('ZREM', KEYS[11], id) -- waiting since layout 2
        end
      end
      redis.call('HDEL', KEYS[7], id)
      redis.call('HDEL', KEYS[8], id)
    else
      -- dead: enqueued afresh
      had = true
      redis.call('ZREM', KEYS[3], id)
      redis.call('HDEL', KEYS[4], id)
    end
  elseif seen[id] then
    status = 0
  elseif unique_for > 0 and redis.call('EXISTS', KEYS[14 + j]) == 1 then
    status = 0
  elseif stored[j] then
    if redis.call('ZSCORE', KEYS[3], id) then
      -- a dead-lettered id may be enqueued afresh
      had = true
      redis.call('ZREM', KEYS[3], id)
      redis.call('HDEL', KEYS[4], id)
    else
      status = 0
    end
  end
  out[n_out + 1] = id
  out[n_out + 2] = status
  n_out = n_out + 2
  if status == 1 or status == 2 then
    if unique_for > 0 then
      redis.call('SET', KEYS[14 + j], '1', 'PX', unique_for)
    end
    if account ~= '' then
      redis.call('HSET', KEYS[10], id, account)
    elseif had then
      redis.call('HDEL', KEYS[10], id)
    end
    if key ~= '' then
      redis.call('HSET', KEYS[13] .. ':of', id, key)
    elseif had then
      redis.call('HDEL', KEYS[13] .. ':of', id)
    end
    if deadline ~= '' then
      redis.call('ZADD', KEYS[14], deadline, id)
    elseif had then
      redis.call('ZREM', KEYS[14], id)
    end
    -- after unwait above, which found a replaced job at its old priority
    if priority ~= '' and priority ~= '0' then
      redis.call('HSET', levels, id, priority)
    elseif had then
      redis.call('HDEL', levels, id)
    end
    -- a repeat of an id earlier in this call replaces that one: the last one counts
    local k = seen[id]
    if not k then
      n_adds = n_adds + 1
      k = n_adds
      adds[k] = id
      seen[id] = k
    end
    local d = tonumber(ARGV[i + 1])
    add_due[k] = d
    add_value[k] = ARGV[i + 2]
    add_key[k] = key
    if earliest == nil or d < earliest then earliest = d end
  end
end
local fields, dues = {}, add_due
for k, id in ipairs(adds) do
  fields[2 * k - 1] = id
  fields[2 * k] = add_value[k] -- the stored value, due time in front (record.rs: encode_stored)
end
for i = 1, #fields, 2 * CHUNK do
  redis.call('HSET', KEYS[2], unpack(fields, i, math.min(i + 2 * CHUNK - 1, #fields)))
end
-- on a topic that claims fairly, jobs due now get their tags at once (fair.lua): a backlog
-- enqueued at once is shared between keys from the first claim
if #adds > 0 and redis.call('HGET', KEYS[13], 'on') then
  local now = tonumber(ARGV[3])
  local later, later_due, due_ids, due_dues, due_keys = {}, {}, {}, {}, {}
  for j, id in ipairs(adds) do
    if dues[j] <= now then
      due_ids[#due_ids + 1] = id
      due_dues[#due_dues + 1] = dues[j]
      due_keys[#due_keys + 1] = add_key[j] ~= '' and add_key[j]
    else
      later[#later + 1] = id
      later_due[#later_due + 1] = dues[j]
    end
  end
  if #due_ids > 0 then fair_queue(KEYS[13], due_ids, due_dues, due_keys, fair_conf(KEYS[13])) end
  adds, dues = later, later_due
end
index_add(KEYS[1], adds, dues)
wake_if_earlier(ARGV[1], ARGV[2], earliest, before)
return out

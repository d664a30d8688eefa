-- Prepended to every script at load: batching helpers and the wake-up rule.
-- Every script that may wake the runners takes ARGV[1]: wake channel, ARGV[2]: topic.

-- The Redis layout these scripts write (client/src/layout.rs: LAYOUT).
local LAYOUT = '2'

-- Lua's unpack fails beyond about 8000 values: every multi-value call goes in chunks.
local CHUNK = 1000

-- Run `command key <items...>` in chunks (ZREM, HDEL, ...); the replies are not needed.
local function each_chunk(command, key, items)
  for i = 1, #items, CHUNK do
    redis.call(command, key, unpack(items, i, math.min(i + CHUNK - 1, #items)))
  end
end

-- HMGET `key` for all `fields`, in chunks: out[i] is the value of fields[i], or false.
local function hmget_all(key, fields)
  local out = {}
  for i = 1, #fields, CHUNK do
    local last = math.min(i + CHUNK - 1, #fields)
    local part = redis.call('HMGET', key, unpack(fields, i, last))
    for j = 1, last - i + 1 do out[i + j - 1] = part[j] end
  end
  return out
end

-- The attempt hash holds only the jobs in flight: a few dozen fields, which Redis
-- stores as a listpack and searches linearly on every HMGET, HSET and HDEL (an
-- eighth of Redis's time at full speed). One field longer than any job id (ids
-- are at most 512 bytes) makes Redis keep it as a hash table for good, and
-- keeps the key from being deleted and recreated small when the last job leaves.
local WIDE_FIELD = string.rep('~', 520)
local function keep_hashed(key)
  redis.call('HSETNX', key, WIDE_FIELD, '')
end

-- A fenced change (ack, retry, bury, release) refused for `id`, whose attempt is
-- now `current` (false: the job is gone). Replies list id, then 'newer' (a later
-- attempt owns the job) or 'gone' (cancelled, or this change already went
-- through on an earlier try) for each: redis::Refusal reads them.
local function refuse(out, id, current)
  out[#out + 1] = id
  out[#out + 1] = current and 'newer' or 'gone'
end

-- Runners sleep until their next known due time; when a job becomes due
-- earlier than anything pending before it, they must hear of it.

-- The due time (number) of the first pending job, or nil when none is pending.
local function head_due(pending)
  local head = redis.call('ZRANGE', pending, 0, 0, 'WITHSCORES')
  if head[2] then return tonumber(head[2]) end
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

-- A job ended (acked, dead, cancelled) on a topic that keeps ends: keep `record`
-- at `key` for `keep` ms and tell its waiters ("<id>\n<json>", client/src/wait.rs).
local function ended(key, record, keep, channel, id)
  redis.call('SET', key, record, 'PX', keep)
  redis.call('PUBLISH', channel, id .. '\n{"event":"end"}')
end

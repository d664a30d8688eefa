-- Give dead letters another life: back to pending, due now, with their attempts reset;
-- optionally with a new record (the job pinned to a handler version: replay on it).
-- KEYS[1]: dead zset   KEYS[2]: dead_info hash   KEYS[3]: time index (index.lua)   KEYS[4]: job hash
-- KEYS[5]: attempt hash   KEYS[6]: error hash   KEYS[7]: journal hash (step.lua): kept, unless the
--   job is given a new record (a replay on another version starts a fresh journal)
-- ARGV[1]: wake channel   ARGV[2]: topic   ARGV[3]: now ms   ARGV[4]: most jobs when no ids are given
-- ARGV[5]: 1 (ids follow), 2 (pairs of id and the record to store follow; '' keeps the record)
--   or 3 (ids follow, each job's journal dropped: it starts afresh on its version)
-- ARGV[6..]: ids (or pairs); none means the oldest ARGV[4] dead letters, records unchanged
-- Returns: the ids requeued
local before = head_due(KEYS[3])
local stride = tonumber(ARGV[5])
local reset = stride == 3
if reset then stride = 1 end
local ids, records = {}, {}
if #ARGV > 5 then
  for i = 6, #ARGV, stride do
    ids[#ids + 1] = ARGV[i]
    if stride == 2 then records[#ids] = ARGV[i + 1] end
  end
else
  ids = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[4]) - 1)
end
local out, dues = {}, {}
local now = tonumber(ARGV[3])
for j, id in ipairs(ids) do
  if redis.call('ZREM', KEYS[1], id) == 1 then
    redis.call('HDEL', KEYS[2], id)
    if redis.call('HEXISTS', KEYS[4], id) == 1 then
      if records[j] and records[j] ~= '' then
        redis.call('HSET', KEYS[4], id, records[j])
        forget_journals(KEYS[7], { id })
      elseif reset then
        forget_journals(KEYS[7], { id })
      end
      redis.call('HDEL', KEYS[5], id)
      redis.call('HDEL', KEYS[6], id)
      out[#out + 1] = id
      dues[#dues + 1] = now
    end
  end
end
wait_again(KEYS[3], KEYS[4], out, dues)
if #out > 0 then
  wake_if_earlier(ARGV[1], ARGV[2], tonumber(ARGV[3]), before)
end
return out

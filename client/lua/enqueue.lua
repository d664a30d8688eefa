-- Enqueue jobs into one topic. A caller id that is live (stored and not dead) is left
-- unchanged; so is a repeat of an id earlier in the same call. Batched: a handful of
-- calls per enqueue, not per job.
-- KEYS[1]: pending zset   KEYS[2]: job hash   KEYS[3]: dead zset   KEYS[4]: dead_info hash   KEYS[5]: seq counter
-- ARGV[1]: wake channel   ARGV[2]: topic
-- ARGV[3..]: triples of id ("" to generate one), due ms, encoded record
-- Returns: flat array of id, status per job: 1 = enqueued, 0 = already live (duplicate, not enqueued)
local before = head_due(KEYS[1])
local ids, blanks = {}, 0
for i = 3, #ARGV, 3 do
  ids[#ids + 1] = ARGV[i]
  if ARGV[i] == '' then blanks = blanks + 1 end
end
-- generated ids: one counter bump for the whole call
if blanks > 0 then
  local next_id = redis.call('INCRBY', KEYS[5], blanks) - blanks
  for j, id in ipairs(ids) do
    if id == '' then
      next_id = next_id + 1
      ids[j] = tostring(next_id)
    end
  end
end
local stored = hmget_all(KEYS[2], ids)
local earliest = nil
local seen, fields, scores, out = {}, {}, {}, {}
for j, id in ipairs(ids) do
  local i = 3 + (j - 1) * 3
  local fresh = true
  if ARGV[i] == '' then
    -- a generated id that a caller already chose: take the next free one
    while stored[j] or seen[id] do
      id = tostring(redis.call('INCR', KEYS[5]))
      stored[j] = redis.call('HEXISTS', KEYS[2], id) == 1
    end
  elseif seen[id] then
    fresh = false
  elseif stored[j] then
    if redis.call('ZSCORE', KEYS[3], id) then
      -- a dead-lettered id may be enqueued afresh
      redis.call('ZREM', KEYS[3], id)
      redis.call('HDEL', KEYS[4], id)
    else
      fresh = false
    end
  end
  out[#out + 1] = id
  if fresh then
    seen[id] = true
    fields[#fields + 1] = id
    fields[#fields + 1] = ARGV[i + 2]
    scores[#scores + 1] = ARGV[i + 1]
    scores[#scores + 1] = id
    local d = tonumber(ARGV[i + 1])
    if earliest == nil or d < earliest then earliest = d end
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
for i = 1, #fields, 2 * CHUNK do
  redis.call('HSET', KEYS[2], unpack(fields, i, math.min(i + 2 * CHUNK - 1, #fields)))
  redis.call('ZADD', KEYS[1], unpack(scores, i, math.min(i + 2 * CHUNK - 1, #scores)))
end
wake_if_earlier(ARGV[1], ARGV[2], earliest, before)
return out

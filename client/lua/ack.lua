-- Acknowledge finished jobs: delete each job and its payload, if the attempt that
-- finished is still the job's latest (nobody claimed it again after a lost lease).
-- Follow-up jobs are parked in the topic's outbox in the same step; the runner
-- delivers them right after, or a sweep does once ARGV[1] has passed.
-- Batched: a handful of calls per ack, not per job.
-- KEYS[1]: lease zset   KEYS[2]: pending zset   KEYS[3]: job hash   KEYS[4]: attempt hash   KEYS[5]: error hash
-- KEYS[6]: outbox hash   KEYS[7]: outbox_due zset   KEYS[8]: account hash
-- ARGV[1]: sweep time (ms) of follow-ups parked now
-- ARGV[2..]: triples of id, attempt, encoded follow-ups ('' for none)
-- Returns: the refused (normally none): per job, id and 'newer' or 'gone' (see refuse)
local ids = {}
for i = 2, #ARGV, 3 do ids[#ids + 1] = ARGV[i] end
local current = hmget_all(KEYS[4], ids)
local done, stale = {}, {}
for j, id in ipairs(ids) do
  local i = 2 + (j - 1) * 3
  if current[j] == ARGV[i + 1] then
    done[#done + 1] = id
    if ARGV[i + 2] ~= '' then
      local token = ARGV[i + 1] .. ':' .. id -- redis::outbox_token
      redis.call('HSET', KEYS[6], token, ARGV[i + 2])
      redis.call('ZADD', KEYS[7], ARGV[1], token)
    end
  else
    refuse(stale, id, current[j])
  end
end
each_chunk('ZREM', KEYS[1], done)
each_chunk('ZREM', KEYS[2], done)
each_chunk('HDEL', KEYS[3], done)
each_chunk('HDEL', KEYS[4], done)
each_chunk('HDEL', KEYS[5], done)
each_chunk('HDEL', KEYS[8], done)
return stale

-- Acknowledge finished jobs: delete each job and its payload, if the attempt that
-- finished is still the job's latest (nobody claimed it again after a lost lease).
-- Follow-up jobs are parked in the topic's outbox in the same step; the runner
-- delivers them right after, or a sweep does once ARGV[1] has passed.
-- Batched: a handful of calls per ack, not per job.
-- KEYS[1]: lease zset   KEYS[2]: time index (unused: a leased job is not on it)   KEYS[3]: job hash   KEYS[4]: attempt hash   KEYS[5]: error hash
-- KEYS[6]: outbox hash   KEYS[7]: outbox_due zset   KEYS[8]: account hash   KEYS[9]: progress hash
-- KEYS[9 + j]: the result key of job j (only when the topic keeps results)
-- ARGV[1]: sweep time (ms) of follow-ups parked now
-- ARGV[2]: how long ends are kept (ms; '0': the topic keeps none)   ARGV[3]: the topic's events channel
-- ARGV[4..]: quadruples of id, attempt, encoded follow-ups ('' for none), encoded end ('' for none)
-- Returns: the refused (normally none): per job, id and 'newer' or 'gone' (see refuse)
local ids = {}
for i = 4, #ARGV, 4 do ids[#ids + 1] = ARGV[i] end
local current = hmget_all(KEYS[4], ids)
local done, stale = {}, {}
for j, id in ipairs(ids) do
  local i = 4 + (j - 1) * 4
  if current[j] == ARGV[i + 1] then
    done[#done + 1] = id
    if ARGV[i + 2] ~= '' then
      local token = ARGV[i + 1] .. ':' .. id -- redis::outbox_token
      redis.call('HSET', KEYS[6], token, ARGV[i + 2])
      redis.call('ZADD', KEYS[7], ARGV[1], token)
    end
    if ARGV[i + 3] ~= '' then
      ended(KEYS[9 + j], ARGV[i + 3], ARGV[2], ARGV[3], id)
    end
  else
    refuse(stale, id, current[j])
  end
end
each_chunk('ZREM', KEYS[1], done)
each_chunk('HDEL', KEYS[3], done)
each_chunk('HDEL', KEYS[4], done)
each_chunk('HDEL', KEYS[5], done)
each_chunk('HDEL', KEYS[8], done)
each_chunk('HDEL', KEYS[9], done)
return stale

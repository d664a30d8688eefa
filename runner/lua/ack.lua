-- Acknowledge finished jobs: delete each job and its payload, if the attempt that
-- finished is still the job's latest (nobody claimed it again after a lost lease).
-- Follow-up jobs are parked in the topic's outbox in the same step; the runner
-- delivers them right after, or a sweep does once ARGV[1] has passed.
-- KEYS[1]: lease zset   KEYS[2]: pending zset   KEYS[3]: job hash   KEYS[4]: attempt hash   KEYS[5]: error hash
-- KEYS[6]: outbox hash   KEYS[7]: outbox_due zset
-- ARGV[1]: sweep time (ms) of follow-ups parked now
-- ARGV[2..]: triples of id, attempt, encoded follow-ups ('' for none)
-- Returns: the ids NOT acked because a newer attempt owns the job (normally none)
local stale = {}
for i = 2, #ARGV, 3 do
  local id, attempt, follow = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  if redis.call('HGET', KEYS[4], id) == attempt then
    redis.call('ZREM', KEYS[1], id)
    redis.call('ZREM', KEYS[2], id)
    redis.call('HDEL', KEYS[3], id)
    redis.call('HDEL', KEYS[4], id)
    redis.call('HDEL', KEYS[5], id)
    if follow ~= '' then
      local token = attempt .. ':' .. id
      redis.call('HSET', KEYS[6], token, follow)
      redis.call('ZADD', KEYS[7], ARGV[1], token)
    end
  else
    stale[#stale + 1] = id
  end
end
return stale

-- Acknowledge finished jobs: delete each job and its payload, if the attempt that
-- finished is still the job's latest (nobody claimed it again after a lost lease).
-- KEYS[1]: lease zset   KEYS[2]: pending zset   KEYS[3]: job hash   KEYS[4]: attempt hash   KEYS[5]: error hash
-- ARGV: pairs of id, attempt
-- Returns: the ids NOT acked because a newer attempt owns the job (normally none)
local stale = {}
for i = 1, #ARGV, 2 do
  local id = ARGV[i]
  if redis.call('HGET', KEYS[4], id) == ARGV[i + 1] then
    redis.call('ZREM', KEYS[1], id)
    redis.call('ZREM', KEYS[2], id)
    redis.call('HDEL', KEYS[3], id)
    redis.call('HDEL', KEYS[4], id)
    redis.call('HDEL', KEYS[5], id)
  else
    stale[#stale + 1] = id
  end
end
return stale

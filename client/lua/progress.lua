-- Record running jobs' progress: each report is kept only if the attempt that made
-- it still holds the job's lease (a late report of an attempt that ended is dropped),
-- and told on the topic's events channel.
-- KEYS[1]: lease zset   KEYS[2]: attempt hash   KEYS[3]: progress hash
-- ARGV[1]: the topic's events channel
-- ARGV[2..]: triples of id, attempt, progress (JSON)
-- Returns: how many were kept
local kept = 0
for i = 2, #ARGV, 3 do
  local id = ARGV[i]
  if redis.call('HGET', KEYS[2], id) == ARGV[i + 1] and redis.call('ZSCORE', KEYS[1], id) then
    redis.call('HSET', KEYS[3], id, ARGV[i + 2])
    redis.call('PUBLISH', ARGV[1], id .. '\n' .. ARGV[i + 2])
    kept = kept + 1
  end
end
return kept

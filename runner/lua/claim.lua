-- Claim due jobs of one topic: move up to ARGV[3] jobs due by ARGV[1] from pending to lease.
-- KEYS[1]: pending zset   KEYS[2]: lease zset   KEYS[3]: job hash   KEYS[4]: attempt hash   KEYS[5]: error hash
-- KEYS[6]: paused flag
-- ARGV[1]: now ms   ARGV[2]: lease deadline ms   ARGV[3]: most jobs to claim
-- Returns: { due ms of the first job still pending, -1 if none, -2 if the topic is paused,
--            then per job: id, due ms, attempt (the lease's fencing token), record, last failure or false }
if redis.call('EXISTS', KEYS[6]) == 1 then
  return { -2 }
end
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[3]))
local out = { -1 }
for i = 1, #due, 2 do
  local id = due[i]
  redis.call('ZREM', KEYS[1], id)
  local record = redis.call('HGET', KEYS[3], id)
  if record then
    redis.call('ZADD', KEYS[2], ARGV[2], id)
    out[#out + 1] = id
    out[#out + 1] = due[i + 1]
    out[#out + 1] = redis.call('HINCRBY', KEYS[4], id, 1)
    out[#out + 1] = record
    out[#out + 1] = redis.call('HGET', KEYS[5], id)
  end
end
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if head[2] then out[1] = head[2] end
return out

-- Give dead letters another life: back to pending, due now, with their attempts reset.
-- KEYS[1]: dead zset   KEYS[2]: dead_info hash   KEYS[3]: pending zset   KEYS[4]: job hash
-- KEYS[5]: attempt hash   KEYS[6]: error hash
-- ARGV[1]: wake channel   ARGV[2]: topic   ARGV[3]: now ms   ARGV[4]: most jobs when no ids are given
-- ARGV[5..]: ids; none means the oldest ARGV[4] dead letters
-- Returns: the ids requeued
local before = head_due(KEYS[3])
local ids = {}
if #ARGV > 4 then
  for i = 5, #ARGV do ids[#ids + 1] = ARGV[i] end
else
  ids = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[4]) - 1)
end
local out = {}
for _, id in ipairs(ids) do
  if redis.call('ZREM', KEYS[1], id) == 1 then
    redis.call('HDEL', KEYS[2], id)
    if redis.call('HEXISTS', KEYS[4], id) == 1 then
      redis.call('HDEL', KEYS[5], id)
      redis.call('HDEL', KEYS[6], id)
      redis.call('ZADD', KEYS[3], ARGV[3], id)
      out[#out + 1] = id
    end
  end
end
if #out > 0 then
  wake_if_earlier(ARGV[1], ARGV[2], tonumber(ARGV[3]), before)
end
return out

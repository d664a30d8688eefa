-- Delete dead letters and their payloads for good.
-- KEYS[1]: dead zset   KEYS[2]: dead_info hash   KEYS[3]: job hash   KEYS[4]: account hash
-- KEYS[5]: journal hash (step.lua)   KEYS[6]: fair hash (prelude.lua: tenant keys)
-- KEYS[7]: priority hash (index.lua: index_add)   KEYS[8]: logs hash (prelude.lua: logs_add)
-- ARGV[1]: most jobs when no ids are given   ARGV[2..]: ids; none means the oldest ARGV[1]
-- Returns: the ids deleted
local ids = {}
if #ARGV > 1 then
  for i = 2, #ARGV do ids[#ids + 1] = ARGV[i] end
else
  ids = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)
end
local out = {}
for _, id in ipairs(ids) do
  if redis.call('ZREM', KEYS[1], id) == 1 then
    redis.call('HDEL', KEYS[2], id)
    redis.call('HDEL', KEYS[3], id)
    redis.call('HDEL', KEYS[4], id)
    redis.call('HDEL', KEYS[6] .. ':of', id)
    redis.call('HDEL', KEYS[7], id)
    out[#out + 1] = id
  end
end
forget_journals(KEYS[5], out)
hdel_if(KEYS[8], out)
return out

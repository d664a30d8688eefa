-- Forget parked follow-ups that have been delivered to their topics.
-- KEYS[1]: outbox hash   KEYS[2]: outbox_due zset
-- ARGV: tokens
-- Returns: how many entries were cleared
local n = 0
for _, token in ipairs(ARGV) do
  n = n + redis.call('HDEL', KEYS[1], token)
  redis.call('ZREM', KEYS[2], token)
end
return n

-- Say a runner is alive until ARGV[2], with what it reports, or (ARGV[4] empty)
-- that it is leaving; forget every runner whose time ran out (killed, cut off).
-- KEYS[1]: runners' info hash   KEYS[2]: runners' alive-until zset
-- ARGV[1]: now ms   ARGV[2]: alive until (ms)   ARGV[3]: runner id   ARGV[4]: info JSON, or '' to leave
-- Returns: how many runners whose time ran out were forgotten
local gone = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '(' .. ARGV[1])
each_chunk('HDEL', KEYS[1], gone)
if #gone > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. ARGV[1])
end
if ARGV[4] == '' then
  redis.call('ZREM', KEYS[2], ARGV[3])
  redis.call('HDEL', KEYS[1], ARGV[3])
else
  redis.call('ZADD', KEYS[2], ARGV[2], ARGV[3])
  redis.call('HSET', KEYS[1], ARGV[3], ARGV[4])
end
return #gone

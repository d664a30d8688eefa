-- Forget a flow in the index of flows to sweep, unless it was marked again since it
-- was read (a runner parking a release marks it first).
-- KEYS[1]: the index zset (flow id → when to sweep it)
-- ARGV[1]: flow id   ARGV[2]: the score it was read with
-- Returns: 1 forgotten, 0 kept
if redis.call('ZSCORE', KEYS[1], ARGV[1]) == ARGV[2] then
  return redis.call('ZREM', KEYS[1], ARGV[1])
end
return 0

-- Where a job stands for someone waiting on it, read in one step so that no end
-- falls between two reads: live (stored and not dead), running (leased), its
-- progress, and the end kept for it.
-- KEYS[1]: job hash   KEYS[2]: dead zset   KEYS[3]: lease zset   KEYS[4]: progress hash
-- KEYS[5]: the job's result key
-- ARGV[1]: id
-- Returns: live (0/1), running (0/1), progress or false, end or false
local id = ARGV[1]
local live = redis.call('HEXISTS', KEYS[1], id) == 1 and not redis.call('ZSCORE', KEYS[2], id)
local running = live and redis.call('ZSCORE', KEYS[3], id) ~= false
return {
  live and 1 or 0,
  running and 1 or 0,
  redis.call('HGET', KEYS[4], id),
  redis.call('GET', KEYS[5]),
}

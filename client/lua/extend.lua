-- Extend the leases of attempts still running (or committing) on a live runner to
-- ARGV[1], never shortening one: an attempt that waits for a thread or whose commit
-- lags keeps its job while its runner is alive. A job whose lease is gone (acked,
-- retried, released, requeued) or whose attempt counter moved on (another attempt owns
-- it now) is left alone and named, so the runner stops extending it.
-- KEYS[1]: lease zset   KEYS[2]: attempt hash
-- ARGV[1]: the new deadline ms   ARGV[2..]: pairs of id, attempt
-- Returns: the ids left alone
local gone = {}
for i = 2, #ARGV, 2 do
  local id = ARGV[i]
  if redis.call('HGET', KEYS[2], id) == ARGV[i + 1] and redis.call('ZSCORE', KEYS[1], id) then
    redis.call('ZADD', KEYS[1], 'XX', 'GT', ARGV[1], id)
  else
    gone[#gone + 1] = id
  end
end
return gone

-- Create a flow in one step (client/src/flow): all of it, or nothing when its id is taken.
-- Its roots are parked in the flow's outbox as one entry ('roots'), delivered right
-- after by the caller or by a runner's sweep.
-- KEYS[1]: flow hash   KEYS[2]: flow outbox hash   KEYS[3]: flow outbox_due zset
-- ARGV[1]: now ms   ARGV[2]: sweep time (ms) of the parked roots   ARGV[3]: jobs in the flow
-- ARGV[4]: the roots' outbox entry   ARGV[5]: '1' fail fast, else '0'
-- ARGV[6..]: field, value pairs (x:i, j:i, w:i, d:i)
-- Returns: 1 created, 0 a flow with this id exists
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'n', ARGV[3], 'created', ARGV[1], 'ended', 0, 'dead', 0, 'ff', ARGV[5])
local pairs_per_call = 500
for i = 6, #ARGV, 2 * pairs_per_call do
  redis.call('HSET', KEYS[1], unpack(ARGV, i, math.min(i + 2 * pairs_per_call - 1, #ARGV)))
end
redis.call('HSET', KEYS[2], 'roots', ARGV[4])
redis.call('ZADD', KEYS[3], ARGV[2], 'roots')
return 1

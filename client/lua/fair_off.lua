-- A topic served without fairness again (queues.toml changed): the jobs queued per tenant key
-- go back on the time index, at most ARGV[1] per call, and the keys' turns are forgotten.
-- Running counts, weights, pauses and each job's key stay.
-- KEYS[1]: time index (index.lua)   KEYS[2]: job hash   KEYS[3]: fair hash (prelude.lua)
-- ARGV[1]: most jobs to move
-- Returns: how many jobs are still queued per key (call again while not 0)
local fair = KEYS[3]
if redis.call('HEXISTS', fair, 'on') == 0 then return 0 end
local left = fair_unqueue(KEYS[1], KEYS[2], fair, tonumber(ARGV[1]))
if left == 0 then
  redis.call('DEL', fair .. ':tat', fair .. ':front')
  -- running counts, kept as a hash table by one long field (claim_fair.lua): gone once none run
  if redis.call('HLEN', fair .. ':running') <= 1 then redis.call('DEL', fair .. ':running') end
  redis.call('HDEL', fair, 'n', 'V', 'on', 'mode')
end
return left

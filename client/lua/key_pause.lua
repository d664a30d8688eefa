-- Pause or resume one tenant key of a topic with fairness (claim_fair.lua): a paused key's
-- jobs are parked as they come up (and more may be enqueued) while its other keys go on;
-- resuming puts its parked jobs back with their tags.
-- KEYS[1]: fair hash (prelude.lua: tenant keys)
-- ARGV[1]: the key   ARGV[2]: '1' to pause, '0' to resume
-- Returns: 1 if this changed the key's state, 0 if it already was so
local fair, k = KEYS[1], ARGV[1]
local paused = fair .. ':paused'
if ARGV[2] == '1' then
  return redis.call('SADD', paused, k)
end
if redis.call('SREM', paused, k) == 0 then return 0 end
redis.call('ZREM', fair .. ':wait', k)
if fair_unpark(fair, k, redis.call('ZCARD', fair .. ':parked:' .. k)) > 0 then
  local conf = fair_conf(fair)
  if conf.wake then
    local time = redis.call('TIME')
    redis.call('PUBLISH', conf.wake, conf.topic .. ' ' .. string.format('%d', tonumber(time[1]) * 1000))
  end
end
return 1

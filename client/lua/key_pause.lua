-- Pause or resume one tenant key of a topic with fairness (claim_fair.lua): a paused key's
-- jobs wait (and take jobs) while its other keys go on; resuming lets it start again.
-- KEYS[1]: fair hash (prelude.lua: tenant keys)
-- ARGV[1]: the key   ARGV[2]: '1' to pause, '0' to resume
-- Returns: 1 if this changed the key's state, 0 if it already was so
local fair, k = KEYS[1], ARGV[1]
local paused = fair .. ':paused'
if ARGV[2] == '1' then
  if redis.call('SADD', paused, k) == 0 then return 0 end
  fair_rest(fair, k)
  return 1
end
if redis.call('SREM', paused, k) == 0 then return 0 end
-- tagged mode (claim_tagged.lua): the jobs parked while paused go back with their tags
local parked = fair .. ':parked:' .. k
if redis.call('EXISTS', parked) == 1 then
  local got = redis.call('ZRANGE', parked, 0, -1, 'WITHSCORES')
  local back = {}
  for i = 1, #got, 2 do
    back[#back + 1] = got[i + 1]
    back[#back + 1] = got[i]
  end
  for i = 1, #back, 2 * CHUNK do
    redis.call('ZADD', fair .. ':jobs', unpack(back, i, math.min(i + 2 * CHUNK - 1, #back)))
  end
  redis.call('DEL', parked)
  local conf = fair_conf(fair)
  if conf.wake then
    local time = redis.call('TIME')
    redis.call('PUBLISH', conf.wake, conf.topic .. ' ' .. string.format('%d', tonumber(time[1]) * 1000))
  end
end
if redis.call('EXISTS', fair .. ':q:' .. k) == 1 then
  local time = redis.call('TIME')
  local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  local conf = fair_conf(fair)
  if fair_enter(fair, k, now, conf) and conf.wake then
    redis.call('PUBLISH', conf.wake, conf.topic .. ' ' .. string.format('%d', now))
  end
end
return 1

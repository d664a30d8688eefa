-- A topic served without fairness again (queues.toml changed): the jobs queued per tenant key
-- go back on the time index, at most ARGV[1] per call, and the keys' turns are forgotten.
-- Running counts, weights, pauses and each job's key stay.
-- KEYS[1]: time index (prelude.lua)   KEYS[2]: job hash   KEYS[3]: fair hash (prelude.lua)
-- ARGV[1]: most jobs to move
-- Returns: how many jobs are still queued per key (call again while not 0)
local fair, most = KEYS[3], tonumber(ARGV[1])
if redis.call('HEXISTS', fair, 'on') == 0 then return 0 end
local keys = redis.call('HKEYS', fair .. ':len') -- every key with jobs queued
local moved = 0
for _, k in ipairs(keys) do
  if moved >= most then break end
  local q = fair .. ':q:' .. k
  local got = redis.call('ZRANGE', q, 0, most - moved - 1, 'WITHSCORES')
  if #got > 0 then
    local ids, dues = {}, {}
    for i = 1, #got, 2 do
      ids[#ids + 1] = got[i]
      dues[#dues + 1] = tonumber(got[i + 1])
    end
    each_chunk('ZREM', q, ids)
    index_add(KEYS[1], ids, dues)
    moved = moved + #ids
    redis.call('HINCRBY', fair, 'n', -#ids)
    if redis.call('EXISTS', q) == 0 then
      redis.call('HDEL', fair .. ':len', k)
    else
      redis.call('HINCRBY', fair .. ':len', k, -#ids)
    end
  end
end
local left = tonumber(redis.call('HGET', fair, 'n') or '0')
if left <= 0 then
  redis.call('DEL', fair .. ':ready', fair .. ':wait', fair .. ':idle', fair .. ':tat', fair .. ':len')
  redis.call('HDEL', fair, 'n', 'V', 'on')
  return 0
end
return left

-- What the attempts of a topic's tenant keys burned (runners send it every few hundred ms):
-- each key's cost per job (a moving average, what fair.lua tags a key's job with when the
-- share is "cpu") and, for that share, the difference between what was charged and what was
-- burned, added to the key's last tag (its jobs tagged from now on); and the CPU per key in buckets of 10 s, kept two
-- minutes, for `stats --by-key` and /metrics.
-- KEYS[1]: fair hash (prelude.lua: tenant keys)
-- ARGV[1]: now ms   ARGV[2..]: triples of key, jobs, CPU in us
-- Returns: nothing
local fair = KEYS[1]
local cpu_share = redis.call('HGET', fair, 'share') == 'cpu'
local avg = tonumber(redis.call('HGET', fair, 'avg') or '0')
local bucket = fair .. ':cpu:' .. string.format('%d', math.floor(tonumber(ARGV[1]) / 10000))
local total = 0
for i = 2, #ARGV, 3 do
  local k, n, us = ARGV[i], tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
  local per = us / math.max(n, 1)
  local was = tonumber(redis.call('HGET', fair .. ':cost', k) or '0')
  local charged = was > 0 and was or (avg > 0 and avg or 1000) -- as fair.lua charged it
  redis.call('HSET', fair .. ':cost', k, string.format('%.1f', was > 0 and (0.7 * was + 0.3 * per) or per))
  if cpu_share then
    local w = tonumber(redis.call('HGET', fair .. ':weight', k) or '1')
    local delta = string.format('%d', math.floor((us - n * charged) / w))
    if redis.call('HEXISTS', fair .. ':F', k) == 1 then redis.call('HINCRBY', fair .. ':F', k, delta) end
  end
  redis.call('ZINCRBY', bucket, us, k)
  total = total + us
  avg = avg > 0 and (0.9 * avg + 0.1 * per) or per
end
redis.call('HSET', fair, 'avg', string.format('%.1f', avg))
redis.call('HINCRBYFLOAT', bucket .. ':total', 'us', total)
redis.call('PEXPIRE', bucket, 130000)
redis.call('PEXPIRE', bucket .. ':total', 130000)

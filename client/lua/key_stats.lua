-- Per tenant key of a topic with fairness: jobs queued (due, waiting their turn), running,
-- CPU burned over the last minute (us), paused, weight; the top `ARGV[2]` keys by CPU of the
-- last minute and by jobs queued, and the totals (what the rest is, "other").
-- KEYS[1]: fair hash (prelude.lua: tenant keys)   KEYS[2]: lease zset
-- ARGV[1]: now ms   ARGV[2]: how many keys of each top list
-- Returns: { totals: queued, running, cpu us, keys with jobs queued, then per key (at most 2 x N):
--   key, queued, running, cpu us, paused (0/1), weight }
local fair, top = KEYS[1], tonumber(ARGV[2])
local now_bucket = math.floor(tonumber(ARGV[1]) / 10000)
local buckets, cpu_total = {}, 0
for b = now_bucket - 5, now_bucket do
  local key = fair .. ':cpu:' .. string.format('%d', b)
  buckets[#buckets + 1] = key
  cpu_total = cpu_total + tonumber(redis.call('HGET', key .. ':total', 'us') or '0')
end
local picked, order = {}, {}
local function pick(k)
  if not picked[k] then
    picked[k] = true
    order[#order + 1] = k
  end
end
-- by CPU: the top of each bucket, summed over all buckets below
for _, b in ipairs(buckets) do
  for _, k in ipairs(redis.call('ZREVRANGE', b, 0, top - 1)) do pick(k) end
end
-- by jobs queued: every key that has some is in ready, wait, paused or running (bounded scan)
local with_jobs = 0
local sizes = {}
local function consider(k)
  if sizes[k] == nil then
    sizes[k] = redis.call('ZCARD', fair .. ':q:' .. k)
    if sizes[k] > 0 then with_jobs = with_jobs + 1 end
  end
end
for _, k in ipairs(redis.call('ZRANGE', fair .. ':ready', 0, 99999)) do consider(k) end
for _, k in ipairs(redis.call('ZRANGE', fair .. ':wait', 0, 99999)) do consider(k) end
for _, k in ipairs(redis.call('SMEMBERS', fair .. ':paused')) do consider(k); pick(k) end
local running = redis.call('HGETALL', fair .. ':running')
for i = 1, #running, 2 do consider(running[i]) end
local by_size = {}
for k, n in pairs(sizes) do if n > 0 then by_size[#by_size + 1] = k end end
table.sort(by_size, function(a, b) return sizes[a] > sizes[b] or (sizes[a] == sizes[b] and a < b) end)
for i = 1, math.min(top, #by_size) do pick(by_size[i]) end
local out = { tonumber(redis.call('HGET', fair, 'n') or '0'), redis.call('ZCARD', KEYS[2]),
  string.format('%d', cpu_total), with_jobs }
for _, k in ipairs(order) do
  local cpu = 0
  for _, b in ipairs(buckets) do cpu = cpu + tonumber(redis.call('ZSCORE', b, k) or '0') end
  out[#out + 1] = k
  out[#out + 1] = sizes[k] or redis.call('ZCARD', fair .. ':q:' .. k)
  out[#out + 1] = tonumber(redis.call('HGET', fair .. ':running', k) or '0')
  out[#out + 1] = string.format('%d', cpu)
  out[#out + 1] = redis.call('SISMEMBER', fair .. ':paused', k)
  out[#out + 1] = redis.call('HGET', fair .. ':weight', k) or '1'
end
return out

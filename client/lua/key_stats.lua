-- Per tenant key of a topic with fairness: jobs queued (due, waiting their turn), running,
-- CPU burned over the last minute (us), paused, weight; the top `ARGV[2]` keys by CPU of the
-- last minute and by jobs queued, every paused key, and the totals (what the rest is, "other").
-- KEYS[1]: fair hash (prelude.lua: tenant keys)   KEYS[2]: lease zset
-- ARGV[1]: now ms   ARGV[2]: how many keys of each top list
-- Returns: { totals: queued, running, cpu us, keys with jobs queued, then per key listed:
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
-- by CPU: the top of each bucket (summed over all buckets below)
for _, b in ipairs(buckets) do
  for _, k in ipairs(redis.call('ZREVRANGE', b, 0, top - 1)) do pick(k) end
end
-- by jobs queued: the queue lengths of every key that has jobs queued
local lens = redis.call('HGETALL', fair .. ':len')
local sizes, by_size = {}, {}
for i = 1, #lens, 2 do
  sizes[lens[i]] = tonumber(lens[i + 1])
  by_size[#by_size + 1] = lens[i]
end
table.sort(by_size, function(a, b) return sizes[a] > sizes[b] or (sizes[a] == sizes[b] and a < b) end)
for i = 1, math.min(top, #by_size) do pick(by_size[i]) end
for _, k in ipairs(redis.call('SMEMBERS', fair .. ':paused')) do pick(k) end
-- running: the topic's leases, by their jobs' keys (as many as run: bounded by concurrency)
-- (below +inf: the member there is no job, prelude.lua: leases_write)
local leased = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '(+inf')
local running = {}
if #leased > 0 then
  local keys = hmget_all(fair .. ':of', leased)
  for j = 1, #leased do
    local k = keys[j] or ''
    running[k] = (running[k] or 0) + 1
  end
end
local out = { tonumber(redis.call('HGET', fair, 'n') or '0'), #leased,
  string.format('%d', cpu_total), #by_size }
for _, k in ipairs(order) do
  local cpu = 0
  for _, b in ipairs(buckets) do cpu = cpu + tonumber(redis.call('ZSCORE', b, k) or '0') end
  out[#out + 1] = k
  out[#out + 1] = sizes[k] or 0
  out[#out + 1] = running[k] or 0
  out[#out + 1] = string.format('%d', cpu)
  out[#out + 1] = redis.call('SISMEMBER', fair .. ':paused', k)
  out[#out + 1] = redis.call('HGET', fair .. ':weight', k) or '1'
end
return out

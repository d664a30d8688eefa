-- Claim due jobs of a topic whose tenant keys take turns by jobs, without per-key limits
-- (claim_fair.lua serves the rest): each job got its finish tag when queued (prelude.lua:
-- fair_tag), so all queued jobs wait in one zset by tag and a claim pops the smallest, one
-- call for the whole batch. A job whose key is paused is parked, tag and all, in
-- `<fair>:parked:<key>` until the key is resumed (key_pause.lua).
-- KEYS[1]: time index (prelude.lua)   KEYS[2]: lease zset   KEYS[3]: job hash   KEYS[4]: attempt hash
-- KEYS[5]: error hash   KEYS[6]: paused flag   KEYS[7]: rate limiter (claim.lua)   KEYS[8]: account hash
-- KEYS[9]: journal hash (step.lua)   KEYS[10]: suspended hash (suspend.lua)   KEYS[11]: fair hash
-- ARGV: as claim_fair.lua's (ARGV[7..10] are "jobs" and no limits here)
-- Returns: as claim_fair.lua
if redis.call('EXISTS', KEYS[6]) == 1 then
  return { -2 }
end
local fair = KEYS[11]
local now = tonumber(ARGV[1])
local most = tonumber(ARGV[3])
local interval = tonumber(ARGV[4])
local due_by = math.max(now, tonumber(ARGV[6]))
if interval > 0 then due_by = now end
local conf = fair_conf(fair)
-- jobs queued the other way (the topic's settings changed): back to the time index first
if conf.mode ~= 'tagged' and redis.call('HEXISTS', fair, 'on') == 1 then
  if fair_unqueue(KEYS[1], KEYS[3], fair, 1000) > 0 then return { string.format('%d', now) } end
end
conf.mode, conf.cap, conf.iv, conf.tau = 'tagged', 0, 0, 0
redis.call('HSET', fair, 'mode', 'tagged', 'cap', '0', 'iv', '0', 'tau', '0', 'wake', ARGV[11],
  'topic', ARGV[12], 'share', 'jobs', 'on', '1')
local jobs, len_key = fair .. ':jobs', fair .. ':len'

-- the topic's own rate (GCRA, as claim.lua)
local rate = topic_rate(KEYS[7], now, interval, tonumber(ARGV[5]))
most = math.min(most, rate.most)

-- jobs that became due get their tags (jobs enqueued due got theirs at once: enqueue.lua)
local ids, dues = index_take(KEYS[1], due_by, 1000)
if #ids > 0 then fair_queue(fair, ids, dues, hmget_all(fair .. ':of', ids), now, conf) end

-- the smallest tags; a paused key's jobs are parked as they come up
local paused = {}
if redis.call('EXISTS', fair .. ':paused') == 1 then
  for _, k in ipairs(redis.call('SMEMBERS', fair .. ':paused')) do paused[k] = true end
end
local picked, keys, parked, parked_keys = {}, {}, {}, {}
local V, taken = conf.V, 0
for _ = 1, 4 do -- a few rounds at most, should paused keys' jobs come up
  if taken >= most then break end
  local got = redis.call('ZPOPMIN', jobs, most - taken)
  if #got == 0 then break end
  local round = {}
  for i = 1, #got, 2 do round[#round + 1] = got[i] end
  local of = hmget_all(fair .. ':of', round)
  for j, id in ipairs(round) do
    local k, tag = of[j] or '', got[2 * j]
    if paused[k] then
      if not parked[k] then
        parked[k] = {}
        parked_keys[#parked_keys + 1] = k
      end
      local p = parked[k]
      p[#p + 1] = tag
      p[#p + 1] = id
    else
      taken = taken + 1
      picked[taken] = id
      keys[taken] = k
      local t = tonumber(tag)
      if t > V then V = t end
    end
  end
end
for _, k in ipairs(parked_keys) do
  local p = parked[k]
  for i = 1, #p, 2 * CHUNK do
    redis.call('ZADD', fair .. ':parked:' .. k, unpack(p, i, math.min(i + 2 * CHUNK - 1, #p)))
  end
end
local out = { -1 }
if taken > 0 then
  redis.call('HSET', fair, 'V', string.format('%d', V))
  redis.call('HINCRBY', fair, 'n', -taken)
  -- each key's queue length, less what was taken; an emptied key forgets its last tag
  local count, order = {}, {}
  for _, k in ipairs(keys) do
    if not count[k] then order[#order + 1] = k end
    count[k] = (count[k] or 0) + 1
  end
  local lens = redis.call('HMGET', len_key, unpack(order))
  local left, emptied = {}, {}
  for i, k in ipairs(order) do
    local n = tonumber(lens[i] or '0') - count[k]
    if n > 0 then
      left[#left + 1] = k
      left[#left + 1] = string.format('%d', n)
    else
      emptied[#emptied + 1] = k
    end
  end
  for i = 1, #left, 2 * CHUNK do
    redis.call('HSET', len_key, unpack(left, i, math.min(i + 2 * CHUNK - 1, #left)))
  end
  each_chunk('HDEL', len_key, emptied)
  each_chunk('HDEL', fair .. ':F', emptied)
  fair_lease(KEYS, ARGV[2], picked, {}, keys, out)
end

-- when to claim next: now while jobs are queued, else the earliest due job
local head = nil
if redis.call('EXISTS', jobs) == 1 then head = now else head = head_due(KEYS[1]) end
head = rate.started(KEYS[7], (#out - 1) / 8, head)
if head ~= nil then out[1] = string.format('%d', head) end
return out

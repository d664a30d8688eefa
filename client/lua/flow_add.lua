-- Add jobs to an open batch (client/src/flow/batch.rs): all of them, or none. They wait
-- for nothing: parked in the flow's outbox as one entry, delivered right after by the
-- caller or by a runner's sweep; each callback now waits for them too.
-- KEYS[1]: flow hash   KEYS[2]: flow outbox hash   KEYS[3]: flow outbox_due zset
-- ARGV[1]: sweep time (ms) of the parked jobs   ARGV[2]: the batch's job count the
-- caller numbered from   ARGV[3]: how many jobs are added   ARGV[4]: their payload bytes
-- ARGV[5]: most jobs   ARGV[6]: most payload bytes   ARGV[7]: their outbox entry
-- ARGV[8 .. 7 + count]: their names
-- ARGV[8 + count ..]: field, value pairs (x:i, d:i)
-- Returns: {1} added; {0} jobs were added meanwhile (number again); {-1} no such
-- flow; {-2} not a batch; {-3} sealed; {-4} cancelled; {-5, total} over the job limit;
-- {-6, bytes} over the byte limit; {-7, name} a name in use
local flow = KEYS[1]
local head = redis.call('HMGET', flow, 'n', 'batch', 'cancelled', 'bytes')
if not head[1] then return {-1} end
if not head[2] then return {-2} end
if head[2] ~= 'open' then return {-3} end
if head[3] then return {-4} end
local n, count = tonumber(head[1]), tonumber(ARGV[3])
if n ~= tonumber(ARGV[2]) then return {0} end
if n + count > tonumber(ARGV[5]) then return {-5, n + count} end
local bytes = tonumber(head[4] or '0') + tonumber(ARGV[4])
if bytes > tonumber(ARGV[6]) then return {-6, bytes} end
for k = 8, 7 + count do
  if redis.call('HEXISTS', flow, 'm:' .. ARGV[k]) == 1 then return {-7, ARGV[k]} end
end
for k = 8, 7 + count do
  redis.call('HSET', flow, 'm:' .. ARGV[k], n + k - 8)
end
local pairs_per_call = 500
for i = 8 + count, #ARGV, 2 * pairs_per_call do
  redis.call('HSET', flow, unpack(ARGV, i, math.min(i + 2 * pairs_per_call - 1, #ARGV)))
end
for m in string.gmatch(redis.call('HGET', flow, 'cb') or '', '%d+') do
  redis.call('HINCRBY', flow, 'w:' .. m, count)
end
redis.call('HSET', flow, 'n', n + count, 'bytes', bytes)
local token = 'a:' .. n
redis.call('HSET', KEYS[2], token, ARGV[7])
redis.call('ZADD', KEYS[3], ARGV[1], token)
return {1}

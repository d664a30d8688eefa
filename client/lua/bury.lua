-- Dead-letter jobs (attempts exhausted or a permanent failure), then enforce retention.
-- The record (and the job's account) stays stored so `hourglass dead retry` can requeue it.
-- KEYS[1]: lease zset   KEYS[2]: job hash   KEYS[3]: attempt hash   KEYS[4]: error hash
-- KEYS[5]: dead zset   KEYS[6]: dead_info hash   KEYS[7]: account hash   KEYS[8]: progress hash
-- KEYS[9]: journal hash (step.lua: a dead letter keeps its journal for a replay)
-- KEYS[10]: outbox hash   KEYS[11]: outbox_due zset (a flow job's notice, as ack.lua parks)
-- KEYS[12]: fair hash (prelude.lua: tenant keys; a dead letter keeps its key)
-- KEYS[13]: expire zset (prelude.lua: expired_take)   KEYS[14]: priority hash (index.lua:
-- index_add; a dead letter keeps its priority)   KEYS[15]: the topic's count of expired jobs
-- KEYS[16]: logs hash (prelude.lua: logs_add; a dead letter keeps its logs)
-- KEYS[17]: recent ends zset (prelude.lua: ended)
-- KEYS[17 + j]: the result key of job j (only when the topic keeps results; a leased job
-- is not on the time index)
-- ARGV[1]: now ms   ARGV[2]: most dead letters kept   ARGV[3]: drop dead letters older than this (ms)
-- ARGV[4]: how long ends are kept (ms; '0': the topic keeps none)   ARGV[5]: the topic's events channel
-- ARGV[6]: sweep time (ms) of what is parked now   ARGV[7]: most bytes of logs a job keeps
-- ARGV[8..]: septuples of id, attempt, info JSON (reason, attempts, last error, the job's
-- story), encoded end ('' for none), outbox entry ('' for none), how: '' (dead-lettered), 'x'
-- (expired: dead-lettered and counted) or 'd' (expired and dropped: counted, nothing kept),
-- and the attempt's log lines ('' for none)
-- Returns: the refused (normally none): per job, id and 'newer' or 'gone' (see refuse)
local stale, buried, dropped, expired = {}, {}, {}, 0
local keep, ends = tonumber(ARGV[7]), false
for i = 8, #ARGV, 7 do
  local id = ARGV[i]
  local current = redis.call('HGET', KEYS[3], id)
  if current == ARGV[i + 1] then
    local how = ARGV[i + 5]
    redis.call('ZREM', KEYS[1], id)
    buried[#buried + 1] = id
    redis.call('HDEL', KEYS[3], id)
    redis.call('HDEL', KEYS[4], id)
    if how == 'd' then
      dropped[#dropped + 1] = id
    else
      redis.call('ZADD', KEYS[5], ARGV[1], id)
      redis.call('HSET', KEYS[6], id, ARGV[i + 2])
      logs_add(KEYS[16], id, ARGV[i + 6], keep)
    end
    if how ~= '' then expired = expired + 1 end
    redis.call('HDEL', KEYS[8], id)
    if ARGV[i + 3] ~= '' then
      ended(KEYS[17 + (i - 1) / 7], ARGV[i + 3], ARGV[4], ARGV[5], id, KEYS[17], ARGV[1])
      ends = true
    end
    if ARGV[i + 4] ~= '' then
      local token = ARGV[i + 1] .. ':' .. id -- redis::outbox_token
      redis.call('HSET', KEYS[10], token, ARGV[i + 4])
      redis.call('ZADD', KEYS[11], ARGV[6], token)
    end
  else
    refuse(stale, id, current)
  end
end
if ends then ended_trim(KEYS[17], tonumber(ARGV[1]), tonumber(ARGV[4])) end
keys_released(KEYS[12], buried)
zrem_if(KEYS[13], buried)
if expired > 0 then redis.call('INCRBY', KEYS[15], expired) end
-- retention, at most 1000 removals of each kind per call so the script stays short
local function drop(ids)
  for _, id in ipairs(ids) do
    redis.call('ZREM', KEYS[5], id)
    redis.call('HDEL', KEYS[6], id)
    redis.call('HDEL', KEYS[2], id)
    redis.call('HDEL', KEYS[7], id)
    redis.call('HDEL', KEYS[12] .. ':of', id)
  end
  hdel_if(KEYS[14], ids)
  hdel_if(KEYS[16], ids)
  forget_journals(KEYS[9], ids)
end
drop(dropped)
drop(redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', '(' .. ARGV[3], 'LIMIT', 0, 1000))
local excess = redis.call('ZCARD', KEYS[5]) - tonumber(ARGV[2])
if excess > 0 then
  drop(redis.call('ZRANGE', KEYS[5], 0, math.min(excess, 1000) - 1))
end
return stale

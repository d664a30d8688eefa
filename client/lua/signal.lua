-- Send a signal to a job: kept in its journal (step.lua) for the handler's wait, and
-- when the job is suspended waiting for it, the job is due at once.
-- KEYS[1]: job hash   KEYS[2]: dead zset   KEYS[3]: journal hash   KEYS[4]: suspended hash
-- KEYS[5]: time index (index.lua)
-- ARGV[1]: wake channel   ARGV[2]: topic   ARGV[3]: now ms   ARGV[4]: id   ARGV[5]: signal name
-- ARGV[6]: payload
-- Returns: 'none' (no such live job: never enqueued, done or cancelled), 'dead' (dead-lettered),
--   'duplicate' (a signal of this name was sent to it already: the first one stands),
--   'kept' (kept until the job waits for it), 'woken' (it waited for it: due now)
local id, name = ARGV[4], ARGV[5]
if redis.call('HEXISTS', KEYS[1], id) == 0 then return 'none' end
if redis.call('ZSCORE', KEYS[2], id) then return 'dead' end
local journal = KEYS[3] .. ':' .. id
if redis.call('HSETNX', journal, 'g:' .. name, ARGV[6]) == 0 then return 'duplicate' end
redis.call('HSET', KEYS[3], id, '1')
local waits = redis.call('HGET', KEYS[4], id)
if not waits or cjson.decode(waits).signal ~= name then return 'kept' end
local before = head_due(KEYS[5])
local due = due_of(redis.call('HGET', KEYS[1], id))
if due == nil or index_remove(KEYS[5], id, due) == 0 then return 'kept' end -- claimed meanwhile
local now = tonumber(ARGV[3])
wait_again(KEYS[5], KEYS[1], { id }, { now })
wake_if_earlier(ARGV[1], ARGV[2], now, before)
return 'woken'

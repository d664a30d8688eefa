-- Wake a suspended job now: its sleep ends (a wait for a signal times out), and it is due
-- at once. An operator's command (`hourglass wake`), not a handler's.
-- KEYS[1]: job hash   KEYS[2]: journal hash (step.lua)   KEYS[3]: suspended hash
-- KEYS[4]: time index (index.lua)
-- ARGV[1]: wake channel   ARGV[2]: topic   ARGV[3]: now ms   ARGV[4]: id
-- Returns: 'none' (no such live job), 'awake' (the job is not suspended), 'woken'
local id = ARGV[4]
if redis.call('HEXISTS', KEYS[1], id) == 0 then return 'none' end
local waits = redis.call('HGET', KEYS[3], id)
if not waits then return 'awake' end
local before = head_due(KEYS[4])
local due = due_of(redis.call('HGET', KEYS[1], id))
if due == nil or index_remove(KEYS[4], id, due) == 0 then return 'awake' end -- claimed meanwhile
redis.call('HSET', KEYS[2] .. ':' .. id, cjson.decode(waits).timer, ARGV[3])
local now = tonumber(ARGV[3])
wait_again(KEYS[4], KEYS[1], { id }, { now })
wake_if_earlier(ARGV[1], ARGV[2], now, before)
return 'woken'

-- Suspend jobs whose handler sleeps or waits for a signal: back on the time index at
-- their wake time, the attempt not counted (it used none), what each waits for kept in
-- the suspended hash until it is claimed again. The wake time is kept in the job's
-- journal (step.lua) unless one is there already (a sleep woken early keeps its own).
-- A job that waits for a signal already sent is due at once.
-- KEYS[1]: lease zset   KEYS[2]: time index (index.lua)   KEYS[3]: attempt hash
-- KEYS[4]: job hash   KEYS[5]: journal hash (step.lua)   KEYS[6]: suspended hash
-- KEYS[7]: fair hash (prelude.lua: tenant keys)   KEYS[8]: error hash (the job's story)
-- KEYS[9]: logs hash (prelude.lua: logs_add)
-- ARGV[1]: wake channel   ARGV[2]: topic   ARGV[3]: now ms   ARGV[4]: most bytes of logs a job keeps
-- ARGV[5..]: octuples of id, attempt, wake ms, timer field, handler version, what it waits
--   for (JSON: client/src/journal.rs Suspension, whose 'signal' names the signal, if any),
--   the job's story (JSON, client/src/story.rs: Failure) and the attempt's log lines ('' for none)
-- Returns: the refused (normally none): per job, id and 'newer' or 'gone' (see refuse)
local before = head_due(KEYS[2])
local now = tonumber(ARGV[3])
local earliest = nil
local stale, back, dues = {}, {}, {}
local keep = tonumber(ARGV[4])
for i = 5, #ARGV, 8 do
  local id = ARGV[i]
  local current = redis.call('HGET', KEYS[3], id)
  if current == ARGV[i + 1] then
    redis.call('ZREM', KEYS[1], id)
    redis.call('HINCRBY', KEYS[3], id, -1)
    local journal = KEYS[5] .. ':' .. id
    redis.call('HSETNX', journal, 'v', ARGV[i + 4])
    redis.call('HSETNX', journal, ARGV[i + 3], ARGV[i + 2])
    redis.call('HSET', KEYS[5], id, '1')
    redis.call('HSET', KEYS[6], id, ARGV[i + 5])
    redis.call('HSET', KEYS[8], id, ARGV[i + 6])
    logs_add(KEYS[9], id, ARGV[i + 7], keep)
    local due = tonumber(redis.call('HGET', journal, ARGV[i + 3]))
    local waits = cjson.decode(ARGV[i + 5])
    if type(waits.signal) == 'string' and redis.call('HEXISTS', journal, 'g:' .. waits.signal) == 1 then
      due = now
    end
    back[#back + 1] = id
    dues[#dues + 1] = due
    if earliest == nil or due < earliest then earliest = due end
  else
    refuse(stale, id, current)
  end
end
keys_released(KEYS[7], back)
wait_again(KEYS[2], KEYS[4], back, dues)
wake_if_earlier(ARGV[1], ARGV[2], earliest, before)
return stale

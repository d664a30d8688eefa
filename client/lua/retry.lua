-- Schedule the next attempt of jobs whose attempt failed, recording the error.
-- KEYS[1]: lease zset   KEYS[2]: time index (index.lua)   KEYS[3]: attempt hash   KEYS[4]: error hash
-- KEYS[5]: job hash   KEYS[6]: fair hash (prelude.lua: tenant keys)
-- KEYS[7]: logs hash (prelude.lua: logs_add)
-- ARGV[1]: wake channel   ARGV[2]: topic
-- ARGV[3]: the topic's events channel, where each attempt's failure is told ('': not told)
-- ARGV[4]: most bytes of logs a job keeps
-- ARGV[5..]: quintuples of id, attempt, next due ms, error (JSON: the failure and the job's
--   story, client/src/story.rs), the attempt's log lines ('' for none)
-- Returns: the refused (normally none): per job, id and 'newer' or 'gone' (see refuse)
local before = head_due(KEYS[2])
local earliest = nil
local stale, back, dues = {}, {}, {}
local keep = tonumber(ARGV[4])
for i = 5, #ARGV, 5 do
  local id = ARGV[i]
  local current = redis.call('HGET', KEYS[3], id)
  if current == ARGV[i + 1] then
    redis.call('ZREM', KEYS[1], id)
    back[#back + 1] = id
    dues[#dues + 1] = tonumber(ARGV[i + 2])
    redis.call('HSET', KEYS[4], id, ARGV[i + 3])
    logs_add(KEYS[7], id, ARGV[i + 4], keep)
    if ARGV[3] ~= '' then
      redis.call('PUBLISH', ARGV[3], id .. '\n{"event":"attempt","attempt":' .. ARGV[i + 1]
        .. ',"next_due_ms":' .. ARGV[i + 2] .. ',"failure":' .. ARGV[i + 3] .. '}')
    end
    local d = tonumber(ARGV[i + 2])
    if earliest == nil or d < earliest then earliest = d end
  else
    refuse(stale, id, current)
  end
end
keys_released(KEYS[6], back)
wait_again(KEYS[2], KEYS[5], back, dues)
wake_if_earlier(ARGV[1], ARGV[2], earliest, before)
return stale

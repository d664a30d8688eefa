-- Acknowledge finished jobs: delete each job and its payload, if the attempt that
-- finished is still the job's latest (nobody claimed it again after a lost lease).
-- Follow-up jobs are parked in the topic's outbox in the same step; the runner
-- delivers them right after, or a sweep does once ARGV[1] has passed.
-- Batched: a handful of calls per ack, not per job.
-- KEYS[1]: lease zset   KEYS[2]: job hash   KEYS[3]: attempt hash   KEYS[4]: error hash
-- KEYS[5]: outbox hash   KEYS[6]: outbox_due zset   KEYS[7]: account hash   KEYS[8]: progress hash
-- KEYS[9]: journal hash (step.lua)   KEYS[10]: fair hash (prelude.lua: tenant keys)
-- KEYS[11]: expire zset (prelude.lua: expired_take)   KEYS[12]: priority hash (index.lua: index_add)
-- KEYS[13]: logs hash (prelude.lua: logs_add)   KEYS[14]: recent ends zset (prelude.lua: ended)
-- KEYS[14 + j]: the result key of job j (only when the topic keeps results)
-- (A leased job is not on the time index: neither script touches it.)
-- ARGV[1]: sweep time (ms) of follow-ups parked now
-- ARGV[2]: how long ends are kept (ms; '0': the topic keeps none)   ARGV[3]: the topic's events channel
-- ARGV[4]: how many arguments each job has: 2 when no job of the call has follow-ups or an end
--          to keep (the common ack sends half of them), else 5
-- ARGV[5]: now ms   ARGV[6]: most bytes of logs a job keeps
-- ARGV[7..]: per job: id, attempt, then encoded follow-ups ('' for none), encoded end ('' for
--   none), and the attempt's log lines ('' for none): a kept end takes the job's logs with it
--   (client/src/results.rs: a header field "logs" saying how many bytes follow the result)
-- Returns: the refused (normally none): per job, id and 'newer' or 'gone' (see refuse)
local STRIDE = tonumber(ARGV[4])
local FIRST = 7
local ids = {}
for i = FIRST, #ARGV, STRIDE do ids[#ids + 1] = ARGV[i] end
local current = hmget_all(KEYS[3], ids)
local done, stale = {}, {}
local ends = false
for j, id in ipairs(ids) do
  local i = FIRST + (j - 1) * STRIDE
  if current[j] == ARGV[i + 1] then
    done[#done + 1] = id
    if STRIDE > 2 and ARGV[i + 2] ~= '' then
      local token = ARGV[i + 1] .. ':' .. id -- redis::outbox_token
      redis.call('HSET', KEYS[5], token, ARGV[i + 2])
      redis.call('ZADD', KEYS[6], ARGV[1], token)
    end
    if STRIDE > 2 and ARGV[i + 3] ~= '' then
      local record = ARGV[i + 3]
      local logs = logs_joined(redis.call('HGET', KEYS[13], id), ARGV[i + 4], tonumber(ARGV[6]))
      if logs ~= '' then
        record = '{"logs":' .. string.format('%d', #logs) .. ',' .. string.sub(record, 2) .. logs
      end
      ended(KEYS[14 + j], record, ARGV[2], ARGV[3], id, KEYS[14], ARGV[5])
      ends = true
    end
  else
    refuse(stale, id, current[j])
  end
end
each_chunk('ZREM', KEYS[1], done)
each_chunk('HDEL', KEYS[2], done)
each_chunk('HDEL', KEYS[3], done)
-- what a plain topic's jobs never have (failures, accounts, progress, deadlines, priorities,
-- journals, tenant keys, logs): one EXISTS for all of them
if #done > 0 and any_exists({ KEYS[4], KEYS[7], KEYS[8], KEYS[11], KEYS[12], KEYS[9],
    KEYS[10] .. ':running', KEYS[10] .. ':of', KEYS[13] }) then
  keys_released(KEYS[10], done)
  hdel_if(KEYS[10] .. ':of', done)
  hdel_if(KEYS[4], done)
  hdel_if(KEYS[7], done)
  hdel_if(KEYS[8], done)
  zrem_if(KEYS[11], done)
  hdel_if(KEYS[12], done)
  forget_journals(KEYS[9], done)
  hdel_if(KEYS[13], done)
end
if ends then ended_trim(KEYS[14], tonumber(ARGV[5]), tonumber(ARGV[2])) end
return stale

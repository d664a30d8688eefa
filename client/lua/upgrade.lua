-- Move journaled jobs to another handler version (`hourglass upgrade`): the pin of each
-- job's journal ('v', step.lua) becomes ARGV[1], fenced by what the replay check read
-- (client/src/upgrade.rs): the job still waits (neither running nor dead), and its attempt
-- counter, the number of fields of its journal, what it waits for (the suspended hash) and
-- its pin are as they were. A job that ran, woke, ended or was moved since is left as it is.
-- KEYS[1]: job hash   KEYS[2]: lease zset   KEYS[3]: dead zset   KEYS[4]: attempt hash
-- KEYS[5]: journal hash (step.lua)   KEYS[6]: suspended hash (suspend.lua)
-- ARGV[1]: the version to move to
-- ARGV[2..]: quintuples of id, attempt counter ('' for none), the journal's field count,
--   what it waits for ('' when not suspended), the version it is pinned to
-- Returns: per job, in order: 'moved', 'gone' (ended or cancelled), 'running', 'dead' or
--   'changed' (its attempts, journal, suspension or pin differ from what the check read)
local out = {}
for i = 2, #ARGV, 5 do
  local id = ARGV[i]
  local journal = KEYS[5] .. ':' .. id
  local answer
  if redis.call('HEXISTS', KEYS[1], id) == 0 then
    answer = 'gone'
  elseif redis.call('ZSCORE', KEYS[2], id) then
    answer = 'running'
  elseif redis.call('ZSCORE', KEYS[3], id) then
    answer = 'dead'
  elseif (redis.call('HGET', KEYS[4], id) or '') ~= ARGV[i + 1]
      or redis.call('HLEN', journal) ~= tonumber(ARGV[i + 2])
      or (redis.call('HGET', KEYS[6], id) or '') ~= ARGV[i + 3]
      or redis.call('HGET', journal, 'v') ~= ARGV[i + 4] then
    answer = 'changed'
  else
    redis.call('HSET', journal, 'v', ARGV[1])
    answer = 'moved'
  end
  out[#out + 1] = answer
end
return out

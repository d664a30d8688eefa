-- Cancel jobs: delete each wherever it is (pending, leased or dead). An attempt that is
-- running finishes, but its outcome is discarded: its fencing token is gone.
-- KEYS[1]: time index (index.lua)   KEYS[2]: lease zset   KEYS[3]: job hash   KEYS[4]: attempt hash
-- KEYS[5]: error hash   KEYS[6]: dead zset   KEYS[7]: dead_info hash   KEYS[8]: account hash
-- KEYS[9]: progress hash   KEYS[10]: layout 2's zset of waiting jobs
-- KEYS[11]: journal hash (step.lua)   KEYS[12]: suspended hash (suspend.lua)
-- KEYS[13]: fair hash (prelude.lua: tenant keys)   KEYS[14]: expire zset (prelude.lua: expired_take)
-- KEYS[15]: logs hash (prelude.lua: logs_add)   KEYS[16]: recent ends zset (prelude.lua: ended)
-- KEYS[16 + j]: the result key of job j (only when the topic keeps results)
-- ARGV[1]: how long ends are kept (ms; '0': the topic keeps none)   ARGV[2]: the topic's events channel
-- ARGV[3]: the encoded end of a cancelled job   ARGV[4]: now ms   ARGV[5..]: ids
-- Returns: per id, where it was: 'pending', 'running', 'dead' or '' (no such job)
local out = {}
local ends = false
for i = 5, #ARGV do
  local id = ARGV[i]
  local was = ''
  if redis.call('ZREM', KEYS[2], id) == 1 then
    was = 'running'
    keys_released(KEYS[13], { id })
  elseif redis.call('ZREM', KEYS[6], id) == 1 then was = 'dead'
  else
    local value = redis.call('HGET', KEYS[3], id)
    local due = due_of(value)
    if due then
      if unwait(KEYS[1], KEYS[13], id, due) == 1 then was = 'pending' end
    elseif value and redis.call('ZREM', KEYS[10], id) == 1 then
      was = 'pending' -- waiting since layout 2
    end
  end
  if was ~= '' then
    redis.call('HDEL', KEYS[3], id)
    redis.call('HDEL', KEYS[4], id)
    redis.call('HDEL', KEYS[5], id)
    redis.call('HDEL', KEYS[7], id)
    redis.call('HDEL', KEYS[8], id)
    redis.call('HDEL', KEYS[9], id)
    redis.call('HDEL', KEYS[12], id)
    redis.call('HDEL', KEYS[13] .. ':of', id)
    redis.call('ZREM', KEYS[14], id)
    redis.call('HDEL', KEYS[1] .. ':priority', id) -- after unwait, which needed it
    forget_journals(KEYS[11], { id })
    hdel_if(KEYS[15], { id })
    if ARGV[1] ~= '0' then
      ended(KEYS[16 + i - 4], ARGV[3], ARGV[1], ARGV[2], id, KEYS[16], ARGV[4])
      ends = true
    end
  end
  out[i - 4] = was
end
if ends then ended_trim(KEYS[16], tonumber(ARGV[4]), tonumber(ARGV[1])) end
return out

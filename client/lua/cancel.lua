-- Cancel jobs: delete each wherever it is (pending, leased or dead). An attempt that is
-- running finishes, but its outcome is discarded: its fencing token is gone.
-- KEYS[1]: pending zset   KEYS[2]: lease zset   KEYS[3]: job hash   KEYS[4]: attempt hash
-- KEYS[5]: error hash   KEYS[6]: dead zset   KEYS[7]: dead_info hash   KEYS[8]: account hash
-- ARGV: ids
-- Returns: per id, where it was: 'pending', 'running', 'dead' or '' (no such job)
local out = {}
for i, id in ipairs(ARGV) do
  local was = ''
  if redis.call('ZREM', KEYS[1], id) == 1 then was = 'pending'
  elseif redis.call('ZREM', KEYS[2], id) == 1 then was = 'running'
  elseif redis.call('ZREM', KEYS[6], id) == 1 then was = 'dead' end
  if was ~= '' then
    redis.call('HDEL', KEYS[3], id)
    redis.call('HDEL', KEYS[4], id)
    redis.call('HDEL', KEYS[5], id)
    redis.call('HDEL', KEYS[7], id)
    redis.call('HDEL', KEYS[8], id)
  end
  out[i] = was
end
return out

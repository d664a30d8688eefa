-- Give back claimed jobs this runner will not finish (shutdown past its grace):
-- due now, and the attempt is not counted.
-- KEYS[1]: lease zset   KEYS[2]: time index (index.lua)   KEYS[3]: attempt hash   KEYS[4]: job hash
-- KEYS[5]: fair hash (prelude.lua: tenant keys)
-- ARGV[1]: wake channel   ARGV[2]: topic   ARGV[3]: now ms
-- ARGV[4..]: pairs of id, attempt
-- Returns: the refused (normally none): per job, id and 'newer' or 'gone' (see refuse)
local before = head_due(KEYS[2])
local stale, back, dues = {}, {}, {}
for i = 4, #ARGV, 2 do
  local id = ARGV[i]
  local current = redis.call('HGET', KEYS[3], id)
  if current == ARGV[i + 1] then
    redis.call('ZREM', KEYS[1], id)
    back[#back + 1] = id
    -- due again when it was due (never later than now): it keeps its place among its key's jobs
    dues[#dues + 1] = math.min(due_of(redis.call('HGET', KEYS[4], id)) or tonumber(ARGV[3]), tonumber(ARGV[3]))
    redis.call('HINCRBY', KEYS[3], id, -1)
  else
    refuse(stale, id, current)
  end
end
fair_front(KEYS[5], back)
keys_released(KEYS[5], back)
wait_again(KEYS[2], KEYS[4], back, dues)
if #stale < #ARGV - 3 then -- two reply entries per refused id, two args per id
  wake_if_earlier(ARGV[1], ARGV[2], tonumber(ARGV[3]), before)
end
return stale

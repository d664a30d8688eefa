-- What a flow job's attempt needs of its flow: its description and how each of the
-- jobs it depends on ended; for a batch's callback, the batch's counts instead.
-- KEYS[1]: flow hash
-- ARGV[1]: the job's index
-- Returns: its description (JSON: name, topic, id, after = [[index, policy], ...],
-- callback) or false when the flow is gone, then the encoded end of each dependency
-- (false: none yet); for a callback: jobs, acked, dead, cancelled, then the
-- description of each dead job
local x = redis.call('HGET', KEYS[1], 'x:' .. ARGV[1])
if not x then return {false} end
local out = {x}
local described = cjson.decode(x)
if described.callback then
  local n = tonumber(redis.call('HGET', KEYS[1], 'n'))
  local counts = {jobs = 0, acked = 0, dead = 0, cancelled = 0}
  local dead = {}
  for i = 0, n - 1 do
    if not redis.call('HGET', KEYS[1], 'k:' .. i) then
      counts.jobs = counts.jobs + 1
      local s = redis.call('HGET', KEYS[1], 's:' .. i)
      if s then counts[s] = counts[s] + 1 end
      if s == 'dead' then dead[#dead + 1] = redis.call('HGET', KEYS[1], 'x:' .. i) end
    end
  end
  out[2], out[3], out[4], out[5] = counts.jobs, counts.acked, counts.dead, counts.cancelled
  for _, d in ipairs(dead) do out[#out + 1] = d end
  return out
end
for _, dep in ipairs(described.after) do
  out[#out + 1] = redis.call('HGET', KEYS[1], 'r:' .. dep[1])
end
return out

-- What a flow job's attempt needs of its flow: its description and how each of the
-- jobs it depends on ended.
-- KEYS[1]: flow hash
-- ARGV[1]: the job's index
-- Returns: its description (JSON: name, topic, id, after = [[index, policy], ...]) or
-- false when the flow is gone, then the encoded end of each dependency (false: none yet)
local x = redis.call('HGET', KEYS[1], 'x:' .. ARGV[1])
if not x then return {false} end
local out = {x}
for _, dep in ipairs(cjson.decode(x).after) do
  out[#out + 1] = redis.call('HGET', KEYS[1], 'r:' .. dep[1])
end
return out

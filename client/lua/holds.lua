-- What a topic's journals hold, read in bounded steps (not a state change): per job with a
-- journal, the handler version it is pinned to ('v', step.lua), whether the job is live or
-- dead, and the changes its handler asked about (`patched`: fields 'p:<name>', '1' the new
-- path, '0' the old). A topic without journals answers at once.
-- KEYS[1]: journal hash (step.lua)   KEYS[2]: job hash   KEYS[3]: dead zset
-- ARGV[1]: the HSCAN cursor ('0' to start)   ARGV[2]: about how many jobs a step reads
-- Returns: { the next cursor ('0': done), then per job: id, version ('' for none), 'live' or
--   'dead', its patch marks joined by newlines ('' for none), each '1' (the new path) or '0'
--   followed by the change's name (names hold no control characters) }
local out = { '0' }
if redis.call('EXISTS', KEYS[1]) == 0 then return out end
local page = redis.call('HSCAN', KEYS[1], ARGV[1], 'COUNT', ARGV[2])
out[1] = page[1]
local marks = page[2]
for i = 1, #marks, 2 do
  local id = marks[i]
  if redis.call('HEXISTS', KEYS[2], id) == 1 then
    local journal = KEYS[1] .. ':' .. id
    local state = redis.call('ZSCORE', KEYS[3], id) and 'dead' or 'live'
    local patches = {}
    for _, field in ipairs(redis.call('HKEYS', journal)) do
      if string.sub(field, 1, 2) == 'p:' then
        patches[#patches + 1] = redis.call('HGET', journal, field) .. string.sub(field, 3)
      end
    end
    out[#out + 1] = id
    out[#out + 1] = redis.call('HGET', journal, 'v') or ''
    out[#out + 1] = state
    out[#out + 1] = table.concat(patches, '\n')
  end
end
return out

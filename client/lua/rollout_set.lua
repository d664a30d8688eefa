-- Change which handler version a topic serves: the verdict on a canary (promote it, roll it
-- back; by a runner judging the counts, or by hand: abort), or a pin (serve exactly one
-- version, whatever the handler files say) and its removal. A rolled back or aborted version
-- is retired: it is not rolled out again when a runner finds it in its file.
-- KEYS[1]: rollout hash   KEYS[2]: versions hash
-- ARGV[1]: now ms   ARGV[2]: 'promote' | 'rollback' | 'abort' | 'pin' | 'unpin'
-- ARGV[3]: who (a runner id, 'cli', 'api')   ARGV[4]: the reason (logged with the verdict)
-- ARGV[5]: for a verdict, the canary it judges ('' by hand: whatever runs); for a pin, the version
-- Returns: 'ok', or why nothing changed: 'no canary', 'stale' (another canary runs now),
--          'unknown version' (not kept), 'not pinned'
local now, action, who, reason, version = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]

local function changed(fields) rollout_changed(KEYS[1], fields, now, who) end

if action == 'pin' then
  if redis.call('HEXISTS', KEYS[2], version) == 0 then return 'unknown version' end
  redis.call('HINCRBY', KEYS[1], 'pins', 1)
  changed({ 'pinned', version, 'pinned_at', now, 'pinned_by', who })
  return 'ok'
end
if action == 'unpin' then
  if redis.call('HEXISTS', KEYS[1], 'pinned') == 0 then return 'not pinned' end
  redis.call('HDEL', KEYS[1], 'pinned', 'pinned_at', 'pinned_by')
  redis.call('HINCRBY', KEYS[1], 'unpins', 1)
  changed({})
  return 'ok'
end

local canary = redis.call('HGET', KEYS[1], 'canary')
if not canary then return 'no canary' end
if version ~= '' and version ~= canary then return 'stale' end
redis.call('HDEL', KEYS[1], 'canary')
local verdict
if action == 'promote' then
  verdict = 'promoted'
  redis.call('HSET', KEYS[1], 'stable', canary)
else
  verdict = (action == 'abort') and 'aborted' or 'rolled_back'
  -- retired for good: the most recent 16 are remembered
  local list = {}
  for v in string.gmatch(redis.call('HGET', KEYS[1], 'retired') or '', '%S+') do
    if v ~= canary then list[#list + 1] = v end
  end
  list[#list + 1] = canary
  while #list > 16 do table.remove(list, 1) end
  redis.call('HSET', KEYS[1], 'retired', table.concat(list, ' '))
end
redis.call('HINCRBY', KEYS[1], verdict, 1)
changed({ 'verdict', verdict, 'verdict_version', canary, 'verdict_at', now, 'verdict_by', who, 'reason', reason })
return 'ok'

-- Change which handler version a topic serves: the verdict on a canary (promote it, roll it
-- back; by a runner judging the counts, or by hand: abort), or a pin (serve exactly one
-- version, whatever the handler files say) and its removal. A rolled back or aborted version
-- is retired: it is not rolled out again when a runner finds it in its file. Under a policy
-- with `journaled = "replay"`, one runner takes the move of the journaled jobs to a promoted
-- version ('upgrading') and records how many moved ('upgraded', in the verdict).
-- KEYS[1]: rollout hash   KEYS[2]: versions hash
-- ARGV[1]: now ms   ARGV[2]: 'promote' | 'rollback' | 'abort' | 'pin' | 'unpin' | 'upgrading' |
--          'upgraded'
-- ARGV[3]: who (a runner id, 'cli', 'api')   ARGV[4]: the reason (logged with the verdict); for
--          'upgraded', the jobs moved and left, space-separated
-- ARGV[5]: for a verdict, the canary it judges ('' by hand: whatever runs); for a pin, the
--          version; for 'upgrading' and 'upgraded', the promoted version
-- Returns: 'ok', or why nothing changed: 'no canary', 'stale' (another canary runs now, or
--          another verdict came since the promotion), 'unknown version' (not kept),
--          'not pinned', 'taken' (another runner moves the jobs)
local now, action, who, reason, version = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]

local function changed(fields) rollout_changed(KEYS[1], fields, now, who) end

if action == 'upgrading' or action == 'upgraded' then
  local v = redis.call('HMGET', KEYS[1], 'verdict', 'verdict_version')
  if v[1] ~= 'promoted' or v[2] ~= version then return 'stale' end
  if action == 'upgrading' then
    if redis.call('HSETNX', KEYS[1], 'verdict_upgrading', who) == 0 then return 'taken' end
    return 'ok'
  end
  local moved, left = string.match(reason, '^(%d+) (%d+)$')
  changed({ 'verdict_moved', moved, 'verdict_left', left })
  return 'ok'
end

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
redis.call('HDEL', KEYS[1], 'verdict_upgrading', 'verdict_moved', 'verdict_left')
changed({ 'verdict', verdict, 'verdict_version', canary, 'verdict_at', now, 'verdict_by', who, 'reason', reason })
return 'ok'

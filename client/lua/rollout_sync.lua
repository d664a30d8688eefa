-- One runner's report on one topic's handler versions, and the rollout moves that follow
-- from it. Every runner calls it every few hundred ms: it adds the runner's attempt counts
-- since its last report (per version, to the kept version's totals and to the running
-- rollout's), records the version its handler file holds, and starts a canary when that
-- file's version is new to the topic (never in its catalogue) and the topic has a rollout
-- policy. A version the catalogue already knows (replaced, retired, or kept) starts
-- nothing: a runner whose folder still holds an older file does not bring it back (an
-- operator does, with `hourglass pin`). Verdicts are not taken here (see
-- rollout_set.lua): the runner judges the counts this returns.
-- A version that live jobs' journals pin them to (ARGV[7], as the runner last read them)
-- is never forgotten either: those jobs finish on it.
-- KEYS[1]: rollout hash   KEYS[2]: versions hash
-- ARGV[1]: now ms   ARGV[2]: the version of this runner's handler file ('' if none loaded)
-- ARGV[3]: the canary's share of attempts (0 < share < 1; '' when the topic has no rollout)
-- ARGV[4]: the canary's window ms   ARGV[5]: versions kept   ARGV[6]: who reports (runner id)
-- ARGV[7]: the versions live jobs are pinned to by their journals, space-separated ('' none)
-- ARGV[8..]: per version: version, attempts, failures, crashes (since this runner's last report)
-- Returns: the rollout hash as a flat field, value list (HGETALL)
local now = tonumber(ARGV[1])
local file, share, window, keep, who = ARGV[2], ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6]
local held = ' ' .. ARGV[7] .. ' '

local function get(field) return redis.call('HGET', KEYS[1], field) end
local function changed(fields) rollout_changed(KEYS[1], fields, now, who) end
local function retired(version)
  return string.find(' ' .. (get('retired') or '') .. ' ', ' ' .. version .. ' ', 1, true) ~= nil
end

-- counts: to the version's totals (kept versions only) and to the running rollout's sides
local stable, canary = get('stable'), get('canary')
for i = 8, #ARGV, 4 do
  local v = ARGV[i]
  if redis.call('HEXISTS', KEYS[2], v) == 1 then
    redis.call('HINCRBY', KEYS[2], v .. ':n', ARGV[i + 1])
    redis.call('HINCRBY', KEYS[2], v .. ':f', ARGV[i + 2])
    redis.call('HINCRBY', KEYS[2], v .. ':c', ARGV[i + 3])
  end
  local side = (v == canary and 'c') or (v == stable and canary and 's') or nil
  if side then
    redis.call('HINCRBY', KEYS[1], 'n_' .. side, ARGV[i + 1])
    redis.call('HINCRBY', KEYS[1], 'f_' .. side, ARGV[i + 2])
    redis.call('HINCRBY', KEYS[1], 'c_' .. side, ARGV[i + 3])
  end
end

if file ~= '' then
  -- a version seen for the first time joins the kept ones; the oldest beyond `keep` that
  -- serves in no role and holds no live job is forgotten
  local new = redis.call('HSETNX', KEYS[2], file, now) == 1
  if new then
    local seen = {}
    local all = redis.call('HGETALL', KEYS[2])
    for i = 1, #all, 2 do
      if not string.find(all[i], ':', 1, true) then
        seen[#seen + 1] = { all[i], tonumber(all[i + 1]) }
      end
    end
    table.sort(seen, function(a, b) return a[2] > b[2] end)
    local pinned = get('pinned')
    for i = keep + 1, #seen do
      local v = seen[i][1]
      if v ~= file and v ~= stable and v ~= canary and v ~= pinned
          and not string.find(held, ' ' .. v .. ' ', 1, true) then
        redis.call('HDEL', KEYS[2], v, v .. ':n', v .. ':f', v .. ':c')
      end
    end
  end
  if not stable then
    -- the first version of the topic: nothing to roll out from
    changed({ 'stable', file })
  elseif share == '' then
    -- no rollout: the file's version serves, as soon as it loads
    if canary then
      redis.call('HDEL', KEYS[1], 'canary')
      redis.call('HINCRBY', KEYS[1], 'aborted', 1)
      changed({ 'verdict', 'aborted', 'verdict_version', canary, 'verdict_at', now, 'verdict_by', who,
        'reason', 'the rollout policy was removed from queues.toml' })
    end
    if file ~= stable then changed({ 'stable', file }) end
  elseif new and file ~= stable and file ~= canary and not retired(file) then
    if canary then
      redis.call('HINCRBY', KEYS[1], 'aborted', 1)
      changed({ 'verdict', 'superseded', 'verdict_version', canary, 'verdict_at', now, 'verdict_by', who,
        'reason', 'a newer version (' .. file .. ') replaced it before a verdict' })
    end
    changed({ 'canary', file, 'share', share, 'started', now, 'ends', now + window,
      'n_s', 0, 'f_s', 0, 'c_s', 0, 'n_c', 0, 'f_c', 0, 'c_c', 0 })
  elseif file == canary then
    -- the policy may have changed under a running canary
    redis.call('HSET', KEYS[1], 'share', share, 'ends', tonumber(get('started')) + window)
  end
end
return redis.call('HGETALL', KEYS[1])

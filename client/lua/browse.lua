-- Browse one state of a topic a page at a time, from where the last page stopped: a read,
-- no state change. Each call looks at no more than ARGV[4] jobs whatever the topic holds:
-- a cursor is found by rank (ZRANK, O(log n)), never by reading what comes before it.
-- KEYS[1]: time index (index.lua)   KEYS[2]: lease zset   KEYS[3]: dead zset
-- KEYS[4]: suspended hash   KEYS[5]: recent ends zset (prelude.lua: ended)   KEYS[6]: error hash
-- KEYS[7]: dead_info hash   KEYS[8]: fair hash (prelude.lua: tenant keys; `<fair>:of`, `:jobs`)
-- ARGV[1]: state: 'scheduled', 'ready' (due, on the index, then a fair topic's queue by tag),
--   'running' (by lease deadline), 'suspended', 'dead' or 'ended' (newest first)
-- ARGV[2]: now ms   ARGV[3]: most jobs to answer   ARGV[4]: most jobs to look at
-- ARGV[5]: the cursor this script answered last ('' from the start): fields joined by '\n'
-- ARGV[6]: id prefix ('' any)   ARGV[7]: tenant key ('' any, '-' only jobs without one)
-- ARGV[8]: handler version ('' any)   ARGV[9]: text its failure holds ('' any)
-- Returns: { the next page's cursor ('' when the state was read to its end), then per job
--   its id and score (due ms, lease deadline, time of death or end; -1 for a suspended job
--   and for one in a fair topic's queue, whose score is a turn, not a time) }
local state, now = ARGV[1], tonumber(ARGV[2])
local most, budget = tonumber(ARGV[3]), tonumber(ARGV[4])
local prefix, key, version, text = ARGV[6], ARGV[7], ARGV[8], ARGV[9]
local cursor = {}
for part in string.gmatch(ARGV[5], '[^\n]+') do cursor[#cursor + 1] = part end
local out, looked, found = { '' }, 0, 0
local plain = prefix == '' and key == '' and version == '' and text == ''

-- Whether job `id` passes the filters.
local function wanted(id)
  if prefix ~= '' and string.sub(id, 1, #prefix) ~= prefix then return false end
  if key ~= '' then
    local k = redis.call('HGET', KEYS[8] .. ':of', id) or ''
    if (key == '-' and k ~= '') or (key ~= '-' and k ~= key) then return false end
  end
  if version ~= '' or text ~= '' then
    local why = redis.call('HGET', state == 'dead' and KEYS[7] or KEYS[6], id)
    if not why then return false end
    if version ~= '' and not string.find(why, '"handler":"' .. version .. '"', 1, true) then
      return false
    end
    if text ~= '' and not string.find(why, text, 1, true) then return false end
  end
  return true
end

-- Look at job `id` (score `score`): answered if it passes. False once the page is full or
-- the budget spent: the caller stops there, `at` its cursor.
local function visit(id, score, at, timeless)
  looked = looked + 1
  if plain or wanted(id) then
    out[#out + 1] = id
    out[#out + 1] = timeless and '-1' or score
    found = found + 1
  end
  if found >= most or looked >= budget then
    out[1] = at
    return false
  end
  return true
end

-- A zset by rank, from the member after `after` (its score `score`; the first member when
-- nil), ascending or (`down`) descending; `level` leads the cursor; `timeless`: its scores
-- are no times. False when it stopped early. (The lease zset's member of 520 '~' that keeps
-- it a skiplist, prelude.lua: leases_write, is no job: longer than any id, it is skipped.)
local function walk(zset, after, score, down, level, timeless)
  local start = 0
  if after then
    local r = redis.call(down and 'ZREVRANK' or 'ZRANK', zset, after)
    if r and redis.call('ZSCORE', zset, after) == score then
      start = r + 1
    elseif down then -- gone meanwhile: from the first at or below its score
      start = redis.call('ZCOUNT', zset, '(' .. score, '+inf')
    else
      start = redis.call('ZCOUNT', zset, '-inf', '(' .. score)
    end
  end
  while true do
    local got = redis.call(down and 'ZREVRANGE' or 'ZRANGE', zset, start, start + 99, 'WITHSCORES')
    if #got == 0 then return true end
    for i = 1, #got, 2 do
      if #got[i] <= 512
          and not visit(got[i], got[i + 1], level .. '\n' .. got[i + 1] .. '\n' .. got[i], timeless) then
        -- the page ends here: no cursor when nothing comes after it
        local rank = start + (i - 1) / 2 + 1
        if #redis.call(down and 'ZREVRANGE' or 'ZRANGE', zset, rank, rank) == 0 then out[1] = '' end
        return false
      end
    end
    start = start + 100
  end
end

-- One priority's time index (`idx`), its buckets in order, from the job after `after` due
-- at `due` (the start when nil; for 'scheduled' the first due after now), up to `limit`.
local function walk_index(idx, level, after, due, limit)
  local first, bucket = 0, nil
  if after or due then
    local name = bucket_holding(idx, due)
    if name == nil then return true end
    first = redis.call('ZRANK', idx, name)
    bucket = name
  end
  while true do
    local names = redis.call('ZRANGE', idx, first, first + 19)
    if #names == 0 then return true end
    for _, name in ipairs(names) do
      local b = bucket_key(idx, name)
      local from = 0
      if name == bucket then
        bucket = nil
        if after then
          local r = redis.call('ZRANK', b, after)
          if r and redis.call('ZSCORE', b, after) == due then
            from = r + 1
          else
            from = redis.call('ZCOUNT', b, '-inf', '(' .. due)
          end
        else
          from = redis.call('ZCOUNT', b, '-inf', due) -- 'scheduled': after now
        end
      end
      local got = redis.call('ZRANGE', b, from, -1, 'WITHSCORES')
      for i = 1, #got, 2 do
        if limit and tonumber(got[i + 1]) > limit then return true end
        if not visit(got[i], got[i + 1], level .. '\n' .. got[i + 1] .. '\n' .. got[i]) then
          return false
        end
      end
    end
    first = first + 20
  end
end

-- The time index's priorities in order (0, the highest, first), from the cursor's.
local function walk_levels(after_now)
  local level = tonumber(cursor[1] or '0')
  local after, due = cursor[3], cursor[2]
  for p = level, LOWEST do
    local idx = level_index(KEYS[1], p)
    if p > level then after, due = nil, nil end
    if after_now and due == nil then due = string.format('%d', now) end
    if redis.call('EXISTS', idx) == 1 then
      local limit = nil
      if not after_now then limit = now end
      if not walk_index(idx, tostring(p), after, due, limit) then return false end
    end
    if p == 0 and redis.call('EXISTS', KEYS[1] .. ':priority') == 0 then return true end
  end
  return true
end

if state == 'scheduled' then
  walk_levels(true)
elseif state == 'ready' then
  if tonumber(cursor[1] or '0') <= LOWEST then
    if walk_levels(false) then cursor = { '10' } else return out end
  end
  -- a fair topic's due jobs wait in its queue by finish tag
  walk(KEYS[8] .. ':jobs', cursor[3], cursor[2], false, '10', true)
elseif state == 'running' then
  walk(KEYS[2], cursor[3], cursor[2], false, '0')
elseif state == 'dead' then
  walk(KEYS[3], cursor[3], cursor[2], true, '0')
elseif state == 'ended' then
  walk(KEYS[5], cursor[3], cursor[2], true, '0')
elseif state == 'suspended' then
  local at = cursor[1] or '0'
  repeat
    local got = redis.call('HSCAN', KEYS[4], at, 'COUNT', math.min(100, budget))
    at = got[1]
    for i = 1, #got[2], 2 do
      looked = looked + 1
      if plain or wanted(got[2][i]) then
        out[#out + 1] = got[2][i]
        out[#out + 1] = '-1'
        found = found + 1
      end
    end
    if at ~= '0' and (found >= most or looked >= budget) then
      out[1] = at
      return out
    end
  until at == '0'
else
  return redis.error_reply('no state ' .. state)
end
return out

-- Shared by every script that adds to a topic's pending set; prepended at load.
-- Runners sleep until their next known due time; when a job becomes due
-- earlier than anything pending before it, they must hear of it.

-- The due time (number) of the first pending job, or nil when none is pending.
local function head_due(pending)
  local head = redis.call('ZRANGE', pending, 0, 0, 'WITHSCORES')
  if head[2] then return tonumber(head[2]) end
  return nil
end

-- Publish "<topic> <due ms>" when `earliest` is before `before` (the head due before this script ran).
local function wake_if_earlier(channel, topic, earliest, before)
  if earliest ~= nil and (before == nil or earliest < before) then
    redis.call('PUBLISH', channel, topic .. ' ' .. string.format('%d', earliest))
  end
end

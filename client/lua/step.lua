-- Record one step of a durable handler, or one batch of an effects journal ('e:<n>'),
-- in its job's journal, while attempt ARGV[2]
-- still owns the job (a stale attempt, or one whose job was cancelled, records nothing).
-- A job's journal is the hash `<KEYS[2]>:<id>` (same hash tag): 'v' the handler version
-- that wrote it first (the job is pinned to it), 's:<name>' each step's result
-- (client/src/journal.rs), 't:<name>' a sleep's or a wait's wake time (ms), 'g:<name>'
-- a signal sent to it, 'e:<n>' batch n of its effects (client/src/effects.rs), 'p:<name>' how
-- `patched(name)` answered it ('1' or '0'). KEYS[2] itself marks the jobs that have one (id -> '1').
-- KEYS[1]: attempt hash   KEYS[2]: journal hash
-- ARGV[1]: id   ARGV[2]: attempt   ARGV[3]: handler version   ARGV[4]: field   ARGV[5]: value
-- Returns: 1 recorded, 0 refused (the attempt no longer owns the job)
-- Loaded without the prelude (scripts.rs): one call per step, and it needs none of it.
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
local journal = KEYS[2] .. ':' .. ARGV[1]
redis.call('HSETNX', journal, 'v', ARGV[3])
redis.call('HSET', journal, ARGV[4], ARGV[5])
redis.call('HSET', KEYS[2], ARGV[1], '1')
return 1

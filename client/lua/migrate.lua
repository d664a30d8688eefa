-- Move up to ARGV[1] waiting jobs of one topic from layout 2's zset onto layout 3's time
-- index, each value given its due time (index.lua: absorb). `hourglass migrate` calls it
-- until nothing is left, in steps short enough not to hold Redis up.
-- KEYS[1]: time index (index.lua)   KEYS[2]: job hash   KEYS[3]: layout 2's zset (emptied)
-- ARGV[1]: most jobs to move
-- Returns: how many are left in layout 2's zset
return absorb(KEYS[1], KEYS[3], KEYS[2], tonumber(ARGV[1]))

-- counts: the cardinality of each location, read at one instant (R-counts). Read-only.
--
-- KEYS: pending, active, schedule, dead, metrics:completed, metrics:failed (CC-1)
-- ARGV: none
-- Reply: {pending, active, schedule, dead} (integers).
-- Refusals: EMQARG (KEYS/ARGV count, keys), EMQTYPE (CC-8).

-- luacheck: read globals emq

local a, err = emq.begin(emq.op)
if err then return err end
local k = a.keys

local reply = {}
for i, loc in ipairs(emq.locations) do
  reply[i] = redis.call("ZCARD", k[loc])
end
return reply

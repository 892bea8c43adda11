-- state: which location holds an id, read at one instant (R-state). Read-only.
--
-- KEYS: pending, active, schedule, dead, metrics:completed, metrics:failed (CC-1),
--       [7] emq:{q}:job:<id>
-- ARGV: [1] id
-- Reply: "pending" | "active" | "schedule" | "dead" (the location, checked in that
--        order), "unknown" (a row in no location), "absent" (no row, no location).
-- Refusals: EMQKIND (id), EMQARG (KEYS/ARGV count, keys).

-- luacheck: read globals emq

local a, err = emq.begin("state")
if err then return err end
local k, id = a.keys, a.id

-- a grouped job's pending is its lane (LANE-1)
emq.lane_bind(a)
local loc = emq.locate(k, id)
if loc then
  return loc
end
if redis.call("EXISTS", k.row) == 1 then
  return "unknown"
end
return "absent"

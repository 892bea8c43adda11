-- state: which location holds an id, read at one instant (R-state). Read-only.
--
-- KEYS: pending, active, schedule, dead, metrics:completed, metrics:failed (CC-1),
--       [7] emq:{q}:job:<id>
-- ARGV: [1] id
-- Reply: "pending" | "active" | "schedule" | "dead" (the location, checked in that
--        order), "unknown" (a row in no location), "absent" (no row, no location).
-- Refusals: EMQKIND (id), EMQARG (KEYS/ARGV count, keys), EMQTYPE (CC-8).

-- luacheck: read globals emq

local a, err = emq.begin(emq.op)
if err then return err end
local id = a.id

-- a grouped job's pending is its lane (LANE-1)
local _, bad = emq.lane_bind(a)
if bad then return bad end
local loc = emq.locate(a, id)
if loc then
  return loc
end
if a.present.row then
  return "unknown"
end
return "absent"

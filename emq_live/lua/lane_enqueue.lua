-- lane_enqueue: add a new job to its group's lane (T-lane_enqueue).
--
-- KEYS: pending, active, schedule, dead, metrics:completed, metrics:failed (CC-1),
--       [7] emq:{q}:job:<id>. The lane keys are derived from the prefix (LANE-1).
-- ARGV: [1] id (JOB id), [2] payload (any bytes), [3] group (LANE-2)
-- Reply: "enqueued" (the id joins emq:{q}:g:<group>:pending with score 0; row = state,
--        attempts=0, payload, group; the lane joins the ring's tail if it became
--        serviceable); "duplicate" when the id has a row, is a member of a location, or
--        already sits in that lane (nothing changes).
-- Refusals: EMQARG (KEYS/ARGV count, keys, group), EMQKIND (id), EMQTYPE (a location,
--           the row, the lane or a fixed lane key of another type: nothing changes).

-- luacheck: read globals emq

local a, err = emq.begin("lane_enqueue")
if err then return err end
local k, id = a.keys, a.id

local lane, bad = emq.lane(a, a.group)
if bad then return bad end
if emq.exists(a, id) or redis.call("ZSCORE", lane.key, id) then
  return "duplicate"
end
redis.call("ZADD", lane.key, "0", id)
redis.call("HSET", k.row, "state", emq.states.pending, "attempts", "0", "payload", a.payload, "group", a.group)
emq.lane_settle(lane)
return "enqueued"

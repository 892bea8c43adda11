-- promote: move due scheduled jobs (score <= now) to pending (T-promote).
--
-- KEYS: pending, active, schedule, dead, metrics:completed, metrics:failed (CC-1)
-- ARGV: [1] limit (1..limit_max), [2] optional now (ms; default: the server clock)
-- Reply: the number of jobs moved (an integer). At most `limit` members are taken, in
--        set order; a member without a row is removed and not counted (T-promote-3).
-- Refusals: EMQARG (KEYS/ARGV count, keys, limit, now), EMQTYPE (CC-8: schedule,
--           pending, or the row of a due member, of another type).

-- luacheck: read globals emq

local a, err = emq.begin(emq.op)
if err then return err end
local k = a.keys

return emq.pump(a, "schedule", function(id, row)
  local lane = emq.lane_route(a, row) -- a grouped job returns to its lane (LANE-1); typed by the pump
  redis.call("ZADD", k.pending, "0", id)
  redis.call("HSET", row, "state", emq.states.pending)
  emq.lane_settle(lane)
end)

-- reap: take back expired leases (active score <= now): to pending, or to dead when
-- max_attempts is given and attempts >= max_attempts (T-reap).
--
-- KEYS: pending, active, schedule, dead, metrics:completed, metrics:failed (CC-1)
-- ARGV: [1] limit (1..limit_max), [2] max_attempts (1..token_max, or "" for none),
--       [3] optional now (ms; default: the server clock)
-- Reply: the number of jobs moved, to pending and to dead (an integer). At most `limit`
--        members are taken, in set order; a member without a row is removed and not
--        counted (T-reap-4). To dead: state=dead, last_error="lease expired", failed += 1.
-- Refusals: EMQARG (KEYS/ARGV count, keys, limit, max_attempts, now), EMQTYPE (CC-8:
--           active, pending, dead, failed, or the row of a due member, of another type).

-- luacheck: read globals emq

local a, err = emq.begin(emq.op)
if err then return err end
local k = a.keys

return emq.pump(a, "active", function(id, row)
  local lane = emq.lane_route(a, row) -- a grouped job returns to its lane (LANE-1); typed by the pump
  local attempts = tonumber(redis.call("HGET", row, "attempts"))
  if a.max_attempts and attempts and attempts >= a.max_attempts then
    redis.call("ZADD", k.dead, "0", id)
    redis.call("HSET", row, "state", emq.states.dead, "last_error", emq.lease_expired)
    redis.call("HINCRBY", k.failed, "count", 1)
  else
    redis.call("ZADD", k.pending, "0", id)
    redis.call("HSET", row, "state", emq.states.pending)
  end
  emq.lane_leave(lane)
  emq.lane_settle(lane)
end)

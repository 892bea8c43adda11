-- remove: delete a job that is not active: its membership and its row (T-remove).
--
-- KEYS: pending, active, schedule, dead, metrics:completed, metrics:failed (CC-1),
--       [7] emq:{q}:job:<id>
-- ARGV: [1] id
-- Reply: "ok" (removed from pending, schedule and dead; row deleted; an orphan member
--        without a row is removed too); "gone" when the id has no row and no membership.
-- Refusals: EMQKIND (id), EMQARG (KEYS/ARGV count, keys), EMQTYPE (CC-8),
--           EMQLOCK (the id is active).

-- luacheck: read globals emq

local a, err = emq.begin(emq.op)
if err then return err end
local k, id = a.keys, a.id

-- a grouped job's pending is its lane (LANE-1)
local lane, bad = emq.lane_bind(a)
if bad then return bad end
if redis.call("ZSCORE", k.active, id) then
  return emq.refuse(emq.code.LOCK, "the job is active: it is held under a lease")
end
if not emq.exists(a, id) then
  return "gone"
end
redis.call("ZREM", k.pending, id)
redis.call("ZREM", k.schedule, id)
redis.call("ZREM", k.dead, id)
redis.call("DEL", k.row)
emq.lane_settle(lane)
return "ok"

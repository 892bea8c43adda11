-- reprocess: move a dead job back to pending; attempts and last_error are kept
-- (T-reprocess).
--
-- KEYS: pending, active, schedule, dead, metrics:completed, metrics:failed (CC-1),
--       [7] emq:{q}:job:<id>
-- ARGV: [1] id
-- Reply: "ok".
-- Refusals: EMQKIND (id), EMQARG (KEYS/ARGV count, keys), EMQTYPE (CC-8),
--           EMQSTATE (the id is not in dead, or has no row).

-- luacheck: read globals emq

local a, err = emq.begin(emq.op)
if err then return err end
local k, id = a.keys, a.id

-- a grouped job returns to its lane (LANE-1)
local lane, bad = emq.lane_bind(a)
if bad then return bad end
if not a.present.row or not redis.call("ZSCORE", k.dead, id) then
  return emq.refuse(emq.code.STATE, "the job is not dead")
end
redis.call("ZREM", k.dead, id)
redis.call("ZADD", k.pending, "0", id)
redis.call("HSET", k.row, "state", emq.states.pending)
emq.lane_settle(lane)
return "ok"

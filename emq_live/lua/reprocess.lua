-- reprocess: move a dead job back to pending; attempts and last_error are kept
-- (T-reprocess).
--
-- KEYS: pending, active, schedule, dead, metrics:completed, metrics:failed (CC-1),
--       [7] emq:{q}:job:<id>
-- ARGV: [1] id
-- Reply: "ok".
-- Refusals: EMQKIND (id), EMQARG (KEYS/ARGV count, keys),
--           EMQSTATE (the id is not in dead, or has no row).

-- luacheck: read globals emq

local a, err = emq.begin("reprocess")
if err then return err end
local k, id = a.keys, a.id

-- a grouped job returns to its lane (LANE-1)
local lane = emq.lane_bind(a)
if not redis.call("ZSCORE", k.dead, id) or redis.call("EXISTS", k.row) == 0 then
  return emq.refuse("EMQSTATE", "the job is not dead")
end
redis.call("ZREM", k.dead, id)
redis.call("ZADD", k.pending, "0", id)
redis.call("HSET", k.row, "state", emq.states.pending)
emq.lane_settle(lane)
return "ok"

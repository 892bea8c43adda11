-- enqueue: add a new job to pending (T-enqueue).
--
-- KEYS: pending, active, schedule, dead, metrics:completed, metrics:failed (CC-1),
--       [7] emq:{q}:job:<id>
-- ARGV: [1] id (JOB id), [2] payload (any bytes)
-- Reply: "enqueued"; "duplicate" when the id has a row or is a member anywhere
--        (nothing changes).
-- Refusals: EMQARG (KEYS/ARGV count, keys), EMQKIND (id).

-- luacheck: read globals emq

local a, err = emq.begin("enqueue")
if err then return err end
local k, id = a.keys, a.id

if emq.exists(k, id) then
  return "duplicate"
end
redis.call("ZADD", k.pending, "0", id)
redis.call("HSET", k.row, "state", emq.states.pending, "attempts", "0", "payload", a.payload)
return "enqueued"

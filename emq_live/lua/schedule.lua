-- schedule: add a new job to schedule, due at a run-at (T-schedule).
--
-- KEYS: pending, active, schedule, dead, metrics:completed, metrics:failed (CC-1),
--       [7] emq:{q}:job:<id>
-- ARGV: [1] id, [2] payload, [3] mode "at" | "in", [4] value (ms: the run-at for "at",
--       the delay for "in"), [5] optional now (ms; default: the server clock)
-- Reply: "scheduled" (score = value, or now + value); "duplicate" when the id has a row
--        or is a member anywhere (nothing changes).
-- Refusals: EMQARG (KEYS/ARGV count, keys, mode, value, now), EMQKIND (id), EMQTYPE (CC-8).

-- luacheck: read globals emq

local a, err = emq.begin(emq.op)
if err then return err end
local k, id = a.keys, a.id

if emq.exists(a, id) then
  return "duplicate"
end
local run_at = a.value
if a.mode == "in" then
  run_at = a.now + a.value
end
redis.call("ZADD", k.schedule, emq.int(run_at), id)
redis.call("HSET", k.row, "state", emq.states.schedule, "attempts", "0", "payload", a.payload)
return "scheduled"

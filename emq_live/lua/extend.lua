-- extend: move an active job's lease deadline to now + lease_ms (T-extend).
--
-- KEYS: pending, active, schedule, dead, metrics:completed, metrics:failed (CC-1),
--       [7] emq:{q}:job:<id>
-- ARGV: [1] id, [2] token (1..token_max), [3] lease_ms (1..ms_max),
--       [4] optional now (ms; default: the server clock)
-- Reply: "ok" (the active score is now + lease_ms; it may shorten the lease).
-- Refusals: EMQKIND (id), EMQARG (KEYS/ARGV count, keys, arguments, now), EMQTYPE (CC-8),
--           EMQSTALE (no row; the id is not in active; token != attempts).

-- luacheck: read globals emq

local a, err = emq.begin(emq.op)
if err then return err end
local k, id = a.keys, a.id

local loc, refused = emq.live_attempt(a, {"active"})
if not loc then
  return refused
end
redis.call("ZADD", k.active, emq.int(a.now + a.lease_ms), id)
return "ok"

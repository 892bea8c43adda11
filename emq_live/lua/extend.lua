-- extend: move an active job's lease deadline to now + lease_ms (T-extend).
--
-- KEYS: pending, active, schedule, dead, metrics:completed, metrics:failed (CC-1),
--       [7] emq:{q}:job:<id>
-- ARGV: [1] id, [2] token (1..token_max), [3] lease_ms (1..ms_max),
--       [4] optional now (ms; default: the server clock)
-- Reply: "ok" (the active score is now + lease_ms; it may shorten the lease).
-- Refusals: EMQKIND (id), EMQARG (KEYS/ARGV count, keys, arguments, now),
--           EMQSTALE (no row; the id is not in active; token != attempts).

-- luacheck: read globals emq

local a, err = emq.begin("extend")
if err then return err end
local k, id = a.keys, a.id

if redis.call("EXISTS", k.row) == 0 then
  return emq.refuse("EMQSTALE", "the job is gone")
end
if not redis.call("ZSCORE", k.active, id) then
  return emq.refuse("EMQSTALE", "the job is not active: its lease was reaped or settled")
end
if tonumber(redis.call("HGET", k.row, "attempts")) ~= a.token then
  return emq.refuse("EMQSTALE", "the token does not match the job's attempts")
end
redis.call("ZADD", k.active, emq.int(a.now + a.lease_ms), id)
return "ok"

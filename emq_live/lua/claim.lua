-- claim: move the lowest pending job to active under a lease (T-claim).
--
-- KEYS: pending, active, schedule, dead, metrics:completed, metrics:failed (CC-1)
-- ARGV: [1] lease_ms (1..ms_max), [2] optional now (ms; default: the server clock)
-- Reply: {"job", id, payload, token, dropped...} where token is the new attempts
--        (an integer), or {"empty", dropped...} when pending holds no job with a row.
--        `dropped` lists the orphan members (no row) removed from pending on the way,
--        lowest first (T-claim-2, T-claim-5); claim never creates a row.
-- Refusals: EMQARG (KEYS/ARGV count, keys, lease_ms, now).
-- The lowest member is read with ZRANGE 0 0 and removed with ZREM (not ZPOPMIN).

-- luacheck: read globals emq

local a, err = emq.begin("claim")
if err then return err end
local k = a.keys

local dropped = {}
while true do
  local head = redis.call("ZRANGE", k.pending, 0, 0)
  local id = head[1]
  if not id then
    local reply = {"empty"}
    for _, d in ipairs(dropped) do
      reply[#reply + 1] = d
    end
    return reply
  end
  local row = a.prefix .. "job:" .. id
  redis.call("ZREM", k.pending, id)
  if redis.call("EXISTS", row) == 1 then
    redis.call("ZADD", k.active, emq.int(a.now + a.lease_ms), id)
    local token = redis.call("HINCRBY", row, "attempts", 1)
    redis.call("HSET", row, "state", emq.states.active)
    local payload = redis.call("HGET", row, "payload") or ""
    local reply = {"job", id, payload, token}
    for _, d in ipairs(dropped) do
      reply[#reply + 1] = d
    end
    return reply
  end
  dropped[#dropped + 1] = id
end

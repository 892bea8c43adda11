-- claim: move the lowest pending job to active under a lease (T-claim); also
-- claim_many (B-claim).
--
-- KEYS: pending, active, schedule, dead, metrics:completed, metrics:failed (CC-1)
-- ARGV: claim: [1] lease_ms (1..ms_max), [2] optional now (ms; default: the server clock)
--       claim_many: [1] n (1..limit_max), [2] lease_ms, [3] optional now
-- Reply: {"job", id, payload, token, dropped...} where token is the new attempts
--        (an integer), or {"empty", dropped...} when pending holds no job with a row.
--        `dropped` lists the orphan members (no row) removed from pending on the way,
--        lowest first (T-claim-2, T-claim-5); claim never creates a row.
--        claim_many: {{id, payload, token, id, payload, token, ...}, {dropped...}}: up
--        to n claims in claim order, stopping at the first that finds pending empty.
-- Refusals: EMQARG (KEYS/ARGV count, keys, n, lease_ms, now).
-- The lowest member is read with ZRANGE 0 0 and removed with ZREM (not ZPOPMIN: O(log n)
-- on Valkey too, and fakeredis's ZPOPMIN copies the whole set).

-- luacheck: read globals emq

local a, err = emq.begin(emq.op)
if err then return err end
local k = a.keys

local dropped = {}

-- One claim: the claimed job {id, payload, token}, or nil when pending is empty.
local function claim()
  while true do
    local head = redis.call("ZRANGE", k.pending, 0, 0)
    local id = head[1]
    if not id then
      return nil
    end
    local row = a.prefix .. "job:" .. id
    redis.call("ZREM", k.pending, id)
    if redis.call("EXISTS", row) == 1 then
      redis.call("ZADD", k.active, emq.int(a.now + a.lease_ms), id)
      local token = redis.call("HINCRBY", row, "attempts", 1)
      redis.call("HSET", row, "state", emq.states.active)
      local payload = redis.call("HGET", row, "payload") or ""
      return {id, payload, token}
    end
    dropped[#dropped + 1] = id
  end
end

if a.n then
  local jobs = {}
  for _ = 1, a.n do
    local job = claim()
    if not job then
      break
    end
    for _, v in ipairs(job) do
      jobs[#jobs + 1] = v
    end
  end
  return {jobs, dropped}
end
local job = claim()
local reply = job and {"job", job[1], job[2], job[3]} or {"empty"}
for _, d in ipairs(dropped) do
  reply[#reply + 1] = d
end
return reply

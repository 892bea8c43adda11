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
-- Refusals: EMQARG (KEYS/ARGV count, keys, n, lease_ms, now), EMQTYPE (CC-8: pending,
--           active, or the row of a member the call would take, of another type).
-- The call is planned before its first write (CC-8): pending is walked from its lowest
-- member (ZRANGE by rank, not ZPOPMIN: O(log n) on Valkey too, and fakeredis's ZPOPMIN
-- copies the whole set), each member's row typed, until n members with a row are found
-- or pending ends; then the orphans met are dropped and the jobs found are claimed.

-- luacheck: read globals emq

local a, err = emq.begin(emq.op)
if err then return err end
local k = a.keys
local n = a.n or 1

-- The plan: the ids to claim (up to n, lowest first) and the orphans met on the way, or
-- the refusal for a row of another type.
local take, dropped = {}, {}
local rank = 0
while #take < n do
  local page = redis.call("ZRANGE", k.pending, rank, rank + n - #take - 1)
  if #page == 0 then
    break
  end
  for _, id in ipairs(page) do
    local row, bad = emq.member_row(a, id)
    if bad then
      return bad
    end
    if row then
      take[#take + 1] = id
    else
      dropped[#dropped + 1] = id
    end
  end
  rank = rank + #page
end

for _, id in ipairs(dropped) do
  redis.call("ZREM", k.pending, id)
end
local jobs = {}
for _, id in ipairs(take) do
  local row = a.prefix .. "job:" .. id
  redis.call("ZREM", k.pending, id)
  redis.call("ZADD", k.active, emq.int(a.now + a.lease_ms), id)
  local token = redis.call("HINCRBY", row, "attempts", 1)
  redis.call("HSET", row, "state", emq.states.active)
  local payload = redis.call("HGET", row, "payload") or ""
  for _, v in ipairs({id, payload, token}) do
    jobs[#jobs + 1] = v
  end
end

if a.n then
  return {jobs, dropped}
end
local reply = #jobs > 0 and {"job", jobs[1], jobs[2], jobs[3]} or {"empty"}
for _, d in ipairs(dropped) do
  reply[#reply + 1] = d
end
return reply

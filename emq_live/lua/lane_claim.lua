-- lane_claim: turn the ring one step and serve the head of that lane (T-lane_claim);
-- also lane_wclaim: serve up to min(weight, depth, headroom) heads of it (T-lane_wclaim).
--
-- KEYS: pending, active, schedule, dead, metrics:completed, metrics:failed (CC-1); the
--       lane keys are derived from the prefix (LANE-1).
-- ARGV: [1] lease_ms (1..ms_max), [2] optional now (ms; default: the server clock)
-- Reply: lane_claim: {"job", id, payload, token, group, dropped...} or
--        {"empty", dropped...} when no lane is serviceable.
--        lane_wclaim: {{id, payload, token, group, id, ...}, {dropped...}}: the jobs of
--        one lane in lane order ({} when no lane is serviceable).
--        `dropped` lists the orphan members (no row) removed from lanes on the way; a
--        lane that held only orphans is emptied and the next turn is taken.
-- Refusals: EMQARG (KEYS/ARGV count, keys, lease_ms, now).
-- The turn is LMOVE ring ring LEFT RIGHT: O(1), no scan of the lanes. A served lane that
-- stopped being serviceable is the ring's last element, so it leaves with RPOP.

-- luacheck: read globals emq

local a, err = emq.begin(emq.op)
if err then return err end
local k = a.keys
local ring = a.prefix .. emq.lane_kinds[1]

local dropped = {}

-- The head of `lane` made active: {id, payload, token, group}, or nil when the lane is
-- empty; orphans met are removed and recorded.
local function serve(lane)
  while true do
    local id = redis.call("ZRANGE", lane.key, 0, 0)[1]
    if not id then
      return nil
    end
    local row = a.prefix .. "job:" .. id
    redis.call("ZREM", lane.key, id)
    if redis.call("EXISTS", row) == 1 then
      redis.call("ZADD", k.active, emq.int(a.now + a.lease_ms), id)
      local token = redis.call("HINCRBY", row, "attempts", 1)
      redis.call("HSET", row, "state", emq.states.active)
      emq.lane_enter(lane)
      return {id, redis.call("HGET", row, "payload") or "", token, lane.group}
    end
    dropped[#dropped + 1] = id
  end
end

-- One turn of the ring: the jobs served (none only when the ring is empty).
local function turn()
  while true do
    local group = redis.call("LMOVE", ring, ring, "LEFT", "RIGHT")
    if not group then
      return {}
    end
    local lane = emq.lane(a.prefix, group) -- on the ring, so serviceable: was = true
    local most = 1
    if emq.op == "lane_wclaim" then
      most = tonumber(redis.call("HGET", lane.lk.gweight, group) or "1")
    end
    local jobs = {}
    while #jobs < most and emq.lane_serviceable(lane) do
      local job = serve(lane)
      if not job then
        break
      end
      jobs[#jobs + 1] = job
    end
    emq.lane_settle(lane, true)
    if #jobs > 0 then
      return jobs
    end
  end
end

local jobs = turn()
if emq.op == "lane_wclaim" then
  local flat = {}
  for _, job in ipairs(jobs) do
    for _, v in ipairs(job) do
      flat[#flat + 1] = v
    end
  end
  return {flat, dropped}
end
local reply = jobs[1] and {"job", unpack(jobs[1])} or {"empty"}
for _, d in ipairs(dropped) do
  reply[#reply + 1] = d
end
return reply

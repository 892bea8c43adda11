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
-- Refusals: EMQARG (KEYS/ARGV count, keys, lease_ms, now), EMQTYPE (active, a fixed
--           lane key, a lane the turn takes or a row it would serve of another type:
--           nothing changes; CC-8, typed by `plan` before the first write).
-- The turn is LMOVE ring ring LEFT RIGHT: O(1), no scan of the lanes. A served lane that
-- stopped being serviceable is the ring's last element, so it leaves with RPOP.

-- luacheck: read globals emq

local a, err = emq.begin(emq.op)
if err then return err end
local k = a.keys
local ring = a.prefix .. emq.lane_kinds[1]

local dropped = {}
local weighted = emq.op == "lane_wclaim"

-- How many heads a turn on `group` serves at most: 1, or its weight for lane_wclaim,
-- and never past its limit's headroom (LANE-5, LANE-6).
local function most_of(group)
  local most = weighted and tonumber(redis.call("HGET", a.prefix .. "gweight", group) or "1") or 1
  local limit = redis.call("HGET", a.prefix .. "glimit", group)
  if limit then
    local held = tonumber(redis.call("HGET", a.prefix .. "gactive", group) or "0")
    most = math.min(most, tonumber(limit) - held)
  end
  return most
end

-- CC-8 before the first write (the LMOVE): walk the ring from its head as the turns
-- will, typing each lane and the rows of the members a turn would meet, until a lane
-- that serves a job. Returns the refusal, or nil. Reads only; O(1) per claim unless
-- lanes hold orphans.
local function plan()
  for i = 0, redis.call("LLEN", ring) - 1 do
    local group = redis.call("LINDEX", ring, i)
    local bad = emq.lane_types(a, group)
    if bad then
      return bad
    end
    local key, most, found, off = emq.lane_key(a.prefix, group), most_of(group), 0, 0
    while found < most do
      local id = redis.call("ZRANGE", key, off, off)[1]
      if not id then
        break
      end
      local row, wrong = emq.member_row(a, id)
      if wrong then
        return wrong
      end
      -- a job only if its row says this lane's group (T-lane_claim-2)
      local job = row and redis.call("HGET", row, "group") == group
      found, off = found + (job and 1 or 0), off + 1
    end
    if found > 0 then
      return nil
    end
  end
end

local refused = plan()
if refused then
  return refused
end

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
    if redis.call("HGET", row, "group") == lane.group then -- else an orphan (T-lane_claim-2)
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
    local lane = emq.lane(a, group) -- on the ring, so serviceable: was = true; typed by plan
    local most = most_of(group)
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
if weighted then
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

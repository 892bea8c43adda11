-- lane_config: a lane's settings (T-lane_pause, T-lane_resume, T-lane_limit,
-- T-lane_weight); one file for the four ops, which differ only in the write.
--
-- KEYS: pending, active, schedule, dead, metrics:completed, metrics:failed (CC-1); the
--       lane keys are derived from the prefix (LANE-1).
-- ARGV: lane_pause, lane_resume: [1] group (LANE-2)
--       lane_limit: [1] group, [2] n (0..limit_max; 0 removes the limit)
--       lane_weight: [1] group, [2] w (1..weight_max; 1 removes the field)
-- Reply: "ok". pause: paused += group, the lane leaves the ring; resume: paused -= group;
--        limit: glimit[group] = n; weight: gweight[group] = w. After pause, resume and
--        limit the lane is on the ring exactly when it is serviceable (LANE-4); a lane
--        that became serviceable joins the ring's tail.
-- Refusals: EMQARG (KEYS/ARGV count, keys, group, n, w), EMQTYPE (the lane or a fixed
--           lane key of another type: nothing changes).

-- luacheck: read globals emq

local a, err = emq.begin(emq.op)
if err then return err end

local lane, bad = emq.lane(a, a.group)
if bad then return bad end
local lk, group = lane.lk, a.group
if emq.op == "lane_pause" then
  redis.call("SADD", lk.paused, group)
elseif emq.op == "lane_resume" then
  redis.call("SREM", lk.paused, group)
elseif emq.op == "lane_limit" then
  if a.n == 0 then
    redis.call("HDEL", lk.glimit, group)
  else
    redis.call("HSET", lk.glimit, group, emq.int(a.n))
  end
elseif a.w == 1 then
  redis.call("HDEL", lk.gweight, group)
else
  redis.call("HSET", lk.gweight, group, emq.int(a.w))
end
emq.lane_settle(lane)
return "ok"

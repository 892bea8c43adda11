-- promote: move due scheduled jobs (score <= now) to pending (T-promote).
--
-- KEYS: pending, active, schedule, dead, metrics:completed, metrics:failed (CC-1)
-- ARGV: [1] limit (1..limit_max), [2] optional now (ms; default: the server clock)
-- Reply: the number of jobs moved (an integer). At most `limit` members are taken, in
--        set order; a member without a row is removed and not counted (T-promote-3).
-- Refusals: EMQARG (KEYS/ARGV count, keys, limit, now).

-- luacheck: read globals emq

local a, err = emq.begin("promote")
if err then return err end
local k = a.keys

local due = redis.call("ZRANGE", k.schedule, "-inf", emq.int(a.now), "BYSCORE", "LIMIT", 0, a.limit)
local moved = 0
for _, id in ipairs(due) do
  local row = a.prefix .. "job:" .. id
  redis.call("ZREM", k.schedule, id)
  if redis.call("EXISTS", row) == 1 then
    -- a grouped job returns to its lane (LANE-1)
    local lane = emq.lane_route(a, row)
    redis.call("ZADD", k.pending, "0", id)
    redis.call("HSET", row, "state", emq.states.pending)
    emq.lane_settle(lane)
    moved = moved + 1
  end
end
return moved

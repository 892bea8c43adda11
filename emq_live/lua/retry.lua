-- retry: settle a job's attempt as failed: schedule it again, or dead-letter it once it
-- has used max_attempts (T-retry).
--
-- KEYS: pending, active, schedule, dead, metrics:completed, metrics:failed (CC-1),
--       [7] emq:{q}:job:<id>
-- ARGV: [1] id, [2] token (1..token_max), [3] delay_ms (0..ms_max),
--       [4] max_attempts (1..token_max), [5] error (at most text_max bytes),
--       [6] optional now (ms; default: the server clock)
-- Reply: "scheduled" (attempts < max_attempts: schedule at now + delay_ms) or "dead"
--        (dead, score 0, failed += 1); both write last_error and state.
-- Refusals: EMQKIND (id), EMQARG (KEYS/ARGV count, keys, arguments, now), EMQTYPE (CC-8),
--           EMQSTALE (no row; the id is in schedule, dead or nowhere; token != attempts).

-- luacheck: read globals emq

local a, err = emq.begin("retry")
if err then return err end
local k, id = a.keys, a.id

-- a grouped job's pending is its lane (LANE-1)
local lane, bad = emq.lane_bind(a)
if bad then return bad end
local loc, attempts = emq.live_attempt(a, {"active", "pending"})
if not loc then
  return attempts -- the refusal
end
redis.call("ZREM", k[loc], id)
if loc == "active" then
  emq.lane_leave(lane)
end
if attempts < a.max_attempts then
  redis.call("ZADD", k.schedule, emq.int(a.now + a.delay_ms), id)
  redis.call("HSET", k.row, "state", emq.states.schedule, "last_error", a.error)
  emq.lane_settle(lane)
  return "scheduled"
end
redis.call("ZADD", k.dead, "0", id)
redis.call("HSET", k.row, "state", emq.states.dead, "last_error", a.error)
redis.call("HINCRBY", k.failed, "count", 1)
emq.lane_settle(lane)
return "dead"

-- complete: settle a job's attempt as done; the row goes away (T-complete); also
-- complete_many (B-complete).
--
-- KEYS: pending, active, schedule, dead, metrics:completed, metrics:failed (CC-1),
--       [7] emq:{q}:job:<id> (complete only)
-- ARGV: complete: [1] id, [2] token (1..token_max)
--       complete_many: id, token, id, token, ... (1..limit_max items)
-- Reply: "ok" (the id left active, or pending for a late ack after a reap; row deleted;
--        completed += 1); "gone" when there is no row (nothing changes).
--        complete_many: one answer per item, in item order; a refused item answers its
--        refusal text ("EMQSTALE ...") in place, changes nothing, and the next item runs.
-- Refusals: EMQKIND (an id; a batch is refused whole), EMQARG (KEYS/ARGV count, keys,
--           a token; a batch is refused whole), EMQTYPE (a touched key or an item's
--           row of another type; a batch is refused whole),
--           EMQSTALE (the id is in schedule, dead or nowhere; token != attempts).

-- luacheck: read globals emq

local a, err = emq.begin(emq.op)
if err then return err end
local k = a.keys

local function complete()
  -- a grouped job's pending is its lane (LANE-1)
  local lane, bad = emq.lane_bind(a)
  if bad then
    return bad
  end
  local loc, refused = emq.live_attempt(a, {"active", "pending"}, "gone")
  if not loc then
    return refused
  end
  redis.call("ZREM", k[loc], a.id)
  redis.call("DEL", k.row)
  redis.call("HINCRBY", k.completed, "count", 1)
  if loc == "active" then
    emq.lane_leave(lane)
  end
  emq.lane_settle(lane)
  return "ok"
end

return emq.run(a, complete)

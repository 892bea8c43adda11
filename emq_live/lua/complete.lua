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
--           a token; a batch is refused whole),
--           EMQSTALE (the id is in schedule, dead or nowhere; token != attempts).

-- luacheck: read globals emq

local a, err = emq.begin(emq.op)
if err then return err end
local k = a.keys

local function complete()
  local id = a.id
  if redis.call("EXISTS", k.row) == 0 then
    return "gone"
  end
  -- a grouped job's pending is its lane (LANE-1)
  local lane = emq.lane_bind(a)
  local loc = emq.locate(k, id)
  if loc ~= "active" and loc ~= "pending" then
    return emq.refuse("EMQSTALE", "the attempt was already settled: the job is in " .. (loc or "no location"))
  end
  if tonumber(redis.call("HGET", k.row, "attempts")) ~= a.token then
    return emq.refuse("EMQSTALE", "the token does not match the job's attempts")
  end
  redis.call("ZREM", k[loc], id)
  redis.call("DEL", k.row)
  redis.call("HINCRBY", k.completed, "count", 1)
  if loc == "active" then
    emq.lane_leave(lane)
  end
  emq.lane_settle(lane)
  return "ok"
end

return emq.run(a, complete)

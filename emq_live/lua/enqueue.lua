-- enqueue: add a new job to pending (T-enqueue); also enqueue_many (B-enqueue).
--
-- KEYS: pending, active, schedule, dead, metrics:completed, metrics:failed (CC-1),
--       [7] emq:{q}:job:<id> (enqueue only)
-- ARGV: enqueue: [1] id (JOB id), [2] payload (any bytes)
--       enqueue_many: id, payload, id, payload, ... (1..limit_max items)
-- Reply: "enqueued"; "duplicate" when the id has a row or is a member anywhere
--        (nothing changes). enqueue_many: one such answer per item, in item order.
-- Refusals: EMQARG (KEYS/ARGV count, keys), EMQKIND (an id; a batch is refused whole),
--           EMQTYPE (a touched key or an item's row of another type; CC-8).

-- luacheck: read globals emq

local a, err = emq.begin(emq.op)
if err then return err end
local k = a.keys

local function enqueue()
  local id = a.id
  if emq.exists(a, id) then
    return "duplicate"
  end
  redis.call("ZADD", k.pending, "0", id)
  redis.call("HSET", k.row, "state", emq.states.pending, "attempts", "0", "payload", a.payload)
  return "enqueued"
end

return emq.run(a, enqueue)

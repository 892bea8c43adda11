-- batch.lua: the helpers of batch ops with items (enqueue_many, complete_many; lifecycle.md
-- §6 "Batches"), appended after lib.lua to those scripts only (emq_live/scripts.py).
--
-- emq.begin_items(op, spec) checks the whole call before the first write (B-1):
--   1. the number of KEYS (6) and of ARGV: 1..limit_max items, each the base op's argv
--                                                                       -> EMQARG
--   2. every item's id, in item order (ID-1, ID-2, ID-7)                -> EMQKIND
--   3. KEYS[1..6] as in emq.begin                                       -> EMQARG
--   4. every item's other arguments, item by item (CC-2)                -> EMQARG
--   5. every key the op touches, each item's row in item order (CC-8)   -> EMQTYPE
-- and returns args with keys, prefix and `items` (one table of the base op's arguments
-- per item), or (nil, refusal).

-- luacheck: globals emq

local KIND, ARG = emq.code.KIND, emq.code.ARG

function emq.begin_items(op, spec)
  local items = spec.items
  local width, most = #items, tonumber(emq.limits.limit_max)
  if #KEYS ~= #emq.kinds then
    return nil, emq.refuse(ARG, op .. " takes " .. #emq.kinds .. " keys, got " .. #KEYS)
  end
  local nargs = #ARGV
  if nargs == 0 or nargs % width ~= 0 or nargs / width > most then
    return nil, emq.refuse(ARG, op .. " takes 1 to " .. most .. " items of " .. width
      .. " arguments, got " .. nargs .. " arguments")
  end
  for base = 0, nargs - 1, width do
    if not emq.is_job_id(ARGV[base + 1]) then
      return nil, emq.refuse(KIND, "not a well-formed " .. emq.job_ns .. " id")
    end
  end
  local args = {keys = {}, items = {}}
  local bad = emq.check_keys(spec, args)
  if bad then
    return nil, bad
  end
  for base = 0, nargs - 1, width do
    local item = {[items[1].name] = ARGV[base + 1]}
    for i = 2, width do
      local ok, v = emq.argument(items[i], ARGV[base + i])
      if not ok then
        return nil, v
      end
      item[items[i].name] = v
    end
    args.items[#args.items + 1] = item
  end
  return args, emq.check_types(spec, args)
end

-- Run `one` once per item, in item order (B-2), with the item's arguments bound in
-- `args`, its row key in `args.keys.row` and whether that row exists in
-- `args.present.row`, read now: an earlier item may have written it, so after the first
-- item no presence the type check saw holds any more. Every item's answer in order, a
-- refused item's refusal as its text ("EMQSTALE ...") in place (CC-4: no error inside an
-- array). A refused item changed nothing, and the next item runs.
function emq.each(args, one)
  local reply = {}
  for i, item in ipairs(args.items) do
    for name, v in pairs(item) do
      args[name] = v
    end
    args.keys.row = args.prefix .. "job:" .. args.id
    if i > 1 then
      args.present = {}
    end
    args.present.row = redis.call("EXISTS", args.keys.row) == 1
    local answer = one()
    if type(answer) == "table" and answer.err then
      answer = answer.err
    end
    reply[i] = answer
  end
  return reply
end

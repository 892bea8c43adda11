-- lib.lua: helpers shared by every EchoMQ script (specs/lifecycle.md §4).
--
-- The loader (emq_live/scripts.py) assembles each script as
--   generated prelude (local `emq` = constants from specs/transitions.json)
--   .. lib.lua .. <op>.lua
-- so `emq` is a chunk-local table, never a global. Nothing here writes to Valkey.
--
-- emq.begin(op) checks a call in the order of CC-5 and returns (args, nil) or
-- (nil, error_reply):
--   1. the number of KEYS (6, or 7 with the row key) and of ARGV (the op's argv, plus
--      one optional trailing `now` for ops with clock = true)          -> EMQARG
--   2. the job id, ARGV[1], for ops about one id (ID-1, ID-2, ID-7)    -> EMQKIND
--   3. KEYS[1] = emq:{q}:pending for a queue name allowed by CC-1/KS-3, KEYS[2..6]
--      derived from it, KEYS[7] = emq:{q}:job:<id>                      -> EMQARG
--   4. every other argument in table order (CC-2 canonical decimals)   -> EMQARG
--   5. the trailing `now`, else the server clock (CLK-1)               -> EMQARG
--   6. every key the op touches (its `touches` in transitions.json) holds its grammar
--      type or does not exist (CC-8)                                   -> EMQTYPE
-- args carries: keys (pending, active, schedule, dead, completed, failed, row),
-- prefix ("emq:{q}:"), now (clock ops), present (each touched key's name -> whether it
-- exists, so scripts need no EXISTS of their own), and each argv value by its name
-- (integers as Lua numbers, exact: every bound is <= 2^53-1; an absent optional
-- argument is nil). Refusal codes are the prelude's `emq.code` (emq_model/errors.py).
-- Each script passes its own op, `emq.op` (the prelude names it): a file like claim.lua
-- also serves its batch form (claim_many), assembled under the batch's name. Batch
-- scripts with items (enqueue_many, complete_many) also carry batch.lua, which checks
-- their ARGV (emq.begin_items) and runs the op per item (emq.each).

-- luacheck: globals emq

local KIND, ARG, STALE, TYPE = emq.code.KIND, emq.code.ARG, emq.code.STALE, emq.code.TYPE

function emq.refuse(code, reason)
  return redis.error_reply(code .. " " .. reason)
end

-- Compare two canonical decimal strings by their bytes: -1, 0 or 1. Never Lua's `<` on
-- strings, which follows the locale's strcoll.
function emq.cmp_decimal(a, b)
  if #a ~= #b then
    return #a < #b and -1 or 1
  end
  for i = 1, #a do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then
      return x < y and -1 or 1
    end
  end
  return 0
end

-- A canonical decimal string: "0", or a digit 1-9 followed by digits (CC-2).
function emq.is_decimal(s)
  local n = #s
  if n == 0 then
    return false
  end
  for i = 1, n do
    local b = string.byte(s, i)
    if b < 48 or b > 57 then
      return false
    end
  end
  return n == 1 or string.byte(s, 1) ~= 48
end

-- An integer argument of a type with decimal-string bounds: the number, or nil.
function emq.integer(s, t)
  if not emq.is_decimal(s) then
    return nil
  end
  if emq.cmp_decimal(s, t.min) < 0 or emq.cmp_decimal(s, t.max) > 0 then
    return nil
  end
  return tonumber(s)
end

-- An integer written into a key (a score, a counter): its canonical decimal form.
-- Every value we write is below 2^53, where "%.0f" is exact.
function emq.int(n)
  return string.format("%.0f", n)
end

local function in_alphabet(b)
  return (b >= 48 and b <= 57) or (b >= 65 and b <= 90) or (b >= 97 and b <= 122)
end

-- A well-formed id of the JOB namespace (ID-1, ID-2, ID-7).
function emq.is_job_id(s)
  if type(s) ~= "string" or #s ~= emq.id_len then
    return false
  end
  if string.sub(s, 1, 3) ~= emq.job_ns then
    return false
  end
  for i = 4, emq.id_len do
    if not in_alphabet(string.byte(s, i)) then
      return false
    end
  end
  -- fixed width and an alphabet in ASCII order: byte order is numeric order
  return emq.cmp_decimal(string.sub(s, 4), emq.body_max) <= 0
end

-- The queue name inside KEYS[1] = emq:{q}:pending, or nil (CC-1: 1..queue_max_bytes
-- bytes, no `{`, `}`, no byte below 0x21, no 0x7F).
local function queue_of(pending_key)
  local head, tail = "emq:{", "}:" .. emq.kinds[1]
  if type(pending_key) ~= "string" or #pending_key <= #head + #tail then
    return nil
  end
  if string.sub(pending_key, 1, #head) ~= head or string.sub(pending_key, -#tail) ~= tail then
    return nil
  end
  local q = string.sub(pending_key, #head + 1, #pending_key - #tail)
  if #q < 1 or #q > emq.queue_max_bytes then
    return nil
  end
  for i = 1, #q do
    local b = string.byte(q, i)
    if b < 33 or b == 127 or b == 123 or b == 125 then
      return nil
    end
  end
  return q
end

-- The server clock in ms (CLK-1).
function emq.time_ms()
  local t = redis.call("TIME")
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- One argument `v` for the table entry `a` (CC-2): true and its value (an integer as a
-- Lua number, an absent optional argument as nil), or false and the refusal.
function emq.argument(a, v)
  local t = emq.types[a.type]
  if a.optional and v == "" then
    return true, nil
  elseif t.pattern then
    if not emq.is_group(v) then
      return false, emq.refuse(ARG, a.name .. " must be 1 to " .. t.max_bytes .. " characters of 0-9 A-Z a-z _ . -")
    end
  elseif t.max_bytes then
    if #v > t.max_bytes then
      return false, emq.refuse(ARG, a.name .. " is longer than " .. t.max_bytes .. " bytes")
    end
  elseif t.values then
    for _, allowed in ipairs(t.values) do
      if v == allowed then
        return true, v
      end
    end
    return false, emq.refuse(ARG, a.name .. " must be one of " .. table.concat(t.values, ", "))
  elseif t.min then
    v = emq.integer(v, t)
    if v == nil then
      return false, emq.refuse(ARG, a.name .. " must be a canonical decimal in [" .. t.min .. ", " .. t.max .. "]")
    end
  end -- a payload (no bounds) is any bytes
  return true, v
end

-- KEYS[1..6] of the queue (and KEYS[7], the row of ARGV[1], for ops with a row key):
-- sets args.prefix and args.keys, or returns the refusal.
function emq.check_keys(spec, args)
  local q = queue_of(KEYS[1])
  if not q then
    return emq.refuse(ARG, "KEYS[1] is not emq:{q}:" .. emq.kinds[1] .. " of an allowed queue name")
  end
  local prefix = "emq:{" .. q .. "}:"
  args.prefix = prefix
  for i, kind in ipairs(emq.kinds) do
    if KEYS[i] ~= prefix .. kind then
      return emq.refuse(ARG, "KEYS[" .. i .. "] is not " .. prefix .. kind)
    end
    args.keys[emq.key_names[i]] = KEYS[i]
  end
  if spec.row_key then
    local n = #emq.kinds + 1
    if KEYS[n] ~= prefix .. "job:" .. ARGV[1] then
      return emq.refuse(ARG, "KEYS[" .. n .. "] is not " .. prefix .. "job:<ARGV[1]>")
    end
    args.keys.row = KEYS[n]
  end
end

-- The type of a key: "none", "zset", "hash", ... (TYPE answers a status reply).
function emq.key_type(key)
  local t = redis.call("TYPE", key)
  return type(t) == "table" and t.ok or t
end

-- The refusal for a key holding another type than its grammar's (CC-8), or nil; `t` is
-- the key's type, "none" when it does not exist.
function emq.wrong_type(key, t, want)
  if t ~= "none" and t ~= want then
    return emq.refuse(TYPE, key .. " holds a " .. t .. ", not a " .. want .. ": nothing was changed")
  end
end

-- CC-8: every key the op touches (`spec.touches`, in table order; "row" is KEYS[7], or
-- every item's row in item order for a batch with items) is of its grammar type or
-- absent. Sets args.present (name -> the key exists, read before any write); returns
-- the refusal, or nil.
function emq.check_types(spec, args)
  args.present = {}
  for _, name in ipairs(spec.touches) do
    local want = emq.key_types[name]
    -- a lane key (lifecycle.md §10) hangs off the prefix: "lane" is the group's own
    local keys = {args.keys[name] or (name == "lane" and emq.lane_key(args.prefix, args.group))
      or args.prefix .. name}
    if name == "row" and args.items then
      keys = {}
      for i, item in ipairs(args.items) do
        keys[i] = args.prefix .. "job:" .. item.id
      end
    end
    for _, key in ipairs(keys) do
      local t = emq.key_type(key)
      local bad = emq.wrong_type(key, t, want)
      if bad then
        return bad
      end
      args.present[name] = t ~= "none"
      args.typed = args.typed or {}
      args.typed[key] = true
    end
  end
end

function emq.begin(op)
  local spec = emq.ops[op]
  if spec.items then
    return emq.begin_items(op, spec) -- batch.lua
  end
  local argv = spec.argv
  local nkeys = #emq.kinds + (spec.row_key and 1 or 0)
  if #KEYS ~= nkeys then
    return nil, emq.refuse(ARG, op .. " takes " .. nkeys .. " keys, got " .. #KEYS)
  end
  local nargs = #ARGV
  if not (nargs == #argv or (spec.clock and nargs == #argv + 1)) then
    return nil, emq.refuse(ARG, op .. " takes " .. #argv .. (spec.clock and " or " .. (#argv + 1) or "")
      .. " arguments, got " .. nargs)
  end
  local args = {keys = {}}
  local first = 1
  if argv[1] and argv[1].type == "job_id" then
    if not emq.is_job_id(ARGV[1]) then
      return nil, emq.refuse(KIND, "not a well-formed " .. emq.job_ns .. " id")
    end
    args[argv[1].name] = ARGV[1]
    first = 2
  end
  local bad = emq.check_keys(spec, args)
  if bad then
    return nil, bad
  end
  for i = first, #argv do
    local ok, v = emq.argument(argv[i], ARGV[i])
    if not ok then
      return nil, v
    end
    args[argv[i].name] = v
  end
  if spec.clock then
    if nargs == #argv + 1 then
      local t = emq.types.time
      args.now = emq.integer(ARGV[nargs], t)
      if args.now == nil then
        return nil, emq.refuse(ARG, "now must be a canonical decimal in [" .. t.min .. ", " .. t.max .. "]")
      end
    else
      args.now = emq.time_ms()
    end
  end
  return args, emq.check_types(spec, args)
end

-- Run `one`, the body of an op about one id: once, or for a batch with items once per
-- item (emq.each, batch.lua).
function emq.run(args, one)
  if args.items then
    return emq.each(args, one)
  end
  return one()
end

-- The first of the locations `locs` (names in args.keys, default all four) holding
-- `id`, or nil. A location the type check found absent (a.present[loc] == false) costs
-- no call: fakeredis runs every call through Python, so calls are the cost.
function emq.locate(a, id, locs)
  for _, loc in ipairs(locs or emq.locations) do
    if a.present[loc] ~= false and redis.call("ZSCORE", a.keys[loc], id) then
      return loc
    end
  end
  return nil
end

-- Whether an id exists: it has a row or is a member of any location.
function emq.exists(a, id)
  return a.present.row or emq.locate(a, id) ~= nil
end

-- The guard of an op about a job's live attempt (complete, retry, extend: T-complete-1..3,
-- T-retry-1..3, T-extend-1): the row exists, the id is in one of `allowed` and `token`
-- equals the row's attempts. Returns (location, attempts), or (nil, reply): `gone` when
-- there is no row and the op answers that (complete), else EMQSTALE.
function emq.live_attempt(a, allowed, gone)
  if not a.present.row then
    return nil, gone or emq.refuse(STALE, "the job is gone")
  end
  local loc = emq.locate(a, a.id, allowed)
  if not loc then
    local where = table.concat(allowed, " or ")
    return nil, emq.refuse(STALE, "the attempt was already settled: the job is not in " .. where)
  end
  local attempts = tonumber(redis.call("HGET", a.keys.row, "attempts"))
  if attempts ~= a.token then
    return nil, emq.refuse(STALE, "the token does not match the job's attempts")
  end
  return loc, attempts
end

-- The row of `id`, a member the call would take (claim, promote, reap), typed before
-- any write (CC-8): its key when it is a hash, false when there is none (an orphan
-- member), or nil and the refusal when it holds another type.
function emq.member_row(a, id)
  local row = a.prefix .. "job:" .. id
  local t = emq.key_type(row)
  local bad = emq.wrong_type(row, t, "hash")
  if bad then
    return nil, bad
  end
  return t == "hash" and row
end

-- The pump of promote and reap (T-promote, T-reap): the members of location `from` due
-- at now (score <= now), in set order, at most a.limit. Every due member's row is typed
-- first (CC-8: a row of another type refuses the call before any write); then each
-- member leaves `from`, and `move(id, row)` moves each one that has a row. Returns the
-- count moved (members without a row are removed and not counted), or the refusal.
-- The lane of every due grouped row is typed in the first pass too (CC-8, "lanes").
function emq.pump(a, from, move)
  local due = redis.call("ZRANGE", a.keys[from], "-inf", emq.int(a.now), "BYSCORE", "LIMIT", 0, a.limit)
  local rows = {}
  for i, id in ipairs(due) do
    local row, bad = emq.member_row(a, id)
    local group = row and emq.group_of(row)
    if group then
      bad = emq.lane_types(a, group)
    end
    if bad then
      return bad
    end
    rows[i] = row
  end
  local moved = 0
  for i, id in ipairs(due) do
    redis.call("ZREM", a.keys[from], id)
    if rows[i] then
      move(id, rows[i])
      moved = moved + 1
    end
  end
  return moved
end

-- Lanes (lifecycle.md §10) ---------------------------------------------------------------
-- A lane's keys hang off the queue prefix, as the rows of popped ids do (LANE-1):
-- <prefix>g:<group>:pending (ZSET), <prefix>ring (LIST), <prefix>paused (SET),
-- <prefix>glimit, <prefix>gactive, <prefix>gweight (HASH group -> canonical integer).
-- A lane object is {group, key (its pending set), lk (the fixed lane keys), was (whether
-- it was serviceable, i.e. on the ring, before the script wrote)}. A script that moves a
-- grouped job takes the lane before its first write and calls emq.lane_settle after the
-- last: that is how the ring holds exactly the serviceable lanes (LANE-4).

-- A well-formed group name (LANE-2).
function emq.is_group(s)
  local t = emq.group
  return type(s) == "string" and #s >= t.min_bytes and #s <= t.max_bytes and not string.find(s, t.pattern)
end

function emq.lane_key(prefix, group)
  return prefix .. emq.lane_head .. group .. emq.lane_tail
end

local function lane_fixed(prefix)
  local lk = {}
  for _, kind in ipairs(emq.lane_kinds) do
    lk[kind] = prefix .. kind
  end
  return lk
end

-- LANE-4: not empty, not paused, and fewer active jobs than its limit (if it has one).
local function serviceable(lane)
  local lk, group = lane.lk, lane.group
  if redis.call("ZCARD", lane.key) == 0 or redis.call("SISMEMBER", lk.paused, group) == 1 then
    return false
  end
  local limit = redis.call("HGET", lk.glimit, group)
  return not limit or tonumber(redis.call("HGET", lk.gactive, group) or "0") < tonumber(limit)
end
emq.lane_serviceable = serviceable

-- CC-8 for a lane: its pending set and the fixed lane keys its serviceability reads
-- (ring, paused, glimit, gactive) are of their grammar types or absent. Each key is
-- typed once per call (a.typed); returns the refusal, or nil.
function emq.lane_types(a, group)
  a.typed = a.typed or {}
  local key = emq.lane_key(a.prefix, group)
  for _, name in ipairs({"lane", "ring", "paused", "glimit", "gactive"}) do
    local k = name == "lane" and key or a.prefix .. name
    if not a.typed[k] then
      local bad = emq.wrong_type(k, emq.key_type(k), emq.key_types[name])
      if bad then
        return bad
      end
      a.typed[k] = true
    end
  end
end

-- The lane of `group` (typed first, CC-8), with `was` read now: call it before the
-- script's first write. Returns the lane, or nil and the refusal.
function emq.lane(a, group)
  local bad = emq.lane_types(a, group)
  if bad then
    return nil, bad
  end
  local lane = {group = group, key = emq.lane_key(a.prefix, group), lk = lane_fixed(a.prefix)}
  lane.was = serviceable(lane)
  return lane
end

-- The group of the job whose row is `row`, or nil for a plain job (no `group` field).
function emq.group_of(row)
  return redis.call("HGET", row, "group") or nil
end

-- Route `keys.pending` for the job whose row is `row`: to its lane when the row is
-- grouped, else to the queue's own pending set (kept in `keys.plain`), so the script's
-- pending reads and writes are the lane's (LANE-1, LANE-8). Returns the lane (nil for a
-- plain job), or nil and the refusal of a wrong-typed lane key (CC-8). Scripts that
-- loop over ids (promote, reap, batches) route each id in turn.
function emq.lane_route(a, row)
  local k = a.keys
  k.plain = k.plain or k.pending
  local group = emq.group_of(row)
  if not group then
    k.pending = k.plain
    return nil
  end
  local lane, bad = emq.lane(a, group)
  if bad then
    return nil, bad
  end
  k.pending = lane.key
  a.present.pending = nil -- the lane's existence is not the queue's: locate asks
  return lane
end

-- For a script about one id: route by its row, KEYS[7] (a job without a row is plain).
function emq.lane_bind(a)
  if not a.present.row then
    a.keys.pending = a.keys.plain or a.keys.pending
    return nil
  end
  return emq.lane_route(a, a.keys.row)
end

-- A grouped job entered active (lane_enter) or left it (lane_leave): gactive follows,
-- and a count that reaches 0 is no field (LANE-3). No-ops for a plain job (lane nil).
local function count(lane, delta)
  if lane and redis.call("HINCRBY", lane.lk.gactive, lane.group, delta) <= 0 then
    redis.call("HDEL", lane.lk.gactive, lane.group)
  end
end

function emq.lane_enter(lane)
  count(lane, 1)
end

function emq.lane_leave(lane)
  count(lane, -1)
end

-- After the writes: the lane joins the ring's tail the moment it became serviceable and
-- leaves it the moment it stopped (LANE-4). `at_tail`: the lane is known to be the
-- ring's last element (a claim just turned it there), so leaving is RPOP, not a scan.
function emq.lane_settle(lane, at_tail)
  if not lane then
    return
  end
  local now = serviceable(lane)
  if now and not lane.was then
    redis.call("RPUSH", lane.lk.ring, lane.group)
  elseif lane.was and not now then
    if at_tail then
      redis.call("RPOP", lane.lk.ring)
    else
      redis.call("LREM", lane.lk.ring, 1, lane.group)
    end
  end
  lane.was = now
end

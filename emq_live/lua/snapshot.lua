-- snapshot: a queue's whole keyspace in one read (lifecycle.md §7). Read-only.
--
-- KEYS: pending, active, schedule, dead, metrics:completed, metrics:failed (CC-1)
-- ARGV: none
-- Reply: {pending, active, schedule, dead, rows, completed, failed, stray,
--         lanes, ring, paused, glimit, gactive, gweight} where
--   pending..dead = {member, score, member, score, ...} (ZRANGE WITHSCORES: set order,
--                   scores as the server prints them),
--   rows          = {id, {field, value, ...}, id, {...}, ...} for every hash
--                   emq:{q}:job:<id> (id = the key's suffix, whatever it is),
--   completed, failed = the counter hash, flat {field, value, ...} ({} if absent),
--   stray         = every other key found under emq:{q}: (SCAN with the prefix
--                   glob-escaped), and a grammar key holding the wrong type,
--   lanes         = {group, {member, score, ...}, ...} for every emq:{q}:g:<group>:pending
--                   whose group is well-formed (LANE-2), in SCAN order,
--   ring          = LRANGE 0 -1, paused = SMEMBERS (any order),
--   glimit, gactive, gweight = the lane hashes, flat {field, value, ...} ({} if absent).
-- Refusals: EMQARG (KEYS/ARGV count, keys).

-- luacheck: read globals emq

local a, err = emq.begin(emq.op)
if err then return err end
local k, prefix = a.keys, a.prefix

-- Read a key with the read command of its grammar type: the reply, or nil when the key
-- holds another type (WRONGTYPE), which makes it stray. Any other error (out of memory,
-- a dead replica, a command the ACL refuses...) is raised: it says nothing about the keyspace. One call per key
-- and no TYPE probe: fakeredis dispatches every call through Python, so calls are the cost.
local stray = {}
local function read(cmd, key, ...)
  local got = redis.pcall(cmd, key, ...)
  if got.err then
    if string.sub(tostring(got.err), 1, 9) ~= "WRONGTYPE" then
      error(got)
    end
    stray[#stray + 1] = key
    return nil
  end
  return got
end

local fixed = {}
for _, name in ipairs(emq.key_names) do
  fixed[k[name]] = true
end

-- Every key under the prefix first (SCAN of the glob-escaped prefix), so only the fixed
-- keys that exist are read: an empty location costs no call.
local pattern = string.gsub(prefix, "[%*%?%[%]\\]", "\\%0") .. "*"
local row_head = prefix .. "job:"
local lane_head, lane_tail = prefix .. emq.lane_head, emq.lane_tail
for _, kind in ipairs(emq.lane_kinds) do
  fixed[prefix .. kind] = true
end
local present = {}
local rows = {}
local lanes = {}
local cursor = "0"
repeat
  local page = redis.call("SCAN", cursor, "MATCH", pattern, "COUNT", 1000)
  cursor = page[1]
  for _, key in ipairs(page[2]) do
    if fixed[key] then
      present[key] = true
    elseif not present[key] then
      present[key] = true
      local group = string.sub(key, #lane_head + 1, #key - #lane_tail)
      if string.sub(key, 1, #row_head) == row_head and #key > #row_head then
        local fields = read("HGETALL", key)
        if fields then
          rows[#rows + 1] = string.sub(key, #row_head + 1)
          rows[#rows + 1] = fields
        end
      elseif string.sub(key, 1, #lane_head) == lane_head and string.sub(key, -#lane_tail) == lane_tail
        and #key > #lane_head + #lane_tail and emq.is_group(group) then
        local members = read("ZRANGE", key, 0, -1, "WITHSCORES")
        if members then
          lanes[#lanes + 1] = group
          lanes[#lanes + 1] = members
        end
      else
        stray[#stray + 1] = key
      end
    end
  end
until cursor == "0"

local reply = {}
for i, loc in ipairs(emq.locations) do
  reply[i] = present[k[loc]] and read("ZRANGE", k[loc], 0, -1, "WITHSCORES") or {}
end
reply[#reply + 1] = rows
for _, name in ipairs({"completed", "failed"}) do
  reply[#reply + 1] = present[k[name]] and read("HGETALL", k[name]) or {}
end
reply[#reply + 1] = stray
reply[#reply + 1] = lanes
local ring, paused = prefix .. "ring", prefix .. "paused"
reply[#reply + 1] = present[ring] and read("LRANGE", ring, 0, -1) or {}
reply[#reply + 1] = present[paused] and read("SMEMBERS", paused) or {}
for _, name in ipairs({"glimit", "gactive", "gweight"}) do
  reply[#reply + 1] = present[prefix .. name] and read("HGETALL", prefix .. name) or {}
end
return reply

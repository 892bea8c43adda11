-- snapshot: a queue's whole keyspace in one read (lifecycle.md §7). Read-only.
--
-- KEYS: pending, active, schedule, dead, metrics:completed, metrics:failed (CC-1)
-- ARGV: none
-- Reply: {pending, active, schedule, dead, rows, completed, failed, stray} where
--   pending..dead = {member, score, member, score, ...} (ZRANGE WITHSCORES: set order,
--                   scores as the server prints them),
--   rows          = {id, {field, value, ...}, id, {...}, ...} for every hash
--                   emq:{q}:job:<id> (id = the key's suffix, whatever it is),
--   completed, failed = the counter hash, flat {field, value, ...} ({} if absent),
--   stray         = every other key found under emq:{q}: (SCAN with the prefix
--                   glob-escaped), and a grammar key holding the wrong type.
-- Refusals: EMQARG (KEYS/ARGV count, keys).

-- luacheck: read globals emq

local a, err = emq.begin("snapshot")
if err then return err end
local k, prefix = a.keys, a.prefix

local function key_type(key)
  local t = redis.call("TYPE", key)
  return type(t) == "table" and t.ok or t
end

local stray = {}
local fixed = {}
for i, name in ipairs(emq.key_names) do
  local want = i <= #emq.locations and "zset" or "hash"
  local got = key_type(k[name])
  fixed[k[name]] = true
  if got ~= "none" and got ~= want then
    stray[#stray + 1] = k[name]
  end
end

local reply = {}
for i, loc in ipairs(emq.locations) do
  if key_type(k[loc]) == "zset" then
    reply[i] = redis.call("ZRANGE", k[loc], 0, -1, "WITHSCORES")
  else
    reply[i] = {}
  end
end

-- every key under the prefix: escape the glob's special bytes in the queue name
local pattern = string.gsub(prefix, "[%*%?%[%]\\]", "\\%0") .. "*"
local seen = {}
local rows = {}
local cursor = "0"
repeat
  local page = redis.call("SCAN", cursor, "MATCH", pattern, "COUNT", 1000)
  cursor = page[1]
  for _, key in ipairs(page[2]) do
    if not seen[key] and not fixed[key] then
      seen[key] = true
      local row_head = prefix .. "job:"
      if string.sub(key, 1, #row_head) == row_head and #key > #row_head and key_type(key) == "hash" then
        rows[#rows + 1] = string.sub(key, #row_head + 1)
        rows[#rows + 1] = redis.call("HGETALL", key)
      else
        stray[#stray + 1] = key
      end
    end
  end
until cursor == "0"
reply[#emq.locations + 1] = rows

for _, name in ipairs({"completed", "failed"}) do
  if key_type(k[name]) == "hash" then
    reply[#reply + 1] = redis.call("HGETALL", k[name])
  else
    reply[#reply + 1] = {}
  end
end
reply[#reply + 1] = stray
return reply

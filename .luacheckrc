-- luacheck config for the EchoMQ scripts (emq_live/lua), which run inside Valkey/Redis.
-- Lua 5.1 standard library plus the scripting globals the server provides; nothing else.
-- Scripts may not create globals: every variable must be local.
std = "lua51"
read_globals = { "redis", "KEYS", "ARGV", "cjson", "bit", "struct", "cmsgpack" }
globals = {}
allow_defined = false
allow_defined_top = false
-- Parts of the Lua 5.1 std that server scripting does not load.
not_globals = { "io", "require", "module", "package", "dofile", "loadfile" }

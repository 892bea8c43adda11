"""emq_live — the Lua scripts and the Python client that runs them on Valkey or fakeredis."""

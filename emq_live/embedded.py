"""The embedded target: an in-process fakeredis server whose Lua runtime compiles each
script once.

fakeredis 2.41 runs every ``EVAL``/``EVALSHA`` as ``LuaRuntime.execute(source)``: the
whole assembled script (prelude, lib.lua, the op: about 22 KB) is parsed and compiled
again on every call, more than half of an op's cost there. ``CompiledScripts`` stands
in for the server's runtime and keeps the compiled chunk of each source it has run.
Compiling a chunk once and calling it is what ``execute`` does in one go (lupa loads
both under the same chunk name, so a script error reads the same), and a chunk holds no
state between calls: KEYS, ARGV and the globals are the runtime's, set by fakeredis
before each call. The collection fakeredis runs after each script is one incremental
step here (``STEP``: no script can tell). Everything else (the ``redis.call`` bridge,
the globals check) is fakeredis's own, untouched.

The stand-in reaches one private attribute of fakeredis (``FakeServer._lua_runtime``,
which ``_get_server_runtime`` creates on a server's first script and reuses after);
tests/live/test_embedded.py fails if a fakeredis within pyproject.toml's range stops using
it, so the speed-up cannot silently vanish or change what a script does.
"""

from __future__ import annotations

from typing import Any

FULL = ("collectgarbage()", b"collectgarbage()")
"""What fakeredis runs after every script (2.41 passes text): a full collection."""
STEP = b'collectgarbage("step")'
"""What the stand-in runs instead: one incremental step, as Valkey does (a step every
few script calls). A full collection walks every chunk kept, a cost that grows with the
scripts compiled, where the step collects the call's KEYS and ARGV just the same."""
PROBE = "return 1"
"""The script that makes fakeredis create a server's Lua runtime."""
MOST = 512
"""Compiled chunks kept at most (a selftest child runs mutants of a few scripts; a raw
call sends assembled scripts only): past it the cache starts again."""
CPU_SECONDS = 10.0
"""The CPU seconds one script may run here before it counts as one that never returns
(lifecycle.md CC-9): over three times the largest calls the contract allows (a
10,000-item ``enqueue_many`` takes 2.8 s of CPU here, a ``claim_many`` of 10,000 jobs
2.0 s). CPU time, not wall time: a loaded machine does not make a call look hung."""
HANG = "EMQHANG"
"""The first word of the error a script stopped at ``CPU_SECONDS`` raises."""
WATCH = """
local sethook, clock, fail = debug.sethook, os.clock, error
return function(seconds)
  local limit = clock() + seconds
  sethook(function()
    if clock() > limit then
      sethook()
      fail("%s the script ran past " .. seconds .. " s of CPU without returning (CC-9)", 0)
    end
  end, "", 1000)
end, function() sethook() end
""" % HANG
"""A count hook every 1,000 instructions that stops the script past its bound: an
infinite loop in a script would otherwise hang the kit's own process (no SCRIPT KILL
reaches an in-process Lua)."""


class CompiledScripts:
    """A fakeredis server's ``LuaRuntime`` whose ``execute`` compiles a source once."""

    def __init__(self, runtime: Any, seconds: float | None = None) -> None:
        self.runtime, self.seconds = runtime, CPU_SECONDS if seconds is None else seconds
        self.chunks: dict[Any, Any] = {}
        self.compiled = 0  # sources compiled: the test's proof that a chunk is reused
        self.watch, self.unwatch = runtime.execute(WATCH)

    def execute(self, source: Any, *args: Any) -> Any:
        """Run ``source`` (compiled once), stopped with a ``HANG`` error past ``seconds``
        of CPU."""
        source = STEP if source in FULL else source
        chunk = self.chunks.get(source)
        if chunk is None:
            if len(self.chunks) >= MOST:
                self.chunks.clear()
            chunk = self.chunks[source] = self.runtime.compile(source)
            self.compiled += 1
        self.watch(self.seconds)
        try:
            return chunk(*args)
        finally:
            self.unwatch()

    def __getattr__(self, name: str) -> Any:  # table_from, globals, eval, ...: the runtime's
        return getattr(self.runtime, name)


def compile_once(client: Any, server: Any) -> CompiledScripts | None:
    """Put a ``CompiledScripts`` in front of ``server``'s Lua runtime (``client`` is a
    fakeredis client of it; the runtime is made by a probe script if the server has
    none yet). Idempotent; ``None`` where this fakeredis keeps no runtime there."""
    runtime = getattr(server, "_lua_runtime", None)
    if runtime is None:
        client.eval(PROBE, 0)
        runtime = getattr(server, "_lua_runtime", None)
    if runtime is None:
        return None
    if not isinstance(runtime, CompiledScripts):
        runtime = server._lua_runtime = CompiledScripts(runtime)
    return runtime

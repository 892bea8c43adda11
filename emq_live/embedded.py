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
step here (``STEP``: no script can tell).

A script may not create a global. fakeredis enforces it by listing the runtime's
globals before every ``redis.call`` and after the script, about half of what a call
from Lua costs there; the stand-in enforces it as Valkey does, at the assignment: ``_G``
refuses a name fakeredis did not set up (``GUARD``), and fakeredis's listing runs after
the script only, where it still catches a global made some other way. Everything else
(the ``redis.call`` bridge, the words of every other error) is fakeredis's own.

The stand-in reaches two private names of fakeredis: ``FakeServer._lua_runtime`` and
``_lua_expected_globals``, which ``_get_server_runtime`` creates on a server's first
script and reuses after, and the module function ``_check_for_lua_globals`` (replaced
once by one that skips the listing while a guarded script runs, and otherwise calls
fakeredis's own). tests/live/test_embedded.py fails if a fakeredis within
pyproject.toml's range stops using them, so the speed-up cannot silently vanish or
change what a script does.
"""

from __future__ import annotations

from typing import Any, Callable

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
  local limit, word = clock() + seconds, "%s the script ran past " .. seconds .. " s of CPU without returning (CC-9)"
  local function stop() fail(word, 0) end
  sethook(function()
    if clock() > limit then
      sethook(stop, "", 1)
      stop()
    end
  end, "", 1000)
end, sethook
""" % HANG
"""A count hook every 1,000 instructions that stops the script past its bound: an
infinite loop in a script would otherwise hang the kit's own process (no SCRIPT KILL
reaches an in-process Lua). Past the bound it fails at every instruction, so a loop
that catches the error (``pcall``) meets it again at its next instruction outside; the
hook is taken off by ``sethook`` itself, a C function, which runs no instruction the
hook would stop."""
READONLY = "Attempt to modify a readonly table"
"""Valkey's words for a script that writes a global."""
GUARD = """
local names, G, rawset, rawget, rawequal, setmetatable, fail = ..., _G, rawset, rawget, rawequal, setmetatable, error
local set_metatable = debug.setmetatable
local function refuse() fail("%s", 3) end
local guard = {__metatable = {}, __newindex = function(t, k, v)
  if names[k] then return rawset(t, k, v) end
  refuse()
end}
local function rawset_guarded(t, k, v)
  if rawequal(t, G) and rawget(G, k) == nil and not names[k] then refuse() end
  return rawset(t, k, v)
end
local function setmetatable_guarded(t, mt)
  if rawequal(t, G) then refuse() end
  return setmetatable(t, mt)
end
return function()
  set_metatable(G, guard)
  rawset(G, "rawset", rawset_guarded)
  rawset(G, "setmetatable", setmetatable_guarded)
end
""" % READONLY
"""Valkey's rule for a new global: a name the runtime was not set up with (``names``)
cannot be made, by assignment or ``rawset``, nor the guard taken off by
``setmetatable``; the returned function (re)arms it before each script, with what it
uses captured when it was built, so a script that took it off or emptied ``debug``
(which Valkey does not offer) leaves the next one guarded. A global fakeredis set up may
still be overwritten, as fakeredis allows (Valkey refuses that too)."""


class _InScript:
    """Marks fakeredis's expected-globals set of a runtime running a guarded script: its
    listing before each ``redis.call`` is skipped (no name fakeredis could report)."""


IN_SCRIPT = _InScript()
LISTING: Callable[[Any, set[Any]], None] | None = None
"""fakeredis's own listing of a runtime's globals, once ``_unless_guarded`` stands in
for it."""


class CompiledScripts:
    """A fakeredis server's ``LuaRuntime`` whose ``execute`` compiles a source once."""

    def __init__(self, runtime: Any, seconds: float | None = None, expected: set[Any] | None = None) -> None:
        """``expected``: fakeredis's set of the names the runtime was set up with (its
        globals guard stays as fakeredis has it when None)."""
        self.runtime, self.seconds = runtime, CPU_SECONDS if seconds is None else seconds
        self.chunks: dict[Any, Any] = {}
        self.compiled = 0  # sources compiled: the test's proof that a chunk is reused
        self.watch, self.unwatch = runtime.execute(WATCH, name="=emq-watch")
        self.guard: tuple[Callable[[], None], set[Any]] | None = None  # (GUARD's arming, fakeredis's set)
        if expected is not None and _skip_listing_in_scripts():
            names = runtime.table_from({name: True for name in expected if isinstance(name, (bytes, str))})
            self.guard = runtime.execute(GUARD, names, name="=emq-guard"), expected

    def execute(self, source: Any, *args: Any) -> Any:
        """Run ``source`` (compiled once), stopped with a ``HANG`` error past ``seconds``
        of CPU; a script under Valkey's globals rule when the stand-in guards them."""
        if source in FULL:
            return self._run(STEP, args)
        if self.guard is None:
            return self._run(source, args)
        arm, expected = self.guard
        arm()
        expected.add(IN_SCRIPT)
        try:
            return self._run(source, args)
        finally:
            expected.discard(IN_SCRIPT)

    def _run(self, source: Any, args: tuple[Any, ...]) -> Any:
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
        runtime = server._lua_runtime = CompiledScripts(runtime, expected=getattr(server, "_lua_expected_globals", None))
    return runtime


def _skip_listing_in_scripts() -> bool:
    """Replace fakeredis's globals listing (once) by one that skips it while a guarded
    script runs and otherwise calls it (``LISTING``); False where this fakeredis has no
    such function to replace."""
    global LISTING
    try:
        from fakeredis.commands_mixins import scripting_mixin as mixin
    except ImportError:
        return False
    found = getattr(mixin, "_check_for_lua_globals", None)
    if found is None:
        return False
    if found is not _unless_guarded:  # (never its own stand-in: two threads may both get here)
        LISTING = found
        mixin._check_for_lua_globals = _unless_guarded
    return True


def _unless_guarded(lua_runtime: Any, expected_globals: set[Any]) -> None:
    if IN_SCRIPT not in expected_globals:
        assert LISTING is not None
        LISTING(lua_runtime, expected_globals)

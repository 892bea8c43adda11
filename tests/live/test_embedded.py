"""The embedded target compiles each script once (emq_live/embedded.py), and answers
exactly as fakeredis does without it, but for a script that makes a global: refused at
the assignment, as Valkey refuses it."""

from __future__ import annotations

from typing import Any

import fakeredis
import pytest
import redis

from emq_kit.server import ServerProcess
from emq_live import connect, embedded
from emq_model.branded_id import JOB, encode

FAILING = [
    b"return error('boom')",
    b"local x = nil; return x + 1",
    b"return redis.call('NOSUCHCOMMAND')",
    b"return redis.call('INCR', KEYS[1])",
    b"return {1, 'two', {3}}",
    b"return redis.call('SET', KEYS[1], ARGV[1])",
]


def plain() -> tuple[Any, Any]:
    server = fakeredis.FakeServer()
    return server, fakeredis.FakeRedis(server=server, protocol=2)


def answer(client: Any, script: bytes) -> Any:
    try:
        return ("ok", client.eval(script, 1, "k", "v"))
    except redis.ResponseError as exc:
        return ("error", str(exc))


def test_connect_puts_the_cache_in_front_of_the_runtime_and_reuses_a_chunk() -> None:
    with connect() as conn:
        runtime = conn.server._lua_runtime
        assert isinstance(runtime, embedded.CompiledScripts)
        q = conn.queue("emb")
        assert q.enqueue(id=encode(JOB, 1), payload=b"a") == "enqueued"
        after_one = runtime.compiled
        for n in range(2, 12):
            assert q.enqueue(id=encode(JOB, n), payload=b"a") == "enqueued"
        assert runtime.compiled == after_one  # ten more enqueues, no new compile
        assert embedded.compile_once(conn.redis, conn.server) is runtime  # idempotent


@pytest.mark.parametrize("script", FAILING, ids=[s.decode()[:28] for s in FAILING])
def test_every_answer_and_error_reads_as_without_the_cache(script: bytes) -> None:
    """Error texts (chunk name and line), replies and writes are fakeredis's own: the same
    script on a server with and one without the cache."""
    bare_server, bare = plain()
    cached_server, cached = plain()
    assert embedded.compile_once(cached, cached_server) is not None
    cached.set("k", "x")
    bare.set("k", "x")
    for _ in range(2):  # the second run takes the compiled chunk
        assert answer(cached, script) == answer(bare, script)
        assert cached.get("k") == bare.get("k")
        assert answer(cached, b"return 1") == ("ok", 1)  # a failed script leaves no leaked global


def test_past_its_bound_the_cache_starts_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(embedded, "MOST", 3)
    server, client = plain()
    runtime = embedded.compile_once(client, server)
    assert runtime is not None
    for n in range(10):
        assert client.eval(f"return {n}", 0) == n
    assert len(runtime.chunks) <= 3


def test_the_step_after_each_script_keeps_the_lua_heap_bounded() -> None:
    """fakeredis's full collection after each script is one incremental step here: the
    KEYS and ARGV tables of every call are still collected (the heap does not grow with
    the number of calls)."""
    with connect() as conn:
        runtime = conn.server._lua_runtime
        q = conn.queue("emb-gc")

        def heap_after(calls: int, first: int) -> float:
            for n in range(first, first + calls):
                assert q.enqueue(id=encode(JOB, n), payload=b"x" * 200) == "enqueued"
                assert q.remove(id=encode(JOB, n)) == "ok"
            return float(runtime.eval('collectgarbage("count")'))

        early = heap_after(300, 1)
        late = heap_after(3000, 1000)
        assert late < 1.5 * early, (early, late)
        assert embedded.STEP in runtime.chunks  # the step ran, the full collection never did
        assert not any(full in runtime.chunks for full in embedded.FULL)


GLOBALS = [
    b"leaked = 1; return 1",
    b"rawset(_G, 'leaked', 1); return 1",
    b"redis.call('SET', KEYS[1], 'before'); leaked = 1; redis.call('SET', KEYS[1], 'after'); return 1",
    b"local function f() leaked = 1 end; redis.call('SET', KEYS[1], 'before'); f(); return 1",
    b"setmetatable(_G, {}); leaked = 1; return 1",
]


@pytest.mark.parametrize("script", GLOBALS, ids=["assigned", "rawset", "between-writes", "in-a-function", "setmetatable"])
def test_a_script_that_makes_a_global_is_refused_at_the_assignment_as_on_valkey(
        script: bytes, valkey: ServerProcess) -> None:
    """Valkey refuses the assignment itself: a write before it stays, none after it
    happens, and the next script finds no such global. The embedded target does the same,
    in Valkey's words."""
    server = redis.Redis.from_url(valkey.url)
    with connect() as conn:
        for client in (server, conn.redis):
            client.set("k", "x")
            kind, text = answer(client, script)
            assert kind == "error" and embedded.READONLY in text, (client, text)
            assert client.get("k") == (b"before" if b"before" in script else b"x")
            assert client.eval("return rawget(_G, 'leaked') == nil", 0) == 1
            client.delete("k")
    server.close()


def test_the_guard_replaces_fakeredis_s_listing_inside_scripts_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each ``redis.call`` of a guarded script skips fakeredis's listing of the globals
    (what the guard is for); the listing still runs after the script, so a global made
    past the guard (``debug``, which Valkey does not offer) is refused there and the next
    script is guarded again; a fakeredis server without the stand-in in the same process
    keeps fakeredis's own check, word for word."""
    from fakeredis.commands_mixins import scripting_mixin

    listed: list[bool] = []
    with connect() as conn:
        runtime = conn.server._lua_runtime
        assert runtime.guard is not None and runtime.guard[1] is conn.server._lua_expected_globals
        assert scripting_mixin._check_for_lua_globals is embedded._unless_guarded  # what the guard replaces
        original = embedded.LISTING
        assert original is not None

        def counting(rt: Any, expected: set[Any]) -> None:
            listed.append(embedded.IN_SCRIPT in expected)
            original(rt, expected)

        monkeypatch.setattr(embedded, "LISTING", counting)
        conn.redis.eval("for i = 1, 5 do redis.call('INCR', KEYS[1]) end; return 1", 1, "n")
        assert listed == [False]  # once, after the script: none of the five calls listed
        kind, text = answer(conn.redis, b"debug.setmetatable(_G, nil); leaked = 1; return 1")
        assert kind == "error" and "leaked" in text  # fakeredis's listing, after the script
        kind, text = answer(conn.redis, b"leaked = 1; return 1")
        assert kind == "error" and embedded.READONLY in text  # armed again

    _, bare = plain()
    kind, text = answer(bare, b"redis.call('GET', KEYS[1]); leaked = 1; return 1")
    assert kind == "error" and text.endswith("Script attempted to set global variables: leaked")


@pytest.mark.parametrize("disarm", [b"debug.setmetatable = function() end", b"debug = nil",
                                    b"local unset = debug.setmetatable; unset(_G, nil); debug.setmetatable = nil"])
def test_a_script_that_empties_debug_leaves_the_next_one_guarded(disarm: bytes) -> None:
    """The guard re-arms with what it captured when it was built, never with the globals
    a script may have changed (``debug``, which Valkey does not offer)."""
    with connect() as conn:
        answer(conn.redis, disarm + b"; return 1")
        conn.redis.set("k", "x")
        kind, text = answer(conn.redis, b"redis.call('SET', KEYS[1], 'before'); leaked = 1; "
                                        b"redis.call('SET', KEYS[1], 'after'); return 1")
        assert kind == "error" and embedded.READONLY in text, text
        assert conn.redis.get("k") == b"before"
        assert answer(conn.redis, b"return 1") == ("ok", 1)


@pytest.mark.parametrize("loop", [b"while true do pcall(function() leaked = 1 end) end",
                                  b"while true do pcall(function() local x = 1 end) end",
                                  b"while true do pcall(error, 'caught') end"])
def test_a_loop_that_catches_errors_is_still_stopped_at_the_bound(loop: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    """CC-9 on the embedded target: past its bound the watch fails at every instruction,
    so a loop that catches the error (``pcall``) meets it again outside; the next script
    runs unwatched by the stopped one's hook."""
    monkeypatch.setattr(embedded, "CPU_SECONDS", 0.5)
    with connect() as conn:
        kind, text = answer(conn.redis, loop)
        assert kind == "error" and embedded.HANG in text, text
        assert answer(conn.redis, b"return 7") == ("ok", 7)
        assert answer(conn.redis, b"for i = 1, 100000 do local x = i end; return rawget(_G, 'leaked') == nil") == ("ok", 1)

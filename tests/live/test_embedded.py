"""The embedded target compiles each script once (emq_live/embedded.py), and answers
exactly as fakeredis does without it."""

from __future__ import annotations

from typing import Any

import fakeredis
import pytest
import redis

from emq_live import connect, embedded
from emq_model.branded_id import JOB, encode

FAILING = [
    b"return error('boom')",
    b"local x = nil; return x + 1",
    b"return redis.call('NOSUCHCOMMAND')",
    b"return redis.call('INCR', KEYS[1])",
    b"leaked = 1; return 1",
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
    """Error texts (chunk name and line), the globals guard, replies and writes are
    fakeredis's own: the same script on a server with and one without the cache."""
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

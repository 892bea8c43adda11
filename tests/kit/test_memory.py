"""The machine's two ways of reading a live snapshot besides a plain snapshot.lua call:
from the embedded fakeredis's memory (emq_kit/check/memory.py), and brought back with each
call in one round trip (``ObservedQueue``). Each must say exactly what snapshot.lua
says, read on its own, at the same moment."""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any

import pytest
import redis

import emq_live
from emq_kit.check import memory
from emq_kit.check.live import LiveTarget, ObservedQueue
from emq_kit.check.profiles import PROFILES
from emq_kit.check.run import run_check
from emq_model import spec
from emq_model.errors import StaleError
from emq_model.snapshot import Snapshot
from tests.livekit import J, flush_url

Q = "s*[x]"  # glob metacharacters: a reader that matched keys by an unescaped glob would see the next queue


def hostile(r: redis.Redis, q: emq_live.client.Queue) -> None:
    """A keyspace with every kind of key snapshot.lua must classify."""
    q.enqueue(J(1), b"\x00\xff")
    q.enqueue(J(2), "ü")
    q.schedule(J(3), b"", run_at=5, now=1)
    assert q.claim(lease_ms=10, now=1) is not None
    q.lane_enqueue(J(6), b"l", "p1")
    q.lane_enqueue(J(7), b"l", "p1")
    q.lane_enqueue(J(8), b"l", "p2")
    assert q.lane_claim(lease_ms=10, now=1) is not None
    q.lane_pause("p2")
    q.lane_limit("p1", 3)
    q.lane_weight("p3", 4)
    head = "emq:{" + Q + "}:"
    r.set(head + "junk", "1")
    r.set(head + "job:" + J(4), "a string, not a row")
    r.hset(head + "job:", mapping={"state": "pending"})  # a row key without an id
    r.zadd(head + "job:" + J(5), {"m": 1})  # a sorted set where a row belongs
    r.hset(head + "job:not-an-id", mapping={"state": b"\xfe"})  # a row with a foreign id
    r.zadd(head + "pending", {b"\xff\xfe": 0})  # a member that is not UTF-8
    r.rpush(head + "dead", "x")  # a list where a location belongs
    r.set(head + "metrics:completed", "7")  # a counter of the wrong type
    r.hset(head + "metrics:failed", mapping={"count": "02", "extra": "1"})  # non-canonical, foreign field
    r.set("emq:{sa[x]}:junk", "another queue that an unescaped glob would match")
    r.zadd(head + "g:bad group:pending", {J(9): 0})  # a lane key whose group the grammar refuses
    r.hset(head + "g:p4:pending", mapping={"x": "1"})  # a lane key of the wrong type
    r.hset(head + "gweight", mapping={"p5": "two"})  # a lane hash with a value that is no integer


def test_memory_reads_what_snapshot_lua_reads_on_a_hostile_keyspace() -> None:
    conn = emq_live.connect()
    q = conn.queue(Q)
    hostile(conn.redis, q)
    by_lua = q.snapshot()
    assert by_lua.stray and by_lua.rows and by_lua.active  # the keyspace has every kind of key
    assert by_lua.lanes and by_lua.ring and by_lua.paused and by_lua.glimit and by_lua.gactive and by_lua.gweight
    assert {"emq:{" + Q + "}:g:bad group:pending", "emq:{" + Q + "}:gweight"} <= set(by_lua.stray)
    assert memory.snapshot(q, conn.server) == by_lua


def test_memory_reads_an_absent_queue_as_empty() -> None:
    conn = emq_live.connect()
    q = conn.queue("nothing")
    assert memory.snapshot(q, conn.server) == q.snapshot() == Snapshot("nothing")


class Agreeing(LiveTarget):
    """A live target that, at every step, also reads the queue with a plain snapshot.lua
    call and demands the machine's reading (from memory, or brought back with the call)
    be the same."""

    def __init__(self, url: str | None) -> None:
        super().__init__(url, observe=True)
        self.compared = 0
        # step by step: a window's snapshots are snapshot.lua's own
        self.capabilities = dataclasses.replace(self.capabilities, batch_max=0)

    def snapshot(self, name: str) -> Snapshot:
        mine, by_lua = super().snapshot(name), self.queue(name).snapshot()
        assert mine == by_lua, f"the machine read {mine}\nsnapshot.lua read {by_lua}"
        self.compared += 1
        return mine


@pytest.mark.parametrize("where", ["fakeredis", "valkey"])
def test_the_machines_reading_agrees_with_snapshot_lua_at_every_step(where, request) -> None:
    """The machine's whole vocabulary (both queues, rows deleted by hand, refused
    arguments, batches): after every step both readings see the same keyspace."""
    target = Agreeing(None if where == "fakeredis" else flush_url(request.getfixturevalue("valkey")))
    try:
        report = run_check(target, dataclasses.replace(PROFILES["dev"], gate=False), seed=7)
    finally:
        target.close()
    assert report.ok, report.divergence
    assert target.compared > 500  # a snapshot after every step but a refused queue name


@pytest.mark.parametrize("where", ["fakeredis", "valkey"])
def test_a_snapshot_read_by_its_changed_parts_is_the_one_read_whole(where, request, monkeypatch) -> None:
    """A reply of the queue's last one's shape is read by the parts that differ from it
    (``Queue._snapshot_of``): each location, the rows, the small keys; at every read of a
    run, the same snapshot as reading the reply whole."""
    by_parts, read = emq_live.client.Queue._snapshot_of, Counter[str]()

    def both(queue: emq_live.client.Queue, reply: Any) -> Snapshot:
        last = queue.last_read
        got = by_parts(queue, reply)
        assert got == queue._whole(reply)
        small = len(spec.LOCATIONS) + 1  # the parts after the locations and the rows
        if last is not None:  # a part that did not change is the last snapshot's, not read again
            kept = [f for i, f in enumerate([*spec.LOCATIONS, "rows"]) if reply[i] == last[0][i]]
            assert all(getattr(got, f) is getattr(last[1], f) for f in kept), kept
        read["whole" if last is None else "parts" if reply[small:] == last[0][small:] else "small keys"] += 1
        return got

    monkeypatch.setattr(emq_live.client.Queue, "_snapshot_of", both)
    target = LiveTarget(None if where == "fakeredis" else flush_url(request.getfixturevalue("valkey")), observe=True)
    try:
        report = run_check(target, dataclasses.replace(PROFILES["dev"], gate=False), seed=7)
    finally:
        target.close()
    assert report.ok, report.divergence
    assert read["parts"] > 500 and read["small keys"] > 50 and read["whole"] > 50, read  # a queue's first read is whole


@pytest.fixture
def observed(valkey) -> tuple[redis.Redis, ObservedQueue]:
    conn = emq_live.connect(flush_url(valkey))
    return conn.redis, ObservedQueue(conn, Q)


def test_a_call_brings_back_the_snapshot_after_it(observed) -> None:
    r, q = observed
    q.enqueue(J(1), b"\x00\xff")
    r.set("emq:{" + Q + "}:junk", "1")
    r.set("emq:{sa[x]}:junk", "another queue")
    assert q.enqueue(J(6), b"p") == "enqueued"
    brought = q.take_snapshot()
    assert brought.row(J(6)) is not None and brought == q.snapshot()
    assert q.observed is None  # handed out once: the next take reads anew
    r.delete("emq:{" + Q + "}:junk")
    assert q.take_snapshot() == q.snapshot() != brought


def test_a_refused_call_brings_back_the_unchanged_snapshot(observed) -> None:
    r, q = observed
    q.enqueue(J(1), b"")
    before = q.snapshot()
    with pytest.raises(StaleError):
        q.complete(J(1), 1)  # never claimed: no holder of token 1
    assert q.take_snapshot() == before


@pytest.mark.parametrize("loaded", [(), ("snapshot",)], ids=["all flushed", "only the op's script flushed"])
def test_after_a_script_flush_the_snapshot_still_follows_the_call(observed, loaded) -> None:
    """A call that met NOSCRIPT did not run: the snapshot read beside it is thrown away
    and both run again in order, so the snapshot shows the call's effect."""
    r, q = observed
    r.script_flush()
    q.conn.scripts.load(r, list(loaded))
    assert q.enqueue(J(1), b"") == "enqueued"
    assert q.take_snapshot().row(J(1)) is not None
    assert q.take_snapshot() == q.snapshot()


def test_the_models_side_run_while_the_call_is_on_the_wire_fails_as_itself(valkey, monkeypatch) -> None:
    """The model runs while the target's call is on the wire; a bug in the model must
    surface as the model's exception, never as the target's outcome (a ``Crash``)."""
    from emq_kit.check.machine import Conformance
    from emq_kit.check.tally import Run
    from emq_model.model import QueueModel

    target = LiveTarget(flush_url(valkey), observe=True)
    try:
        machine = Conformance.factory(target, Run())()

        def broken(self, **_: object) -> None:
            raise RuntimeError("a bug in the model")

        monkeypatch.setattr(QueueModel, "enqueue", broken)
        with pytest.raises(RuntimeError, match="a bug in the model"):
            machine.execute("alpha", "enqueue", {"id": J(1), "payload": b""})
        assert target.queue("alpha").snapshot().row(J(1)) is not None  # the target's call did run
        assert target.queue("alpha").meanwhile is None
    finally:
        target.close()

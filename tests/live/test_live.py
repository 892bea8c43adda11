"""The implementation under test: every scenario runs on the model, fakeredis
and Valkey. On a live backend every call is also made on the model (``livekit.Twin``):
answers, refusal codes and whole snapshots must agree, and a refusal must leave every
key of the server byte for byte as it was."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

import emq_live
from emq_kit.server import ServerProcess
from emq_live.scripts import ScriptSet, prelude
from emq_model import errors, keyspace, spec
from emq_model.branded_id import MAX_VALUE, encode
from emq_model.model import Claimed
from tests.livekit import DB, Backend, J, Monitor, flush_url

MS_MAX = spec.LIMITS["ms_max"]
T0 = 1_000_000


def tour(q) -> None:
    """A scenario that reaches every (op, outcome) cell of transitions.json."""
    A, B, C, D, E, F = (J(n) for n in range(1, 7))
    t = T0
    assert q.enqueue(A, b"a") == "enqueued"
    assert q.enqueue(A, b"other") == "duplicate"
    with pytest.raises(errors.KindError):
        q.enqueue("ORD00000000001", b"x")
    with pytest.raises(errors.ArgError):
        q.enqueue(B, 5)
    assert q.schedule(B, b"b", delay_ms=50, now=t) == "scheduled"
    assert q.schedule(B, b"b", run_at=5, now=t) == "duplicate"
    with pytest.raises(errors.KindError):
        q.schedule("JOBzzzzzzzzzzz", b"", run_at=1, now=t)
    with pytest.raises(errors.ArgError):
        q.schedule(C, b"", now=t)
    assert q.promote(now=t + 49) == 0
    assert q.promote(now=t + 50) == 1  # the run-at is inclusive
    with pytest.raises(errors.ArgError):
        q.promote(now=t, limit=0)
    assert q.claim(100, now=t + 60) == Claimed(A, b"a", 1)
    with pytest.raises(errors.ArgError):
        q.claim(0, now=t)
    assert q.extend(A, 1, 500, now=t + 70) == "ok"
    with pytest.raises(errors.KindError):
        q.extend("x", 1, 5, now=t)
    with pytest.raises(errors.ArgError):
        q.extend(A, 0, 5, now=t)
    with pytest.raises(errors.StaleError):
        q.extend(A, 2, 5, now=t)
    assert q.complete(A, 1) == "ok"
    assert q.complete(A, 1) == "gone"
    with pytest.raises(errors.KindError):
        q.complete("", 1)
    with pytest.raises(errors.ArgError):
        q.complete(B, -1)
    assert q.claim(100, now=t + 100) == Claimed(B, b"b", 1)
    with pytest.raises(errors.StaleError):
        q.complete(B, 2)
    assert q.reap(now=t + 199) == 0
    assert q.reap(now=t + 200) == 1  # the deadline is inclusive
    with pytest.raises(errors.ArgError):
        q.reap(now=t, limit=spec.LIMITS["limit_max"] + 1)
    assert q.complete(B, 1) == "ok"  # a late ack from pending

    assert q.enqueue(C, "c") == "enqueued"
    assert q.claim(100, now=t + 300) == Claimed(C, b"c", 1)
    assert q.retry(C, 1, delay_ms=10, max_attempts=2, error="e1", now=t + 310) == "scheduled"
    with pytest.raises(errors.StaleError):
        q.retry(C, 1, delay_ms=10, max_attempts=2, error="again", now=t + 311)  # settled
    with pytest.raises(errors.StaleError):
        q.complete(C, 1)  # settled
    assert q.promote(now=t + 320) == 1
    assert q.claim(100, now=t + 330) == Claimed(C, b"c", 2)
    assert q.retry(C, 2, delay_ms=10, max_attempts=2, error=b"e2", now=t + 340) == "dead"
    with pytest.raises(errors.KindError):
        q.retry("JOB", 2, delay_ms=0, max_attempts=1, error="", now=t)
    with pytest.raises(errors.ArgError):
        q.retry(C, 2, delay_ms=0, max_attempts=0, error="", now=t)
    with pytest.raises(errors.StaleError):
        q.retry(D, 1, delay_ms=0, max_attempts=1, error="", now=t)  # gone
    with pytest.raises(errors.StateError):
        q.reprocess(D)
    with pytest.raises(errors.KindError):
        q.reprocess("JOB0000000000!")
    assert q.reprocess(C) == "ok"
    with pytest.raises(errors.StateError):
        q.reprocess(C)  # pending now
    assert q.claim(100, now=t + 400) == Claimed(C, b"c", 3)
    assert q.reap(now=t + 500, max_attempts=3) == 1  # to dead: a poison job

    assert q.enqueue(D, b"d") == "enqueued"
    assert q.claim(1000, now=t + 600) == Claimed(D, b"d", 1)
    with pytest.raises(errors.LockError):
        q.remove(D)
    assert q.remove(C) == "ok"
    assert q.remove(C) == "gone"
    with pytest.raises(errors.KindError):
        q.remove("JOB00000000001x")

    assert q.enqueue(E, b"e") == "enqueued"
    assert q.enqueue(F, b"f") == "enqueued"
    q.forget_row(E)
    assert q.claim(1000, now=t + 700) == Claimed(F, b"f", 1)
    assert q.last_dropped == (E,)
    assert q.claim(1000, now=t + 700) is None
    assert q.last_dropped == ()
    assert q.counts() == {"pending": 0, "active": 2, "schedule": 0, "dead": 0}
    assert q.state(D) == "active" and q.state(C) == "absent"

    # CC-8: a key the call touches holds another type: refused, nothing changes
    for key, call in (("active", lambda: q.extend(D, 1, 5, now=t + 800)),
                      ("pending", lambda: q.enqueue(E, b"e")),
                      ("pending", lambda: q.schedule(E, b"e", delay_ms=1, now=t + 800)),
                      ("pending", lambda: q.claim(100, now=t + 800)),
                      ("pending", lambda: q.complete(D, 1)),
                      ("pending", lambda: q.retry(D, 1, delay_ms=0, max_attempts=5, error="e", now=t + 800)),
                      ("pending", lambda: q.promote(now=t + 800)),
                      ("pending", lambda: q.reap(now=t + 800)),
                      ("pending", lambda: q.reprocess(C)),
                      ("pending", lambda: q.remove(C))):
        q.spoil(key)
        with pytest.raises(errors.WrongTypeError):
            call()
        q.mend(key)


def test_tour_reaches_every_cell(backend) -> None:
    q = backend.queue("tour")
    tour(q)
    assert q.cells == set(spec.cells())


def test_tour_on_awkward_queue_names(backend) -> None:
    for name in ("a*b?[c]\\", "é-ü", "x" * 128):
        tour(backend.queue(name))


# -- one op at a time ----------------------------------------------------------------


def test_enqueue_treats_a_member_without_row_as_existing(backend) -> None:
    q = backend.queue()
    assert q.enqueue(J(1), b"") == "enqueued"
    q.forget_row(J(1))
    assert q.enqueue(J(1), b"new") == "duplicate"
    assert q.schedule(J(1), b"new", run_at=1, now=T0) == "duplicate"
    assert q.state(J(1)) == "pending" and q.job(J(1)) is None


def test_payloads_are_bytes_exact(backend) -> None:
    q = backend.queue()
    payload = bytes(range(256)) * 3
    assert q.enqueue(J(1), payload) == "enqueued"
    assert q.enqueue(J(2), "ünï") == "enqueued"
    assert q.job(J(1))["payload"] == payload
    assert q.claim(1, now=0) == Claimed(J(1), payload, 1)
    assert q.claim(1, now=0) == Claimed(J(2), "ünï".encode(), 1)


def test_schedule_modes_and_exact_big_scores(backend) -> None:
    q = backend.queue()
    assert q.schedule(J(1), b"", run_at=MS_MAX, now=0) == "scheduled"
    assert q.schedule(J(2), b"", delay_ms=MS_MAX, now=MS_MAX) == "scheduled"  # 2^49 - 2
    assert q.schedule(J(3), b"", run_at=0, now=T0) == "scheduled"  # in the past: allowed
    with pytest.raises(errors.ArgError):
        q.schedule(J(4), b"", run_at=1, delay_ms=1, now=T0)
    with pytest.raises(errors.ArgError):
        q.schedule(J(4), b"", run_at=MS_MAX + 1, now=T0)
    with pytest.raises(errors.ArgError):
        q.schedule(J(4), b"", delay_ms=-1, now=T0)
    with pytest.raises(errors.ArgError):
        q.schedule(J(4), b"", delay_ms=1, now=MS_MAX + 1)
    assert q.promote(now=T0) == 1
    assert q.promote(now=MS_MAX) == 1
    assert q.claim(MS_MAX, now=MS_MAX) == Claimed(J(1), b"", 1)  # J1 < J3 in pending
    assert q.check().score("active", J(1)) == 2 * MS_MAX
    assert q.check().score("schedule", J(2)) == 2 * MS_MAX
    assert q.promote(now=MS_MAX) == 0
    with pytest.raises(errors.ArgError):
        q.promote(now=2 * MS_MAX)


def test_claim_takes_the_lowest_id_in_byte_order(backend) -> None:
    q = backend.queue()
    ids = [J(62**10 * 9), J(5), J(62**10 * 3), J(62), J(MAX_VALUE)]
    for i in ids:
        assert q.enqueue(i, i) == "enqueued"
    assert q.browse(2) == sorted(ids, reverse=True)[:2]
    assert q.browse(100) == sorted(ids, reverse=True)
    got = [q.claim(10, now=T0).id for _ in ids]
    assert got == sorted(ids)
    assert q.claim(10, now=T0) is None


def test_claim_drops_orphans_and_never_creates_a_row(backend, caplog) -> None:
    q = backend.queue()
    for n in range(1, 5):
        q.enqueue(J(n), b"p%d" % n)
    q.forget_row(J(1))
    q.forget_row(J(2))
    q.forget_row(J(4))
    with caplog.at_level(logging.WARNING, logger="emq_live"):
        assert q.claim(10, now=T0) == Claimed(J(3), b"p3", 1)
    assert q.last_dropped == (J(1), J(2))
    if q.live is not None:
        assert q.live.last_dropped == (J(1), J(2))
        assert J(1) in caplog.text and J(2) in caplog.text
    assert q.job(J(1)) is None and q.state(J(1)) == "absent"
    assert q.claim(10, now=T0) is None
    assert q.last_dropped == (J(4),)
    assert q.job(J(4)) is None
    assert q.counts() == {"pending": 0, "active": 1, "schedule": 0, "dead": 0}


def test_complete_and_retry_refuse_settled_attempts(backend) -> None:
    q = backend.queue()
    q.enqueue(J(1), b"")
    with pytest.raises(errors.StaleError):
        q.complete(J(1), 1)  # never claimed: attempts 0
    c = q.claim(10, now=T0)
    assert q.retry(J(1), c.token, delay_ms=0, max_attempts=1, error="x", now=T0) == "dead"
    for call in (lambda: q.complete(J(1), 1), lambda: q.retry(J(1), 1, delay_ms=0, max_attempts=9, error="", now=T0)):
        with pytest.raises(errors.StaleError):
            call()
    assert q.job(J(1))["state"] == b"dead"
    q.enqueue(J(2), b"")
    q.forget_row(J(2))
    with pytest.raises(errors.StaleError):
        q.retry(J(2), 1, delay_ms=0, max_attempts=1, error="", now=T0)
    assert q.complete(J(2), 1) == "gone"


def test_retry_of_a_late_attempt_from_pending(backend) -> None:
    q = backend.queue()
    q.enqueue(J(1), b"")
    q.claim(10, now=T0)
    assert q.reap(now=T0 + 10) == 1
    assert q.retry(J(1), 1, delay_ms=5, max_attempts=3, error="slow", now=T0 + 20) == "scheduled"
    assert q.job(J(1))["last_error"] == b"slow"
    assert q.check().score("schedule", J(1)) == T0 + 25


def test_extend_after_the_deadline_and_after_a_reap(backend) -> None:
    q = backend.queue()
    q.enqueue(J(1), b"")
    q.claim(10, now=T0)
    assert q.extend(J(1), 1, 1, now=T0 + 50) == "ok"  # late but not reaped
    assert q.extend(J(1), 1, 5, now=T0) == "ok"  # may shorten the lease
    assert q.check().score("active", J(1)) == T0 + 5
    assert q.reap(now=T0 + 5) == 1
    with pytest.raises(errors.StaleError):
        q.extend(J(1), 1, 5, now=T0)
    with pytest.raises(errors.StaleError):
        q.extend(J(2), 1, 5, now=T0)


def test_promote_limit_order_and_orphans(backend) -> None:
    q = backend.queue()
    for n in range(1, 8):
        q.schedule(J(n), b"", run_at=100 - n, now=0)
    q.forget_row(J(7))  # the earliest one
    assert q.promote(now=100, limit=3) == 2  # J7 (orphan, dropped), J6, J5
    assert q.counts()["schedule"] == 4
    assert q.promote(now=95) == 0  # J4 at 96 is not due yet
    assert q.promote(now=96) == 1
    assert q.promote(now=MS_MAX, limit=spec.LIMITS["limit_max"]) == 3
    assert q.browse(10) == [J(n) for n in range(6, 0, -1)]


def test_reap_limit_cap_and_orphans(backend) -> None:
    q = backend.queue()
    for n in range(1, 6):
        q.enqueue(J(n), b"")
        q.claim(n, now=T0)  # deadlines T0+1 .. T0+5
    q.forget_row(J(1))
    assert q.reap(now=T0 + 3, limit=2, max_attempts=2) == 1  # J1 orphan, J2 requeued
    assert q.reap(now=T0 + 3, max_attempts=1) == 1  # J3 attempts 1 >= 1: dead
    row = q.job(J(3))
    assert row["last_error"] == b"lease expired" and row["state"] == b"dead"
    assert q.reap(now=T0 + 4) == 1
    assert q.state(J(4)) == "pending"
    assert q.state(J(5)) == "active"


def test_remove_from_each_location(backend) -> None:
    q = backend.queue()
    q.enqueue(J(1), b"")
    q.schedule(J(2), b"", run_at=5, now=0)
    q.enqueue(J(3), b"")
    q.claim(5, now=0)
    q.retry(J(1), 1, delay_ms=0, max_attempts=1, error="", now=0)  # J1 dead
    q.enqueue(J(4), b"")
    q.forget_row(J(4))  # orphan member
    for i in (J(1), J(2), J(3), J(4)):
        assert q.remove(i) == "ok"
        assert q.state(i) == "absent"
    assert q.remove(J(1)) == "gone"
    assert q.check().completed == 0


def test_reads(backend) -> None:
    q = backend.queue()
    assert q.browse(1) == [] and q.counts() == dict.fromkeys(spec.LOCATIONS, 0)
    q.enqueue(J(1), b"one")
    q.enqueue(J(2), b"two")
    q.schedule(J(3), b"", run_at=9, now=0)
    assert q.browse(1) == [J(2)]
    assert q.state(J(1)) == "pending" and q.state(J(3)) == "schedule" and q.state(J(9)) == "absent"
    assert q.job(J(1)) == {"state": b"pending", "attempts": b"0", "payload": b"one"}
    assert q.job(J(9)) is None
    with pytest.raises(errors.ArgError):
        q.browse(0)
    with pytest.raises(errors.KindError):
        q.state("ORD00000000001")
    with pytest.raises(errors.KindError):
        q.job(J(1).lower())
    q.forget_row(J(2))
    assert q.state(J(2)) == "pending"
    q.remove(J(1))
    if q.live is not None:
        q.redis.hset(keyspace.job_key(q.name, J(1)), "state", "pending")  # a row in no set
        q.model.rows[J(1)] = {"state": b"pending"}
        assert q.state(J(1)) == "unknown"


def test_two_queues_never_touch_each_other(backend) -> None:
    a, b = backend.queue("a"), backend.queue("b")
    b.enqueue(J(1), b"b")
    b.schedule(J(2), b"b", run_at=1, now=0)
    before = b.check()
    tour(a)
    assert b.check() == before
    assert b.state(J(2)) == "schedule"


# -- the live side only --------------------------------------------------------------


def test_server_clock_when_now_is_absent(live) -> None:
    q = live.conn.queue("clock")
    r = live.redis

    def server_ms() -> int:
        sec, usec = r.time()
        return sec * 1000 + usec // 1000

    lo = server_ms()
    assert q.schedule(J(1), b"", delay_ms=1000) == "scheduled"
    assert q.enqueue(J(2), b"") == "enqueued"
    assert q.claim(5000).id == J(2)
    hi = server_ms()
    snap = q.snapshot()
    assert lo + 1000 <= snap.score("schedule", J(1)) <= hi + 1000
    assert lo + 5000 <= snap.score("active", J(2)) <= hi + 5000
    assert q.promote() == 0 and q.reap() == 0  # nothing is due yet on the server clock
    assert q.extend(J(2), 1, 1) == "ok"
    assert q.retry(J(2), 1, delay_ms=0, max_attempts=5, error="") == "scheduled"
    assert q.promote() == 1


def test_script_flush_is_recovered_unnoticed(live) -> None:
    q = live.queue("flush")
    r = q.redis
    q.enqueue(J(1), b"x")
    r.script_flush()
    assert q.claim(10, now=T0) == Claimed(J(1), b"x", 1)  # NOSCRIPT, loaded, run once
    r.script_flush()
    q.check()
    r.script_flush()
    assert q.counts() == {"pending": 0, "active": 1, "schedule": 0, "dead": 0}
    assert q.complete(J(1), 1) == "ok"
    assert r.script_exists(live.conn.scripts["complete"].sha) == [True]


def test_script_flush_inside_a_pipeline(live) -> None:
    q = live.conn.queue("pipe")
    model = live.queue("pipe")  # a twin of the same queue for the final comparison
    batch = q.pipeline()
    batch.enqueue(J(1), b"1").enqueue(J(2), b"2").claim(10, now=T0).complete(J(1), 1)
    live.redis.script_flush()
    assert batch.execute() == ["enqueued", "enqueued", Claimed(J(1), b"1", 1), "ok"]
    for call in (lambda m: m.enqueue(J(1), b"1"), lambda m: m.enqueue(J(2), b"2"),
                 lambda m: m.claim(10, now=T0), lambda m: m.complete(J(1), 1)):
        call(model.model)
    model.check()
    live.redis.script_flush()
    batch.claim(10, now=T0).complete(J(2), 7).enqueue(J(3), b"3")
    out = batch.execute(raise_on_error=False)
    assert out[0] == Claimed(J(2), b"2", 1) and isinstance(out[1], errors.StaleError) and out[2] == "enqueued"
    live.redis.script_flush()
    with pytest.raises(errors.StaleError):
        batch.complete(J(2), 7).execute()
    with pytest.raises(errors.KindError):
        batch.complete("nope", 1)  # checked when queued: nothing is sent


def test_fence(live) -> None:
    r = live.redis
    assert r.get(keyspace.VERSION_KEY) == spec.WIRE_VERSION.encode()
    r.delete(keyspace.VERSION_KEY)
    reconnect = live.connect
    reconnect().close()  # absent: claimed and written
    assert r.get(keyspace.VERSION_KEY) == spec.WIRE_VERSION.encode()
    reconnect().close()  # ours: fine
    r.set(keyspace.VERSION_KEY, "2")
    with pytest.raises(errors.VersionError):
        reconnect()
    assert r.get(keyspace.VERSION_KEY) == b"2"


def test_each_fakeredis_connect_is_isolated() -> None:
    a, b = emq_live.connect(), emq_live.connect()
    a.queue("q").enqueue(J(1), b"")
    assert b.queue("q").state(J(1)) == "absent"
    c = emq_live.connect(server=a.redis.connection_pool.connection_kwargs["server"])
    assert c.queue("q").state(J(1)) == "pending"


def test_urls(valkey, tmp_path) -> None:
    flush_url(valkey)
    for url in (f"valkey://127.0.0.1:{valkey.port}/{DB}", f"redis://127.0.0.1:{valkey.port}/{DB}"):
        with emq_live.connect(url) as conn:
            assert conn.queue("u").enqueue(J(1), b"") in ("enqueued", "duplicate")
    sock = tmp_path / "v.sock"
    with ServerProcess(config={"unixsocket": str(sock), "unixsocketperm": "700"}):
        with emq_live.connect(f"unix://{sock}") as conn:
            assert conn.queue("u").enqueue(J(1), b"") == "enqueued"
            assert conn.redis.get(keyspace.VERSION_KEY) == b"1"
    with pytest.raises(ValueError):
        emq_live.connect("redis://127.0.0.1:1", server=object())


def test_queue_names_are_gated(live) -> None:
    for name in ("", "a}b", "a{b", "a b", "a\tb", "x" * 129, "é" * 65, "\x00", "a\x7fb", "\u2028", 5, None):
        with pytest.raises(errors.ArgError):
            live.conn.queue(name)


def test_refused_calls_send_nothing(valkey) -> None:
    conn = emq_live.connect(flush_url(valkey))
    q = conn.queue("gate")
    mon = Monitor(f"{valkey.url}/{DB}", conn.redis)
    try:
        calls = [
            lambda: conn.queue("bad}name"),
            lambda: conn.queue("bad name"),
            lambda: q.enqueue("JOBzzzzzzzzzzz", b""),
            lambda: q.enqueue("ORD00000000001", b""),
            lambda: q.enqueue(J(1), 3),
            lambda: q.schedule(J(1), b"", now=0),
            lambda: q.schedule(J(1), b"", run_at=-1),
            lambda: q.claim(0),
            lambda: q.claim(1, now=MS_MAX + 1),
            lambda: q.claim(True),
            lambda: q.claim(1.0),
            lambda: q.complete(J(1), 0),
            lambda: q.retry(J(1), 1, delay_ms=0, max_attempts=1, error="x" * 4097),
            lambda: q.extend("JOB", 1, 1),
            lambda: q.promote(limit=10001),
            lambda: q.reap(max_attempts=0),
            lambda: q.reprocess(J(1)[:-1]),
            lambda: q.remove(J(1) + "\n"),
            lambda: q.browse(0),
            lambda: q.state(""),
            lambda: q.job(None),
            lambda: q.pipeline().claim(-1),
        ]
        for call in calls:
            with pytest.raises(errors.EmqError):
                call()
            assert mon.lines() == [], call
        q.counts()
        assert [args[0] for who, args in mon.lines() if who != "lua"] == [b"EVALSHA"]  # the monitor works
    finally:
        mon.close()
        conn.close()


def test_scripts_touch_only_their_queue_slot(valkey) -> None:
    """MONITOR captures every command the scripts run: each key (COMMAND GETKEYS) lies
    under the calling queue's prefix, in the slot of its KEYS[1]."""
    url = flush_url(valkey)
    conn = emq_live.connect(url)
    mon = Monitor(url, conn.redis)
    try:
        be = Backend("valkey", conn)
        other = be.queue("other")
        other.enqueue(J(1), b"")
        for name in ("slots", "a*b?[c]", "é"):
            tour(be.queue(name))
        lines = mon.lines()
    finally:
        mon.close()
    scripts = 0
    current: bytes | None = None
    r = conn.redis
    checked = 0
    for who, args in lines:
        if who != "lua":
            current = args[3] if args[0] == b"EVALSHA" else None
            scripts += current is not None
            continue
        assert current is not None, f"a script command outside a script: {args}"
        prefix = current[: -len(b"pending")]
        cmd = args[0].upper()
        if cmd in (b"TIME", b"SCAN"):
            continue
        keys = r.command_getkeys(*args)
        assert keys, args
        for key in keys:
            key = key if isinstance(key, bytes) else key.encode()
            assert key.startswith(prefix), (key, prefix)
            assert keyspace.slot(key) == keyspace.slot(current)
            checked += 1
    assert scripts > 100 and checked > 300
    conn.close()


def test_script_directory(tmp_path, live) -> None:
    own = Path(emq_live.__file__).parent / "lua"
    port = tmp_path / "port"
    shutil.copytree(own, port)
    with live.connect(scripts=port) as conn:
        assert conn.queue("p").enqueue(J(1), b"") == "enqueued"
    (port / "claim.lua").unlink()
    with pytest.raises(FileNotFoundError):
        emq_live.connect(scripts=port)
    with pytest.raises(FileNotFoundError):
        emq_live.connect(scripts=tmp_path / "nowhere")
    bare = tmp_path / "bare"
    bare.mkdir()
    for op in spec.TRANSITIONS:
        (bare / f"{op}.lua").write_text(f"return 'bare {op}'\n")
    with emq_live.connect(scripts=bare) as conn:
        assert conn.queue("p").enqueue(J(1), b"") == "bare enqueue"  # no lib.lua: not prepended
        assert conn.queue("p").counts() == dict.fromkeys(spec.LOCATIONS, 0)  # our read scripts


def test_prelude_is_generated_from_the_table() -> None:
    import lupa.lua51 as lua

    emq = lua.LuaRuntime(encoding=None).execute(prelude() + "\nreturn emq")
    assert emq[b"wire_version"] == spec.WIRE_VERSION.encode()
    for name, value in spec.LIMITS.items():
        assert emq[b"limits"][name.encode()] == str(value).encode()
    assert emq[b"body_max"] == encode("JOB", MAX_VALUE)[3:].encode()
    for op, d in spec.OPS.items():
        argv = emq[b"ops"][op.encode()][b"argv"]
        assert [argv[i + 1][b"name"].decode() for i in range(len(d["argv"]))] == [a["name"] for a in d["argv"]]
    assert ScriptSet()["claim"].source.startswith(prelude("claim"))


def test_a_server_restart_is_recovered_unnoticed() -> None:
    """A restart empties the script cache; the next call meets NOSCRIPT (after redis-py
    reconnects) and goes through, every script loaded again, not only its own (ALO-2)."""
    with ServerProcess(persistence=True) as server:
        conn = emq_live.connect(server.url)
        q = conn.queue("restart")
        assert q.enqueue(J(1), b"kept") == "enqueued"
        server.restart()
        shas = [s.sha for s in conn.scripts.scripts.values()]
        assert conn.redis.script_exists(*shas) == [False] * len(shas)
        assert q.claim(10, now=T0) == Claimed(J(1), b"kept", 1)
        assert conn.redis.script_exists(*shas) == [True] * len(shas)
        conn.close()


def test_calls_are_packed_byte_for_byte_as_redis_py_packs_them() -> None:
    """``scripts.packed`` takes hiredis's packer where the values are plain, and must send
    what redis-py's own packing sends; other values go through redis-py's."""
    import redis

    from emq_live.scripts import packed

    conn = redis.Connection()
    plain = [("EVALSHA", "ab" * 20, 2, "emq:{q}:pending", "emq:{ünï}:job:JOB0KHTOWnGLuC", "", b"\x00\xff\r\n", 0, -7,
              2**63, "x" * 70_000), ("TIME",)]
    assert b"".join(packed(conn, plain)) == b"".join(conn.pack_commands(plain))
    other = [("EVALSHA", "ab" * 20, 0, 1.5, memoryview(b"m"))]
    assert packed(conn, other) == conn.pack_commands(other)
    with pytest.raises(redis.exceptions.DataError):
        packed(conn, [("EVALSHA", "ab" * 20, 0, True)])
    with pytest.raises(UnicodeEncodeError):
        packed(conn, [("EVALSHA", "\udcff")])
    latin = redis.Connection(encoding="latin-1")
    assert b"".join(packed(latin, [("EVALSHA", "é")])) == b"".join(latin.pack_commands([("EVALSHA", "é")]))

"""Faults: a server crash under ``appendfsync always``, a reply lost in
flight, and a skewed client clock. The rules are specs/lifecycle.md §9 (ALO-*); SCRIPT
FLUSH and a graceful restart are in tests/live/test_live.py.

A reply is lost honestly: ``CutProxy`` sits between the client and Valkey, forwards the
request, reads the server's reply (so the call ran) and closes the client's connection
instead of passing the reply on.
"""

from __future__ import annotations

import select
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import pytest
import redis

import emq_live
from emq_kit.server import ServerProcess
from emq_live.client import Connection
from emq_live.scripts import ScriptSet
from emq_model import errors, invariants
from emq_model.model import Claimed
from emq_model.snapshot import Snapshot
from tests.livekit import DB, J, flush_url

LOST = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)


def server_ms(r: Any) -> int:
    """The server's clock (TIME) in ms, as the scripts read it (CLK-1)."""
    sec, usec = r.time()
    return sec * 1000 + usec // 1000


# -- a crash under appendfsync always (ALO-6) --------------------------------------------


@dataclass
class Ledger:
    """What the clients were told, and the calls whose answer never came."""

    enqueued: list[str] = field(default_factory=list)  # answered "enqueued"
    completed: list[str] = field(default_factory=list)  # answered "ok"
    enqueue_in_flight: str | None = None
    complete_in_flight: str | None = None
    errors: list[BaseException] = field(default_factory=list)  # anything but a lost server


def ledger_violations(snap: Snapshot, ledger: Ledger) -> list[str]:
    """Every way ``snap`` breaks ALO-6 for the answers in ``ledger``: an acknowledged
    enqueue missing or present twice, a completed job still present, a job nobody was
    told about, or a completion counter that disagrees with the answers."""
    out: list[str] = []
    rows = snap.row_map()
    present = {m for _, m, _ in snap.members()} | set(rows)
    done = set(ledger.completed)
    unsure = {ledger.complete_in_flight} - {None}  # its complete may have run
    for job in ledger.enqueued:
        where = snap.where(job)
        if job in done:
            if where or job in rows:
                out.append(f"{job}: completed (acknowledged) but still in {where}, row {job in rows}")
        elif job in unsure:
            if where not in ([], ["active"]) or (job in rows) != bool(where):
                out.append(f"{job}: its complete was in flight, found in {where}, row {job in rows}")
        elif len(where) != 1 or job not in rows:
            out.append(f"{job}: acknowledged enqueue found in {where}, row {job in rows}")
    for job in present - set(ledger.enqueued) - {ledger.enqueue_in_flight}:
        out.append(f"{job}: present but never enqueued")
    applied = sum(1 for job in unsure if job not in present)
    if snap.completed != len(done) + applied:
        out.append(f"completed counter {snap.completed}, acknowledged {len(done)} (+{applied} in flight)")
    return out


def run_until_killed(url: str, queue: str, ledger: Ledger, enough: threading.Event, stop: threading.Event) -> list[threading.Thread]:
    """A producer and a worker (claim, complete) on their own connections, each running
    until its server goes away; ``enough`` is set once both made progress."""

    def progressed() -> None:
        if len(ledger.enqueued) >= 200 and len(ledger.completed) >= 50:
            enough.set()

    def guard(body: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                body()
            except LOST:
                pass  # the crash: the call in flight stays recorded as in flight
            except BaseException as exc:  # noqa: BLE001 - reported by the test
                ledger.errors.append(exc)
                enough.set()

        return run

    def produce() -> None:
        with emq_live.connect(url) as conn:
            q = conn.queue(queue)
            n = 0
            while not stop.is_set():
                n += 1
                ledger.enqueue_in_flight = J(n)
                assert q.enqueue(J(n), b"payload %d" % n) == "enqueued"
                ledger.enqueued.append(J(n))
                ledger.enqueue_in_flight = None
                progressed()

    def work() -> None:
        with emq_live.connect(url) as conn:
            q = conn.queue(queue)
            while not stop.is_set():
                job = q.claim(60_000)
                if job is None:
                    continue
                ledger.complete_in_flight = job.id
                assert q.complete(job.id, job.token) == "ok"
                ledger.completed.append(job.id)
                ledger.complete_in_flight = None
                progressed()

    threads = [threading.Thread(target=guard(produce)), threading.Thread(target=guard(work))]
    for t in threads:
        t.start()
    return threads


def crash_and_recover(server: ServerProcess) -> tuple[Snapshot, Ledger, dict[str, str]]:
    """Run the workload, SIGKILL the server once it made progress, restart it on its data
    dir and read the queue through a connection opened before the crash."""
    ledger, enough, stop = Ledger(), threading.Event(), threading.Event()
    survivor = emq_live.connect(server.url)  # used again after the restart (ALO-2)
    threads = run_until_killed(server.url, "crash", ledger, enough, stop)
    try:
        assert enough.wait(timeout=60), "the workload made no progress"
        assert not ledger.errors, ledger.errors
        with server.client(decode_responses=True) as r:
            config = r.config_get("appendonly") | r.config_get("appendfsync")
        server.kill()
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)
    assert not any(t.is_alive() for t in threads)
    assert not ledger.errors, ledger.errors
    server.restart()
    q = survivor.queue("crash")
    snap = q.snapshot()  # a fresh socket, and NOSCRIPT: the restart emptied the script cache
    q.enqueue(J(10**9), b"after")  # the connection works for writes too
    survivor.close()
    return snap, ledger, config


def test_sigkill_under_appendfsync_always_keeps_every_acknowledged_enqueue() -> None:
    with ServerProcess(persistence=True) as server:
        snap, ledger, config = crash_and_recover(server)
    assert config == {"appendonly": "yes", "appendfsync": "always"}
    assert len(ledger.enqueued) >= 200 and len(ledger.completed) >= 50
    assert invariants.check_invariants(snap) == []
    assert ledger_violations(snap, ledger) == []
    assert len(snap.active) <= 1  # at most the job of the worker's call in flight


def test_the_ledger_check_catches_a_server_that_loses_acknowledged_writes() -> None:
    """The control: the same crash without persistence loses what was answered, and
    ``ledger_violations`` says so (the check above is not vacuous)."""
    with ServerProcess(persistence=False) as server:
        snap, ledger, _ = crash_and_recover(server)
    lost = ledger_violations(snap, ledger)
    assert len(lost) >= len(ledger.enqueued) - len(ledger.completed)
    assert any("acknowledged enqueue found in []" in line for line in lost)


# -- a reply lost in flight (ALO-1..5) ---------------------------------------------------


class CutProxy:
    """A TCP proxy to a loopback server that can lose one reply. Once ``arm()``ed, the
    next request is forwarded, the server's reply is read (so the call ran) and dropped,
    and the client's connection is closed. ``accepted`` counts client connections."""

    def __init__(self, port: int) -> None:
        self.upstream = ("127.0.0.1", port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.accepted = 0
        self.cuts = 0
        self._armed = threading.Event()
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self, db: int = DB) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def arm(self) -> None:
        self._armed.set()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            server = socket.create_connection(self.upstream)
            for s in (client, server):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # no Nagle delay per hop
            self._sockets += [client, server]
            self.accepted += 1
            threading.Thread(target=self._pump, args=(client, server), daemon=True).start()

    def _pump(self, client: socket.socket, server: socket.socket) -> None:
        cutting = False
        with client, server:
            while True:
                ready, _, _ = select.select([client, server], [], [])
                if client in ready:
                    data = client.recv(65536)
                    if not data:
                        return
                    server.sendall(data)
                    if self._armed.is_set():
                        self._armed.clear()
                        cutting = True
                if server in ready:
                    data = server.recv(65536)
                    if not data:
                        return
                    if cutting:
                        self.cuts += 1
                        return  # the reply arrived and is dropped; both sockets close
                    client.sendall(data)

    def close(self) -> None:
        self.listener.close()
        for s in self._sockets:
            try:
                s.shutdown(socket.SHUT_RDWR)  # wakes the pump's select
            except OSError:
                pass

    def __enter__(self) -> "CutProxy":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@pytest.fixture
def proxied(valkey):
    """(a connection through a ``CutProxy``, a direct one, the proxy), on database DB."""
    direct = emq_live.connect(flush_url(valkey))
    with CutProxy(valkey.port) as proxy:
        conn = emq_live.connect(proxy.url())
        yield conn, direct, proxy
        conn.close()
    direct.close()


def test_a_lost_claim_is_not_resent_and_is_recovered_by_reap(proxied) -> None:
    conn, direct, proxy = proxied
    q, d = conn.queue("alo"), direct.queue("alo")
    d.enqueue(J(1), b"one")
    d.enqueue(J(2), b"two")
    lo = server_ms(direct.redis)
    proxy.arm()
    with pytest.raises(redis.exceptions.ConnectionError):
        q.claim(60_000)
    hi = server_ms(direct.redis)
    assert proxy.cuts == 1
    snap = d.snapshot()
    deadline = snap.score("active", J(1))
    assert lo + 60_000 <= deadline <= hi + 60_000  # ALO-4: the lost call's lease
    assert d.job(J(1))["attempts"] == b"1"
    assert snap.pending == ((J(2), 0),)  # ALO-1: not sent again
    assert q.claim(120_000) == Claimed(J(2), b"two", 1)  # ALO-2: reconnected; another job
    assert proxy.accepted == 2
    assert q.reap(now=deadline - 1) == 0
    assert q.reap(now=deadline) == 1  # ALO-4: back to pending once the lease expired
    assert d.state(J(1)) == "pending" and d.job(J(1))["attempts"] == b"1"
    assert q.claim(60_000) == Claimed(J(1), b"one", 2)  # handed out again, next token
    with pytest.raises(errors.StaleError):
        q.complete(J(1), 1)  # the lost token is dead
    assert q.complete(J(1), 2) == "ok"
    assert invariants.check_invariants(d.snapshot()) == []


def test_a_lost_claim_with_its_last_attempt_is_reaped_to_dead(proxied) -> None:
    conn, direct, proxy = proxied
    q, d = conn.queue("alo"), direct.queue("alo")
    d.enqueue(J(1), b"one")
    proxy.arm()
    with pytest.raises(redis.exceptions.ConnectionError):
        q.claim(1000, now=5000)
    assert q.reap(now=6000, max_attempts=1) == 1
    assert d.state(J(1)) == "dead" and d.job(J(1))["last_error"] == b"lease expired"
    assert d.snapshot().failed == 1


def _active(d: Any) -> None:
    d.enqueue(J(1), b"p")
    d.claim(60_000, now=1000)


def _dead(d: Any) -> None:
    _active(d)
    d.retry(J(1), 1, delay_ms=0, max_attempts=1, error="x", now=1000)


# (op, set-up on the direct connection, the call, the second call's answer, where J1 ends)
RESENDS: list[tuple[str, Callable[[Any], None], Callable[[Any], Any], Any, list[str]]] = [
    ("enqueue", lambda d: None, lambda q: q.enqueue(J(1), b"p"), "duplicate", ["pending"]),
    ("schedule", lambda d: None, lambda q: q.schedule(J(1), b"p", delay_ms=5), "duplicate", ["schedule"]),
    ("complete", _active, lambda q: q.complete(J(1), 1), "gone", []),
    ("retry", _active, lambda q: q.retry(J(1), 1, delay_ms=5, max_attempts=3, error="e", now=1000),
     errors.StaleError, ["schedule"]),
    ("extend", _active, lambda q: q.extend(J(1), 1, 500, now=2000), "ok", ["active"]),
    ("remove", lambda d: d.enqueue(J(1), b"p"), lambda q: q.remove(J(1)), "gone", []),
    ("reprocess", _dead, lambda q: q.reprocess(J(1)), errors.StateError, ["pending"]),
    ("promote", lambda d: d.schedule(J(1), b"p", run_at=5, now=0), lambda q: q.promote(now=10), 0, ["pending"]),
    ("reap", _active, lambda q: q.reap(now=61_000), 0, ["pending"]),
]


@pytest.mark.parametrize("op, setup, call, again, where", RESENDS, ids=[r[0] for r in RESENDS])
def test_a_call_sent_again_after_a_lost_reply_has_its_effect_once(proxied, op, setup, call, again, where) -> None:
    """ALO-3: the first call ran (its reply was lost); the second one says so."""
    conn, direct, proxy = proxied
    q, d = conn.queue("alo"), direct.queue("alo")
    setup(d)
    before = d.snapshot()
    proxy.arm()
    with pytest.raises(redis.exceptions.ConnectionError):
        call(q)
    assert proxy.cuts == 1
    assert d.snapshot() != before, "the lost call did not run"
    after_first = d.snapshot()
    if isinstance(again, type):
        with pytest.raises(again):
            call(q)
    else:
        assert call(q) == again
    snap = d.snapshot()
    assert snap == after_first  # the second call changed nothing
    assert snap.where(J(1)) == where
    assert snap.completed == (1 if op == "complete" else 0)
    assert invariants.check_invariants(snap) == []


def test_redis_py_default_retries_would_resend_a_lost_claim(valkey) -> None:
    """Why ALO-1 turns redis-py's retries off: with the defaults of ``redis.Redis(...)``
    (``from_url`` happens to have none, ``RedisCluster`` has them too), the lost claim is
    sent again on a new connection and silently takes a second job."""
    direct = emq_live.connect(flush_url(valkey))
    d = direct.queue("alo")
    d.enqueue(J(1), b"one")
    d.enqueue(J(2), b"two")
    with CutProxy(valkey.port) as proxy:
        client = redis.Redis(host="127.0.0.1", port=proxy.port, db=DB, protocol=2)  # the default Retry
        conn = Connection(client, ScriptSet())
        conn.scripts.load(client)  # connected: the next request is the claim
        proxy.arm()
        assert conn.queue("alo").claim(60_000) == Claimed(J(2), b"two", 1)  # the resend
        assert proxy.cuts == 1
        client.close()
    assert d.counts() == {"pending": 0, "active": 2, "schedule": 0, "dead": 0}  # J1 held by nobody
    direct.close()


# -- a skewed client clock (ALO-7) -------------------------------------------------------


@pytest.mark.parametrize("skew_s", [-60, 60])
def test_a_skewed_client_clock_changes_no_score(valkey, monkeypatch, skew_s: int) -> None:
    conn = emq_live.connect(flush_url(valkey))
    q, r = conn.queue("skew"), conn.redis
    real_time, real_ns = time.time, time.time_ns
    monkeypatch.setattr(time, "time", lambda: real_time() + skew_s)
    monkeypatch.setattr(time, "time_ns", lambda: real_ns() + skew_s * 10**9)
    assert abs(time.time() * 1000 - server_ms(r) - skew_s * 1000) < 5000  # the client's clock is off

    def window(call: Callable[[], Any]) -> tuple[int, int]:
        lo = server_ms(r)
        call()
        return lo, server_ms(r)

    lo_s, hi_s = window(lambda: q.schedule(J(1), b"", delay_ms=30_000))
    q.enqueue(J(2), b"")
    lo_c, hi_c = window(lambda: q.claim(30_000))
    claimed = q.snapshot().score("active", J(2))
    lo_e, hi_e = window(lambda: q.extend(J(2), 1, 45_000))
    extended = q.snapshot().score("active", J(2))
    q.enqueue(J(3), b"")
    q.claim(30_000)
    lo_r, hi_r = window(lambda: q.retry(J(3), 1, delay_ms=20_000, max_attempts=5, error=""))
    snap = q.snapshot()
    assert lo_s + 30_000 <= snap.score("schedule", J(1)) <= hi_s + 30_000
    assert lo_c + 30_000 <= claimed <= hi_c + 30_000
    assert lo_e + 45_000 <= extended <= hi_e + 45_000
    assert lo_r + 20_000 <= snap.score("schedule", J(3)) <= hi_r + 20_000
    # nothing is due on the server's clock, whatever the client's clock says
    assert q.promote() == 0 and q.reap() == 0
    q.schedule(J(4), b"", delay_ms=0)
    assert q.promote() == 1  # due on the server's clock
    assert q.state(J(4)) == "pending"
    conn.close()

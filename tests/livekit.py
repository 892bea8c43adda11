"""Harness of the live tests (tests/live/); its fixtures ``backend`` and ``live`` are in
tests/live/conftest.py, the rest is imported by name.

- Backends: ``model`` (QueueModel alone), ``fakeredis`` (in-process, a fresh server per
  test), ``valkey`` (the session's throwaway valkey-server, database ``DB`` flushed per
  test) and ``redis`` (Debian's redis-server 7.0, likewise: a second real server).
- ``Twin``: one queue driven on the model and on a live backend in lockstep. Every call
  is made on both; answers (or refusal codes) must be equal, ``last_dropped`` too; after
  an answer the live snapshot must equal the model's (and show the same invariant
  violations); after a refusal every key of the server (DUMP + PTTL) must be unchanged.
  It also records the (op, outcome) cells of transitions.json that its calls reached.
- ``dump``: every key of the live database, byte for byte.
- ``Monitor``: MONITOR on Valkey, read up to a sentinel (no sleeps).
"""

from __future__ import annotations

import functools
import itertools
import re
from typing import Any, Callable, Iterator

import pytest
import redis

import emq_live
from emq_kit.check.coverage import classify
from emq_kit.check.step import outcome
from emq_model import errors, invariants, keyspace, spec
from emq_model.branded_id import JOB, encode
from emq_model.model import QueueModel
from emq_model.snapshot import Snapshot, diff

DB = 9
"""The Valkey database the live tests use (flushed before each test)."""

LIVE = ("fakeredis", "valkey", "redis")
BACKENDS = ("model",) + LIVE
OPS = tuple(spec.OPS) + tuple(spec.BATCHES)


def edited_scripts(into: Any, script: str, old: str, new: str) -> str:
    """A copy of our scripts in ``into`` whose ``<script>.lua`` has its one ``old`` replaced
    by ``new``: a hand-broken variant."""
    from emq_kit.selftest.mutation import copy_scripts

    def edit(text: str) -> str:
        assert text.count(old) == 1
        return text.replace(old, new)

    return str(copy_scripts(into, script, edit))


def J(n: int) -> str:
    """The JOB id of snowflake ``n``."""
    return encode(JOB, n)


def flush_url(server: Any) -> str:
    """A URL of the database ``DB`` of ``server``, emptied."""
    url = f"{server.url}/{DB}"
    with redis.Redis.from_url(url) as r:
        r.flushdb()
    return url


def make_backend(kind: str, request: pytest.FixtureRequest) -> "Backend":
    if kind == "model":
        return Backend(kind, None)
    if kind == "fakeredis":
        return Backend(kind, emq_live.connect())
    url = flush_url(request.getfixturevalue("valkey" if kind == "valkey" else "redis_server"))
    return Backend(kind, emq_live.connect(url), url)


class Backend:
    def __init__(self, name: str, conn: emq_live.Connection | None, url: str | None = None) -> None:
        self.name = name
        self.conn = conn
        self.url = url

    def connect(self, **kw: Any) -> emq_live.Connection:
        """Another connection to the same server (fakeredis: the same FakeServer)."""
        if self.url is not None:
            return emq_live.connect(self.url, **kw)
        return emq_live.connect(server=self.redis.connection_pool.connection_kwargs["server"], **kw)

    @property
    def redis(self) -> Any:
        assert self.conn is not None
        return self.conn.redis

    def queue(self, name: str = "q") -> "Twin":
        return Twin(self, name)


_fresh = itertools.count()


def fresh(live: "Backend", prefix: str) -> tuple[str, QueueModel, Any]:
    """A queue of a name not used before, on the model and on ``live``: one per example of
    a property whose server is the test's."""
    name = f"{prefix}{next(_fresh)}"
    return name, QueueModel(name), live.conn.queue(name)


def forget_row(live: "Backend", model: QueueModel, queue: str, job_id: str) -> None:
    """The operator's fault on both sides: the row of ``job_id`` deleted by hand, its
    member left an orphan."""
    model.forget_row(job_id)
    live.redis.delete(keyspace.job_key(queue, job_id))


def lockstep(live: "Backend", prefix: str, program: list[tuple], call: Callable[[Any, tuple], Any],
             dropping: tuple[str, ...]) -> Iterator[tuple[tuple, Snapshot, set[str]]]:
    """Run ``program`` on a fresh queue of ``live`` and on its model, step by step:
    ``call(side, step)`` answers equal (``last_dropped`` too after the ops in
    ``dropping``), then the snapshots equal; yields each step, the live snapshot and the
    ids whose rows were deleted by hand so far (a ``("forget_row", id)`` step)."""
    name, model, queue = fresh(live, prefix)
    forgotten: set[str] = set()
    for step in program:
        if step[0] == "forget_row":
            forget_row(live, model, name, step[1])
            forgotten.add(step[1])
        else:
            assert call(queue, step) == call(model, step), step
            if step[0] in dropping:
                assert queue.last_dropped == model.last_dropped
        snap = queue.snapshot()
        assert snap == model.snapshot(), step
        yield step, snap, forgotten


def dump(r: Any) -> dict[bytes, tuple[bytes, int]]:
    """Every key of the database: its DUMP and its PTTL."""
    return {key: (r.dump(key), r.pttl(key)) for key in r.scan_iter(count=1000)}


class Twin:
    """One queue on the model and (unless the backend is the model) on a live server."""

    def __init__(self, backend: Backend, name: str) -> None:
        self.backend = backend
        self.name = name
        self.model = QueueModel(name)
        self.live = backend.conn.queue(name) if backend.conn is not None else None
        self.cells: set[tuple[str, str]] = set()

    @property
    def redis(self) -> Any:
        return self.backend.redis

    @property
    def last_dropped(self) -> tuple[str, ...]:
        return self.model.last_dropped

    def __getattr__(self, op: str) -> Callable[..., Any]:
        if op not in OPS:
            raise AttributeError(op)
        return functools.partial(self.call, op)

    def call(self, op: str, *args: Any, **kw: Any) -> Any:
        before = self.model.snapshot()
        keys_before = dump(self.redis) if self.live is not None else None
        want = outcome(lambda: getattr(self.model, op)(*args, **kw))
        if self.live is not None:
            got = outcome(lambda: getattr(self.live, op)(*args, **kw))
            if isinstance(want, errors.EmqError) or isinstance(got, errors.EmqError):
                assert got == want, f"{op}{args}{kw}: live {got!r}, model {want!r}"
                assert dump(self.redis) == keys_before, f"refused {op} changed the keyspace"
            else:
                assert got == want, f"{op}{args}{kw}: live {got!r}, model {want!r}"
                if op in ("claim", "claim_many"):
                    assert self.live.last_dropped == self.model.last_dropped
                self.check()
        if isinstance(want, errors.EmqError):
            assert self.model.snapshot() == before, f"refused {op} changed the model"
            self.cells.add((op, want.code))
            raise want
        self._record(op, args, before, want)
        return want

    def check(self) -> Snapshot:
        """The live snapshot equals the model's, with the same invariant violations."""
        expected = self.model.snapshot()
        if self.live is None:
            return expected
        seen = self.live.snapshot()
        assert seen == expected, "\n".join(diff(expected, seen)) + f"\nseen:\n{seen}\nexpected:\n{expected}"
        assert invariants.check_invariants(seen) == invariants.check_invariants(expected)
        return seen

    def forget_row(self, job_id: str) -> None:
        """Delete a row by hand (an operator's mistake), on both sides."""
        self.model.forget_row(job_id)
        if self.live is not None:
            self.redis.delete(keyspace.job_key(self.name, job_id))
        self.check()

    def spoil(self, name: str, id: str | None = None) -> None:
        """Overwrite a key with a string by hand (CC-8's fault), on both sides; ``mend``
        puts its content back."""
        self.model.spoil(name, id)
        if self.live is not None:
            key = keyspace.key_of(self.name, name, id)
            self._held = self.redis.dump(key)
            self.redis.delete(key)
            self.redis.set(key, "x")
        self.check()

    def mend(self, name: str, id: str | None = None) -> None:
        self.model.mend(name, id)
        if self.live is not None:
            key = keyspace.key_of(self.name, name, id)
            self.redis.delete(key)
            if self._held is not None:
                self.redis.restore(key, 0, self._held)
        self.check()

    def _record(self, op: str, args: tuple, before: Snapshot, answer: Any) -> None:
        """The cells of a transition's answer, named as ``emq check`` names them."""
        if op not in spec.TRANSITIONS:
            return
        after = self.model.snapshot()
        was = "pending" if op == "complete" and before.where(args[0]) == ["pending"] else None
        for name in classify(op, answer, was=was, dropped=op == "claim" and bool(self.model.last_dropped),
                             dead_before=before.failed, dead_after=after.failed):
            self.cells.add((op, name))


_ARG = re.compile(rb'"((?:[^"\\]|\\.)*)"')
_ESC = {b"n": b"\n", b"r": b"\r", b"t": b"\t", b"a": b"\a", b"b": b"\b", b'"': b'"', b"\\": b"\\"}


def _unrepr(text: bytes) -> bytes:
    """The bytes behind one of MONITOR's quoted arguments (sdscatrepr)."""
    out, i = bytearray(), 0
    while i < len(text):
        c = text[i : i + 1]
        if c == b"\\":
            n = text[i + 1 : i + 2]
            if n == b"x":
                out.append(int(text[i + 2 : i + 4], 16))
                i += 4
                continue
            out += _ESC[n]
            i += 2
            continue
        out += c
        i += 1
    return bytes(out)


class Monitor:
    """MONITOR on a Valkey URL. ``lines()`` returns ``(client, args)`` for every command
    the server ran since the last call, ``client`` being ``"lua"`` for a script's
    commands; it reads up to a sentinel ECHO sent on ``client``, so it needs no sleep."""

    _count = 0

    def __init__(self, url: str, client: Any) -> None:
        self.client = client
        self._redis = redis.Redis.from_url(url)
        self._conn = self._redis.connection_pool.get_connection()
        self._conn.send_command("MONITOR")
        assert self._conn.read_response() in (b"OK", "OK")
        self.lines()  # whatever the client sent before

    def lines(self) -> list[tuple[str, list[bytes]]]:
        Monitor._count += 1
        sentinel = f"emq-monitor-sentinel-{Monitor._count}".encode()
        self.client.echo(sentinel)
        out = []
        while True:
            line = self._conn.read_response()
            head, _, rest = line.partition(b"] ")
            args = [_unrepr(m.group(1)) for m in _ARG.finditer(rest)]
            if args == [b"ECHO", sentinel]:
                return out
            who = head.rsplit(b" ", 1)[-1].decode()
            out.append(("lua" if who == "lua" else who, args))

    def close(self) -> None:
        self._conn.disconnect()
        self._redis.close()

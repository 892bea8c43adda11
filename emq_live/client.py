"""The live client: a ``Queue`` over redis-py with exactly the model's methods and
answers (``emq_model.model.QueueModel``), running the scripts of ``emq_live/lua``.

Targets (``connect(url)``):
- no URL: an in-process fakeredis server (Lua 5.1 through lupa), a fresh isolated one
  for every ``connect()`` unless a ``fakeredis.FakeServer`` is passed as ``server``;
  its runtime compiles each script once (``emq_live.embedded``);
- ``redis://``, ``rediss://``, ``unix://``, and ``valkey://`` / ``valkeys://`` (read as
  ``redis://`` / ``rediss://``): redis-py.
- ``redis+cluster://host:port`` (also ``rediss+cluster``, ``valkey+cluster``,
  ``valkeys+cluster``): a Valkey Cluster through ``redis.cluster.RedisCluster``, seeded
  with that node. Cluster mode is chosen by the scheme, never guessed. Every script is
  loaded on every primary; a call runs on the primary of its queue's slot (all keys of a
  queue share the hash tag ``{q}``), and a ``NOSCRIPT`` from one node reloads it there.

A call whose connection drops is not sent again by the client (redis-py's retries are
off): the script may have run, so a blind resend could repeat a claim or turn one's own
enqueue into ``duplicate``. The call raises ``redis.exceptions.ConnectionError`` (or
``TimeoutError``); the next call reconnects. What the caller may assume then is
specs/lifecycle.md §9 (ALO-*).

The connection speaks RESP2 (``protocol=2``) on every target: fakeredis and Valkey hand
back the same values under it (scripts reply with integers, bulk strings and arrays only,
CC-4), and script errors arrive as plain error replies.

Arguments are checked in Python before any I/O, with the same code the model uses
(``emq_model.spec.check_args``, ``check_now``, ``emq_model.keyspace``): a refused call
sends nothing. The scripts check everything again for callers that reach them directly.
"""

from __future__ import annotations

import dataclasses
import logging
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import redis
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.exceptions import RedisClusterException
from redis.retry import Retry

from emq_model import errors, keyspace, spec
from emq_model.lanes import LaneClaimed
from emq_model.model import Claimed
from emq_model.snapshot import LANE_HASHES, Row, Snapshot, canonical_int, lanes_of, norm_score, small_of, zset_order

from . import embedded, urls
from .scripts import ScriptSet
from .urls import CLUSTER_SCHEMES, ConnectError, UrlError  # noqa: F401  (CLUSTER_SCHEMES: the kit's)

log = logging.getLogger("emq_live")

PROTOCOL = 2
"""The RESP version of every connection (see the module docstring)."""


def _client(url: str, options: Mapping[str, Any] | None = None) -> Any:
    """A redis-py client for ``url``: ``RedisCluster`` for a cluster scheme, with
    redis-py's ``options`` (``socket_timeout``) on every connection. Either way a call is
    never resent after a connection error (``Retry(NoBackoff(), 0)``). ``url`` is read
    by ``urls.check_url`` first: one it refuses is its ``UrlError``, nothing connected."""
    no_resend = Retry(NoBackoff(), 0)
    target, cluster = urls.plain(urls.check_url(url))
    try:
        if cluster:
            return RedisCluster.from_url(target, protocol=PROTOCOL, retry=no_resend, **(options or {}))
        return redis.Redis.from_url(target, protocol=PROTOCOL, retry=no_resend, **(options or {}))
    except ValueError as exc:  # redis-py's word for a URL it cannot read
        raise UrlError(f"{urls.redact(url)}: {urls.redact(str(exc))}") from None


def handshake(url: str, client: Any) -> None:
    """Open one of ``client``'s connections now (a cluster client opened its own when it
    was made), so that what the server answers its handshake — the ``SELECT`` of a
    database it does not have (``/99``) — is a ``ConnectError`` naming the redacted URL
    and the refusal, never the error of the first command sent."""
    pool = getattr(client, "connection_pool", None)
    if pool is None:
        return
    try:
        pool.release(pool.get_connection())
    except redis.ResponseError as exc:
        client.close()
        raise ConnectError(f"{urls.redact(url)}: the server refused the connection: {urls.redact(str(exc))}") from None


def _reached(url: str, client: Any, conn: "Connection", fence: bool) -> None:
    """The first round trip (the fence, or a PING): a server that is not there, is not a
    Redis/Valkey server, or refuses us is a ``ConnectError`` naming the redacted URL."""
    try:
        conn.fence() if fence else client.ping()
    except (redis.RedisError, RedisClusterException) as exc:
        client.close()
        raise _unreachable(url, exc) from None


def _unreachable(url: str, exc: BaseException) -> ConnectError:
    """The one-line ``ConnectError`` for redis-py's ``exc`` while reaching ``url``."""
    reason = " ".join(str(exc).split()) or type(exc).__name__
    return ConnectError(f"cannot open a queue connection to {urls.redact(url)}: {urls.redact(reason)}")


def connect(
    url: str | None = None,
    *,
    scripts: str | Path | None = None,
    server: Any = None,
    fence: bool = True,
    options: Mapping[str, Any] | None = None,
) -> "Connection":
    """A connection to ``url`` (fakeredis when ``None``), fenced (KS-6) and with the
    scripts loaded. ``scripts`` names another script directory (a port's scripts with
    the same calling convention); ``options``, redis-py's for a server's connections
    (``socket_timeout``: set before the first one is made, which the fence uses). A ``url`` that is not a ``str`` of a served scheme is a
    ``UrlError``; a server that cannot be reached, is not a Redis/Valkey server, or is
    not a cluster node under a ``+cluster`` scheme is a ``ConnectError`` (both one line,
    the URL's userinfo redacted)."""
    scripts_set = ScriptSet(scripts)
    if url is None:
        import fakeredis

        server = server if server is not None else fakeredis.FakeServer()
        client = fakeredis.FakeRedis(server=server, protocol=PROTOCOL)
        embedded.compile_once(client, server)
    else:
        if server is not None:
            raise ValueError("server is only for the in-process fakeredis target (url=None)")
        url = urls.check_url(url)
        try:
            client = _client(url, options)
        except (redis.RedisError, RedisClusterException) as exc:  # a cluster client connects at once
            raise _unreachable(url, exc) from None
    conn = Connection(client, scripts_set, server=server)
    if url is not None:
        _reached(url, client, conn, fence)
    elif fence:
        conn.fence()
    try:
        conn.scripts.load(client)
    except BaseException:
        client.close()
        raise
    return conn


class Connection:
    """A redis-py (or fakeredis) client plus the assembled scripts; ``server`` is the
    in-process ``FakeServer`` of the embedded target (``None`` for a real server)."""

    def __init__(self, client: Any, scripts: ScriptSet | None = None, server: Any = None) -> None:
        self.redis = client
        self.scripts = scripts if scripts is not None else ScriptSet.own()
        self.server = server

    def fence(self) -> str:
        """KS-6: read ``{emq}:version``; if absent write ours with ``SET NX`` and read it
        back; any other value than ours raises ``VersionError``."""
        key = keyspace.VERSION_KEY
        got = self.redis.get(key)
        if got is None:
            self.redis.set(key, spec.WIRE_VERSION, nx=True)
            got = self.redis.get(key)
        value = got.decode("utf-8", "replace") if isinstance(got, bytes) else str(got)
        if value != spec.WIRE_VERSION:
            raise errors.VersionError(f"{key} is {value!r}, this client speaks wire version {spec.WIRE_VERSION!r}")
        return value

    def queue(self, name: str) -> "Queue":
        """The queue ``name`` (``ArgError`` for a name KS-3 refuses)."""
        return Queue(self, name)

    def close(self) -> None:
        self.redis.close()

    def reconnect(self) -> None:
        """Drop every connection the client holds, in use or not: the next command opens
        a fresh one. After an exception raised where a command stood, one may hold a
        reply half read (a pipeline hands its connection back unread)."""
        if hasattr(self.redis, "disconnect_connection_pools"):  # a cluster's client
            self.redis.disconnect_connection_pools()
        else:
            self.redis.connection_pool.disconnect()

    def __enter__(self) -> "Connection":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextmanager
def _typed(key: str) -> Iterator[None]:
    """A single-command read (browse, job): a ``WRONGTYPE`` reply is ``EMQTYPE`` (CC-8)."""
    try:
        yield
    except redis.ResponseError as exc:
        if str(exc).startswith("WRONGTYPE"):
            raise errors.WrongTypeError(f"{key} holds another type than its grammar's") from None
        raise


def _text(value: Any) -> str:
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else str(value)


def _texts(flat: Sequence[Any]) -> list[str]:
    """Each item of ``flat`` as ``_text`` reads it, in one pass (a snapshot's members,
    ids and field names: most of what a step's snapshot reply holds)."""
    return [v.decode("utf-8", "surrogateescape") if type(v) is bytes else _text(v) for v in flat]


def _entries(flat: Sequence[Any]) -> list[tuple[str, Any]]:
    """A sorted set's reply (``{member, score, ...}``) as its entries, scores normal."""
    return list(zip(_texts(flat[0::2]), map(norm_score, flat[1::2])))


def _pairs(flat: Sequence[Any]) -> list[tuple[Any, Any]]:
    return list(zip(flat[0::2], flat[1::2]))


def _rows(flat: Sequence[Any]) -> dict[str, Row]:
    """A snapshot reply's rows (``{id, {field, value, ...}, ...}``) by id, each as the
    snapshot holds it; a row's fields are read once per distinct content in the reply
    (a deep queue's rows repeat: a whole read's cost is mostly its rows)."""
    made: dict[Any, Row] = {}
    out: dict[str, Row] = {}
    for i, fields in _pairs(flat):
        try:
            seen: Any = tuple(fields)
            row = made.get(seen)
        except TypeError:  # a value no key can be made of (a reply of another shape): read it as it is
            seen, row = None, None
        if row is None:
            row = tuple(sorted(dict(zip(_texts(fields[0::2]), map(bytes, fields[1::2]))).items()))
            if seen is not None:
                made[seen] = row
        out[_text(i)] = row
    return out


class _Call:
    """One checked call: the script, its KEYS and ARGV, and how to read its reply."""

    __slots__ = ("name", "keys", "args", "answer")

    def __init__(self, name: str, keys: list[str], args: list[Any], answer: Callable[[Any], Any]) -> None:
        self.name, self.keys, self.args, self.answer = name, keys, args, answer

    def read(self, reply: Any) -> Any:
        """The op's answer in ``reply``; a reply of another shape is a ``BadReply`` (the
        server's or the scripts' fault, not the client's)."""
        try:
            return self.answer(reply)
        except errors.EmqError:
            raise
        except Exception as exc:  # noqa: BLE001 - whatever the shape broke in reading it
            raise BadReply(f"{self.name}: cannot read the reply {reply!r:.200}: {type(exc).__name__}: {exc}") from exc


class BadReply(ValueError):
    """A script's reply that is not the shape of its op's answer: what a wrong script or
    server sends, as opposed to an exception in the client's own code."""


class Queue:
    """One queue: the model's methods, keyword-only arguments and answers, on a server."""

    def __init__(self, conn: Connection, name: str) -> None:
        self.name = keyspace.check_queue(name)
        self.conn = conn
        self.keys = keyspace.queue_keys(name)
        self.last_dropped: tuple[str, ...] = ()
        self.last_read: tuple[Any, Snapshot] | None = None  # the last snapshot reply read, and its snapshot

    def __repr__(self) -> str:
        return f"Queue({self.name!r})"

    # -- building calls (all checks happen here, before any I/O) ---------------------

    def _clock(self, now: Any) -> list[Any]:
        return [] if now is None else [spec.check_now(now)]

    def _id_keys(self, job_id: str) -> list[str]:
        return self.keys + [keyspace.job_key(self.name, job_id)]

    def _text_answer(self, reply: Any) -> str:
        return _text(reply)

    def _claim_answer(self, reply: Any) -> Claimed | None:
        return self._job_answer(reply, Claimed)

    def _job_answer(self, reply: Any, kind: type[Claimed] | type[LaneClaimed]) -> Any:
        """``{"job", id, payload, token[, group], dropped...}`` as ``kind`` (``Claimed``
        or ``LaneClaimed``), or ``{"empty", dropped...}`` as ``None``; records the
        dropped orphans."""
        tag, width = _text(reply[0]), len(kind._fields)
        if tag == "job":
            job_id, payload, token, *rest = reply[1 : 1 + width]
            answer = kind(_text(job_id), bytes(payload), int(token), *map(_text, rest))
            dropped = reply[1 + width :]
        elif tag == "empty":
            dropped, answer = list(reply[1:]), None
        else:
            raise ValueError(f"claim: unexpected reply {reply!r}")
        self._dropped(dropped)
        return answer

    def _claim_many_answer(self, reply: Any) -> list[Claimed]:
        flat, dropped = reply
        self._dropped(dropped)
        return [Claimed(_text(i), bytes(p), int(t)) for i, p, t in zip(flat[0::3], flat[1::3], flat[2::3])]

    def _dropped(self, dropped: Sequence[Any]) -> None:
        """T-claim-5: record (and log) the orphans a claim dropped."""
        self.last_dropped = tuple(_text(d) for d in dropped)
        if self.last_dropped:
            log.warning(
                "claim on queue %r dropped %d orphan member(s) without a row: %s",
                self.name,
                len(self.last_dropped),
                ", ".join(self.last_dropped),
            )

    def _items_answer(self, reply: Any) -> list[Any]:
        """A batch's answers per item: a refused item's text becomes its ``EmqError``."""
        return [errors.parse_reply(t) or t for t in map(_text, reply)]

    def _call(self, op: str, a: dict[str, Any], answer: Callable[[Any], Any], now: Any = None) -> _Call:
        """The call of ``op`` (an op or a batch without items) from its checked arguments
        ``a``: KEYS the six fixed keys, plus the row of ``a["id"]`` for an op with a row key;
        ARGV ``wire(op, a)``, then, for an op that reads a clock, ``_clock(now)``."""
        entry = spec.entry(op)
        keys = self._id_keys(a["id"]) if entry.get("row_key") else list(self.keys)
        return _Call(op, keys, wire(op, a) + (self._clock(now) if entry["clock"] else []), answer)

    def _items(self, op: str, items: Any) -> _Call:
        """A batch with items (B-1): every item checked here, ARGV the items' argv flat."""
        of = spec.BATCHES[op]["of"]
        args = [v for item in spec.check_items(op, items) for v in wire(of, item)]
        return _Call(op, list(self.keys), args, self._items_answer)

    def _enqueue(self, id: str, payload: Any) -> _Call:
        return self._call("enqueue", spec.check_args("enqueue", {"id": id, "payload": payload}), self._text_answer)

    def _schedule(self, id: str, payload: Any, run_at: Any, delay_ms: Any, now: Any) -> _Call:
        a = spec.check_args("schedule", {"id": id, "payload": payload, "run_at": run_at, "delay_ms": delay_ms})
        if (a["run_at"] is None) == (a["delay_ms"] is None):
            raise errors.ArgError("schedule takes exactly one of run_at and delay_ms")
        mode, value = ("at", a["run_at"]) if a["run_at"] is not None else ("in", a["delay_ms"])
        return self._call("schedule", {**a, "mode": mode, "value": value}, self._text_answer, now)

    def _claim(self, lease_ms: Any, now: Any) -> _Call:
        return self._call("claim", spec.check_args("claim", {"lease_ms": lease_ms}), self._claim_answer, now)

    def _complete(self, id: str, token: Any) -> _Call:
        return self._call("complete", spec.check_args("complete", {"id": id, "token": token}), self._text_answer)

    def _retry(self, id: str, token: Any, delay_ms: Any, max_attempts: Any, error: Any, now: Any) -> _Call:
        a = spec.check_args(
            "retry", {"id": id, "token": token, "delay_ms": delay_ms, "max_attempts": max_attempts, "error": error}
        )
        return self._call("retry", a, self._text_answer, now)

    def _extend(self, id: str, token: Any, lease_ms: Any, now: Any) -> _Call:
        a = spec.check_args("extend", {"id": id, "token": token, "lease_ms": lease_ms})
        return self._call("extend", a, self._text_answer, now)

    def _promote(self, limit: Any, now: Any) -> _Call:
        return self._call("promote", spec.check_args("promote", {"limit": limit}), int, now)

    def _reap(self, limit: Any, max_attempts: Any, now: Any) -> _Call:
        return self._call("reap", spec.check_args("reap", {"limit": limit, "max_attempts": max_attempts}), int, now)

    def _reprocess(self, id: str) -> _Call:
        return self._call("reprocess", spec.check_args("reprocess", {"id": id}), self._text_answer)

    def _remove(self, id: str) -> _Call:
        return self._call("remove", spec.check_args("remove", {"id": id}), self._text_answer)

    def _claim_many(self, n: Any, lease_ms: Any, now: Any) -> _Call:
        a = spec.check_args("claim_many", {"n": n, "lease_ms": lease_ms})
        return self._call("claim_many", a, self._claim_many_answer, now)

    # -- lanes (lifecycle.md §10) ----------------------------------------------------

    def _lane_claim_answer(self, reply: Any) -> LaneClaimed | None:
        return self._job_answer(reply, LaneClaimed)

    def _lane_wclaim_answer(self, reply: Any) -> list[LaneClaimed]:
        flat, dropped = reply
        self._dropped(dropped)
        return [LaneClaimed(_text(flat[i]), bytes(flat[i + 1]), int(flat[i + 2]), _text(flat[i + 3]))
                for i in range(0, len(flat), 4)]

    def _lane_enqueue(self, id: str, payload: Any, group: Any) -> _Call:
        a = spec.check_args("lane_enqueue", {"id": id, "payload": payload, "group": group})
        return self._call("lane_enqueue", a, self._text_answer)

    def _lane_claim(self, op: str, lease_ms: Any, now: Any) -> _Call:
        a = spec.check_args(op, {"lease_ms": lease_ms})
        answer = self._lane_claim_answer if op == "lane_claim" else self._lane_wclaim_answer
        return self._call(op, a, answer, now)

    def _lane_config(self, op: str, values: dict[str, Any]) -> _Call:
        """lane_pause, lane_resume, lane_limit, lane_weight: the group, then the value."""
        return self._call(op, spec.check_args(op, values), self._text_answer)

    def lane_enqueue(self, id: str, payload: bytes | str, group: str) -> str:
        """T-lane_enqueue: ``"enqueued"`` (into the group's lane) or ``"duplicate"``."""
        return self._run(self._lane_enqueue(id, payload, group))

    def lane_claim(self, lease_ms: int, *, now: int | None = None) -> LaneClaimed | None:
        """T-lane_claim: ``LaneClaimed(id, payload, token, group)`` from the lane the ring
        turned to, or ``None``; sets ``last_dropped``."""
        return self._run(self._lane_claim("lane_claim", lease_ms, now))

    def lane_wclaim(self, lease_ms: int, *, now: int | None = None) -> list[LaneClaimed]:
        """T-lane_wclaim: up to the lane's weight of its heads, in lane order; sets
        ``last_dropped``."""
        return self._run(self._lane_claim("lane_wclaim", lease_ms, now))

    def lane_pause(self, group: str) -> str:
        """T-lane_pause: ``"ok"``; the lane is not served until resumed."""
        return self._run(self._lane_config("lane_pause", {"group": group}))

    def lane_resume(self, group: str) -> str:
        """T-lane_resume: ``"ok"``."""
        return self._run(self._lane_config("lane_resume", {"group": group}))

    def lane_limit(self, group: str, n: int) -> str:
        """T-lane_limit: ``"ok"``; at most ``n`` of the lane's jobs active (0: no limit)."""
        return self._run(self._lane_config("lane_limit", {"group": group, "n": n}))

    def lane_weight(self, group: str, w: int) -> str:
        """T-lane_weight: ``"ok"``; a weighted claim serves up to ``w`` heads per turn."""
        return self._run(self._lane_config("lane_weight", {"group": group, "w": w}))

    def _run(self, call: _Call) -> Any:
        reply = self.conn.scripts.run(self.conn.redis, call.name, call.keys, call.args)
        return call.read(reply)

    # -- transitions ---------------------------------------------------------------

    def enqueue(self, id: str, payload: bytes | str) -> str:
        """T-enqueue: ``"enqueued"`` or ``"duplicate"``."""
        return self._run(self._enqueue(id, payload))

    def schedule(
        self,
        id: str,
        payload: bytes | str,
        *,
        run_at: int | None = None,
        delay_ms: int | None = None,
        now: int | None = None,
    ) -> str:
        """T-schedule: ``"scheduled"`` or ``"duplicate"``."""
        return self._run(self._schedule(id, payload, run_at, delay_ms, now))

    def claim(self, lease_ms: int, *, now: int | None = None) -> Claimed | None:
        """T-claim: ``Claimed(id, payload, token)`` or ``None``; sets ``last_dropped``."""
        return self._run(self._claim(lease_ms, now))

    def complete(self, id: str, token: int) -> str:
        """T-complete: ``"ok"`` or ``"gone"``."""
        return self._run(self._complete(id, token))

    def retry(
        self,
        id: str,
        token: int,
        *,
        delay_ms: int,
        max_attempts: int,
        error: bytes | str,
        now: int | None = None,
    ) -> str:
        """T-retry: ``"scheduled"`` or ``"dead"``."""
        return self._run(self._retry(id, token, delay_ms, max_attempts, error, now))

    def extend(self, id: str, token: int, lease_ms: int, *, now: int | None = None) -> str:
        """T-extend: ``"ok"``."""
        return self._run(self._extend(id, token, lease_ms, now))

    def promote(self, *, now: int | None = None, limit: int = 100) -> int:
        """T-promote: how many scheduled jobs moved to pending."""
        return self._run(self._promote(limit, now))

    def reap(self, *, now: int | None = None, limit: int = 100, max_attempts: int | None = None) -> int:
        """T-reap: how many expired leases moved (to pending or dead)."""
        return self._run(self._reap(limit, max_attempts, now))

    def reprocess(self, id: str) -> str:
        """T-reprocess: ``"ok"``."""
        return self._run(self._reprocess(id))

    def remove(self, id: str) -> str:
        """T-remove: ``"ok"`` or ``"gone"``."""
        return self._run(self._remove(id))

    # -- batches: one script call each (lifecycle.md §6, "Batches") -------------------

    def enqueue_many(self, jobs: Iterable[tuple[str, bytes | str]]) -> list[str]:
        """B-enqueue: ``enqueue`` for each ``(id, payload)``, in order, in one script
        call; the answers in item order. A bad item refuses the whole batch."""
        return self._run(self._items("enqueue_many", jobs))

    def claim_many(self, n: int, lease_ms: int, *, now: int | None = None) -> list[Claimed]:
        """B-claim: up to ``n`` claims in one script call, stopping when pending is empty;
        ``last_dropped`` holds every orphan dropped on the way."""
        return self._run(self._claim_many(n, lease_ms, now))

    def complete_many(self, jobs: Iterable[tuple[str, int]]) -> list[str | errors.EmqError]:
        """B-complete: ``complete`` for each ``(id, token)``, in order, in one script call;
        a refused item answers its ``EmqError`` in place (it changed nothing)."""
        return self._run(self._items("complete_many", jobs))

    # -- reads -----------------------------------------------------------------------

    def browse(self, n: int) -> list[str]:
        """R-browse: the ``n`` newest pending ids, newest first."""
        a = spec.check_args("browse", {"n": n})
        with _typed(self.keys[0]):
            ids = self.conn.redis.zrange(self.keys[0], "+", "-", desc=True, bylex=True, offset=0, num=a["n"])
        return [_text(i) for i in ids]

    def counts(self) -> dict[str, int]:
        """R-counts: the cardinality of each location, read at one instant."""
        return self._run(self._call("counts", spec.check_args("counts", {}), self._counts_answer))

    def _counts_answer(self, reply: Any) -> dict[str, int]:
        return {loc: int(n) for loc, n in zip(spec.LOCATIONS, reply)}

    def state(self, id: str) -> str:
        """R-state: the location of the id, ``"unknown"`` or ``"absent"``."""
        a = spec.check_args("state", {"id": id})
        return self._run(self._call("state", a, self._text_answer))

    def job(self, id: str) -> dict[str, bytes] | None:
        """R-job: the row's fields, or ``None``."""
        a = spec.check_args("job", {"id": id})
        key = keyspace.job_key(self.name, a["id"])
        with _typed(key):
            row = self.conn.redis.hgetall(key)
        return {_text(f): bytes(v) for f, v in row.items()} or None

    def snapshot(self) -> Snapshot:
        """The queue's whole keyspace, read at one instant (snapshot.lua)."""
        return self.snapshot_answer(self.conn.scripts.run(self.conn.redis, "snapshot", self.keys, []))

    def snapshot_answer(self, reply: Any) -> Snapshot:
        """The ``Snapshot`` a snapshot.lua reply describes; a reply of another shape is a
        ``BadReply`` (a port's own snapshot.lua, or a server, that answers wrongly)."""
        try:
            return self._snapshot_of(reply)
        except Exception as exc:  # noqa: BLE001 - whatever the shape broke in reading it
            raise BadReply(f"snapshot: cannot read the reply {reply!r:.200}: {type(exc).__name__}: {exc}") from exc

    def _snapshot_of(self, reply: Any) -> Snapshot:
        """The snapshot ``reply`` describes. Where the queue's last reply had its shape,
        only the parts of it that differ are read again (``_parts``): the rest of the
        last snapshot is what reading them would make (a step moves an id or two)."""
        last = self.last_read
        if last is not None and type(reply) is list and len(reply) == len(last[0]):
            was, snap = last
            changed = self._parts(reply, was)
            if changed:
                snap = dataclasses.replace(snap, **changed)
        else:
            snap = self._whole(reply)
        self.last_read = (reply, snap)
        return snap

    def _whole(self, reply: Any) -> Snapshot:
        return Snapshot(self.name, **self._parts(reply))

    def _parts(self, reply: Any, was: Any = None) -> dict[str, Any]:
        """The fields of the snapshot ``reply`` describes, normalised as ``Snapshot.build``
        keeps them: every one, or, given ``was`` (the reply read before, of the same
        shape), those of the parts that differ from it: each location, the rows, the small
        keys (counters, stray keys, lanes, ring, paused groups, lane hashes) as one."""
        n = len(spec.LOCATIONS)
        out: dict[str, Any] = {loc: zset_order(_entries(reply[i])) for i, loc in enumerate(spec.LOCATIONS)
                               if was is None or reply[i] != was[i]}
        if was is None or reply[n] != was[n]:
            out["rows"] = tuple(sorted(_rows(reply[n]).items()))
        if was is None or reply[n + 1:] != was[n + 1:]:
            out.update(self._small(reply))
        return out

    def _small(self, reply: Any) -> dict[str, Any]:
        """The small keys of ``reply``, as ``Snapshot`` fields: a counter or a lane hash
        the grammar does not describe is a stray key."""
        n = len(spec.LOCATIONS)
        stray = [_text(k) for k in reply[n + 3]]
        counters = []
        for key, flat in zip(self.keys[4:6], reply[n + 1 : n + 3]):
            fields = {_text(f): bytes(v) for f, v in _pairs(flat)}
            count = fields.pop("count", b"0")
            if fields or canonical_int(count) is None:
                stray.append(key)  # a counter the grammar does not describe
                count = b"0" if canonical_int(count) is None else count
            counters.append(int(count))
        lanes = {_text(g): [(_text(m), norm_score(v)) for m, v in _pairs(flat)] for g, flat in _pairs(reply[n + 4])}
        hashes = {}
        for name, flat in zip(LANE_HASHES, reply[n + 7 : n + 10]):
            fields = {_text(f): bytes(v) for f, v in _pairs(flat)}
            hashes[name] = {g: int(v) for g, v in fields.items() if _integer(v)}
            if len(hashes[name]) != len(fields):
                stray.append(keyspace.prefix(self.name) + name)  # a value the grammar does not describe
        return {"lanes": lanes_of(lanes), **small_of(counters[0], counters[1], stray, map(_text, reply[n + 5]),
                                                     map(_text, reply[n + 6]), hashes)}

    # -- batches ---------------------------------------------------------------------

    def pipeline(self) -> "Batch":
        """A batch of transitions sent in one round trip (see ``Batch``)."""
        return Batch(self)


def wire(op: str, values: dict[str, Any]) -> list[Any]:
    """The ARGV of ``op`` (an op or a batch) from its checked values, in the order of its
    ``argv`` in transitions.json (CC-2); an absent optional argument is the empty string.
    The trailing ``now`` is the caller's."""
    return ["" if values[a["name"]] is None else values[a["name"]] for a in spec.entry(op)["argv"]]


def _integer(value: bytes) -> bool:
    """A canonical decimal, or one with a minus sign: a lane count read as it is, so a
    negative ``gactive`` shows as a broken LANE-3 rather than as a stray key."""
    return canonical_int(value.removeprefix(b"-")) is not None


class Batch:
    """Transitions queued on a ``Queue`` and sent in one non-transactional pipeline by
    ``execute()``. Every call is checked when it is queued (a refused argument raises
    there, and nothing is sent). ``execute()`` returns the answers in order; with
    ``raise_on_error`` (the default) the first refusal is raised after the whole batch
    ran, else refusals are returned in place as ``EmqError`` instances."""

    def __init__(self, queue: Queue) -> None:
        self.queue = queue
        self.calls: list[_Call] = []

    def _add(self, call: _Call) -> "Batch":
        self.calls.append(call)
        return self

    def enqueue(self, id: str, payload: bytes | str) -> "Batch":
        return self._add(self.queue._enqueue(id, payload))

    def schedule(self, id: str, payload: bytes | str, *, run_at: int | None = None, delay_ms: int | None = None, now: int | None = None) -> "Batch":
        return self._add(self.queue._schedule(id, payload, run_at, delay_ms, now))

    def claim(self, lease_ms: int, *, now: int | None = None) -> "Batch":
        return self._add(self.queue._claim(lease_ms, now))

    def complete(self, id: str, token: int) -> "Batch":
        return self._add(self.queue._complete(id, token))

    def retry(self, id: str, token: int, *, delay_ms: int, max_attempts: int, error: bytes | str, now: int | None = None) -> "Batch":
        return self._add(self.queue._retry(id, token, delay_ms, max_attempts, error, now))

    def extend(self, id: str, token: int, lease_ms: int, *, now: int | None = None) -> "Batch":
        return self._add(self.queue._extend(id, token, lease_ms, now))

    def promote(self, *, now: int | None = None, limit: int = 100) -> "Batch":
        return self._add(self.queue._promote(limit, now))

    def reap(self, *, now: int | None = None, limit: int = 100, max_attempts: int | None = None) -> "Batch":
        return self._add(self.queue._reap(limit, max_attempts, now))

    def reprocess(self, id: str) -> "Batch":
        return self._add(self.queue._reprocess(id))

    def remove(self, id: str) -> "Batch":
        return self._add(self.queue._remove(id))

    def lane_enqueue(self, id: str, payload: bytes | str, group: str) -> "Batch":
        return self._add(self.queue._lane_enqueue(id, payload, group))

    def execute(self, *, raise_on_error: bool = True) -> list[Any]:
        calls, self.calls = self.calls, []
        conn = self.queue.conn
        replies = conn.scripts.run_batch(conn.redis, [(c.name, c.keys, c.args) for c in calls])
        out = [r if isinstance(r, Exception) else c.read(r) for c, r in zip(calls, replies)]
        if raise_on_error:
            for r in out:
                if isinstance(r, Exception):
                    raise r
        return out

"""``emq audit``: a read-only check of a live deployment's keyspace.

For each queue (given, or found by the key grammar ``emq:{q}:…``) it reports the counts
per location and in lanes, and every violation of INV-1..7 and INV-9..11 with its id or
group: members with no row, rows in no place, stray keys, wrong scores, rows out of
grammar, lane members of another group, a ring or ``gactive`` that does not match. The
invariants are ``emq_model.invariants``' own: the per-id ones (``of_ids``) on small
snapshots of a few ids at a time, the ring and lane hashes' (``lane_keys``) once a queue,
on those keys read whole and the active jobs' groups counted along the walks.

Read-only: it sends only the commands of specs/acl.json ``audit`` (GET, TYPE, SCAN,
ZSCAN, ZCARD, ZMSCORE, HGETALL, LRANGE, SMEMBERS, and MULTI/EXEC around those reads).
Bounded: every location and lane is walked with ZSCAN and the keyspace with SCAN,
``batch`` at a time, and each batch's ids are judged in one pipelined MULTI/EXEC, so
memory holds one batch of ids and rows, the queue names, a queue's lane keys (an entry
per group), and at most ``keep`` listed violations (every violation is still counted and
handed to ``on_violation``) — never a whole location.

Each batch is read atomically (MULTI/EXEC on the queue's node), so an id is judged on one
consistent view of its memberships and row even while workers move it. Between batches
the queue may move: an id moved from a location not yet walked into one already walked is
judged on neither walk, and one moved the other way on both. Audit a quiescent queue for
an exact census; a queue in motion gets no false violation for an id, only counts that
are a blur of the walk's duration.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

import redis
from redis.exceptions import RedisClusterException

from emq_kit.errors import AuditError
from emq_live import acl
from emq_live.client import _client, _integer, handshake
from emq_live.urls import check_url, redact
from emq_model import errors, invariants, keyspace, spec
from emq_model.invariants import Violation
from emq_model.snapshot import LANE_HASHES, Place, Snapshot, canonical_int, norm_score

BATCH = 1000
"""Ids per SCAN/ZSCAN page and per judged MULTI/EXEC batch."""
KEEP = 10_000
"""Violations listed in the result; more are counted, and streamed to ``on_violation``."""

READ_COMMANDS: tuple[str, ...] = tuple(acl.spec()["audit"]["commands"])
"""Every command the audit sends (specs/acl.json ``audit``; cluster mode adds redis-py's
CLUSTER SLOTS and COMMAND)."""

_TYPE_OF = {**dict.fromkeys(spec.LOCATIONS, b"zset"), "metrics:completed": b"hash", "metrics:failed": b"hash"}


@dataclass(frozen=True)
class Progress:
    """Where the audit is: ``stage`` is a location name, ``lane <group>``, ``keys`` (the
    SCAN of the queue's keys) or ``discover``; ``done`` ids or keys seen of ``total`` (``None`` for a SCAN)."""

    queue: str | None
    stage: str
    done: int
    total: int | None


@dataclass
class QueueAudit:
    """One queue's census: members per location, rows, counters, stray keys, violations
    counted per invariant."""

    queue: str
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(spec.LOCATIONS, 0))
    rows: int = 0
    completed: int = 0
    failed: int = 0
    stray: int = 0
    lanes: int = 0  # members of the lanes (lifecycle.md §10)
    by_invariant: Counter[str] = field(default_factory=Counter)

    @property
    def empty(self) -> bool:
        """Whether the queue holds no key the audit reads: nothing of it was judged."""
        return not (any(self.counts.values()) or self.rows or self.completed or self.failed or self.stray
                    or self.lanes)

    def to_json(self) -> dict[str, Any]:
        return {"queue": self.queue, "counts": dict(self.counts), "rows": self.rows,
                "completed": self.completed, "failed": self.failed, "stray": self.stray, "lanes": self.lanes,
                "violations": dict(sorted(self.by_invariant.items()))}


@dataclass
class AuditResult:
    """The audit of a deployment: per queue, and the violations listed (at most ``keep``,
    ``total`` of them in all)."""

    fence: str | None
    queues: list[QueueAudit]
    violations: list[tuple[str, Violation]]
    total: int

    @property
    def clean(self) -> bool:
        return self.total == 0

    @property
    def detail(self) -> str:
        """``emq audit``'s word (specs/verdicts.json): ``violations``; ``empty`` when no
        queue audited holds a key (a mistyped name: nothing judged); else ``clean``."""
        if not self.clean:
            return "violations"
        return "empty" if all(q.empty for q in self.queues) else "clean"

    @property
    def truncated(self) -> bool:
        return self.total > len(self.violations)


def _text(value: bytes) -> str:
    return value.decode("utf-8", "surrogateescape")


def _chunks(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    chunk: list[Any] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


class _Auditor:
    """One audit run: the client, the bounds and the sinks."""

    def __init__(self, client: Any, batch: int, keep: int, progress: Callable[[Progress], None] | None,
                 on_violation: Callable[[str, Violation], None] | None) -> None:
        self.client, self.batch, self.keep = client, batch, keep
        self.progress = progress or (lambda p: None)
        self.on_violation = on_violation
        self.listed: list[tuple[str, Violation]] = []
        self.total = 0
        self.cluster = hasattr(client, "get_primaries")
        self.first: dict[str, list[tuple[str, Any]]] = {}  # the queue's lanes met, a member each (INV-10)
        self.grouped: Counter[str] = Counter()  # the queue's active jobs by their rows' group (INV-11)

    # -- nodes --------------------------------------------------------------------

    def nodes(self) -> list[Any]:
        """A plain client per primary (one, outside a cluster)."""
        if not self.cluster:
            return [self.client]
        return [self.client.get_redis_connection(n) for n in self.client.get_primaries()]

    def node_of(self, queue: str) -> Any:
        """The plain client of the primary that holds every key of ``queue``."""
        if not self.cluster:
            return self.client
        node = self.client.nodes_manager.get_node_from_slot(keyspace.slot(keyspace.prefix(queue)))
        return self.client.get_redis_connection(node)

    # -- findings -----------------------------------------------------------------

    def report(self, audit: QueueAudit, found: Iterable[Violation]) -> None:
        for v in found:
            audit.by_invariant[v.invariant] += 1
            self.total += 1
            if len(self.listed) < self.keep:
                self.listed.append((audit.queue, v))
            if self.on_violation is not None:
                self.on_violation(audit.queue, v)

    # -- discovery ------------------------------------------------------------------

    def discover(self) -> list[str]:
        """Every queue name some key ``emq:{q}:…`` names, on every primary."""
        names: set[str] = set()
        seen = 0
        for node in self.nodes():
            for key in node.scan_iter(match="emq:{*}:*", count=self.batch):
                seen += 1
                head = key[len(b"emq:{"):]
                name = _text(head[: head.index(b"}")])
                try:
                    names.add(keyspace.check_queue(name))
                except errors.ArgError:
                    pass  # no queue can own it: no client ever writes such a key
                if seen % self.batch == 0:
                    self.progress(Progress(None, "discover", seen, None))
        self.progress(Progress(None, "discover", seen, None))
        return sorted(names)

    # -- one queue ----------------------------------------------------------------------

    def queue(self, name: str) -> QueueAudit:
        audit = QueueAudit(name)
        node = self.node_of(name)
        keys = keyspace.queue_keys(name)
        lane = keyspace.lane_keys(name)
        with node.pipeline(transaction=False) as p:
            for k in keys:
                p.type(k)
            for k in keys[4:]:
                p.hgetall(k)
            p.lrange(lane["ring"], 0, -1)
            p.smembers(lane["paused"])
            for h in LANE_HASHES:
                p.hgetall(lane[h])
            replies = p.execute(raise_on_error=False)  # a key of another type is stray
        types, counters = replies[:6], replies[6:8]
        for reply in types:
            _wrongtype(reply)
        stray = [k for k, kind, t in zip(keys, keyspace.KINDS, types) if t not in (b"none", _TYPE_OF[kind])]
        for i, name_ in enumerate(("completed", "failed")):
            if types[4 + i] != b"hash" or _wrongtype(counters[i]):
                continue
            fields = dict(counters[i])
            count = canonical_int(fields.pop(b"count", b"0"))
            if fields or count is None:
                stray.append(keys[4 + i])  # a counter the grammar does not describe
            setattr(audit, name_, 0 if count is None else count)  # as the snapshot reads it
        self.first, self.grouped = {}, Counter()
        small = self.lane_small(lane, replies[8:], stray)
        if stray:
            self.strays(audit, stray)
        places: list[Place] = [*spec.LOCATIONS, *(("lane", g) for g in self.lanes(node, audit))]
        for loc, key, t in zip(spec.LOCATIONS, keys, types):
            if t == b"zset":
                self.location(node, audit, loc, key, places)
        for place in places[len(spec.LOCATIONS):]:
            self.location(node, audit, place, keyspace.lane_key(name, place[1]), places)
        self.keys(node, audit, places)
        self.report(audit, invariants.lane_keys(Snapshot.build(name, {}, {}, lanes=self.first, **small), self.grouped))
        return audit

    def lane_small(self, lane: dict[str, str], small: list[Any], stray: list[str]) -> dict[str, Any]:
        """The ring, the paused groups and the lane hashes as the snapshot reads them
        (lifecycle.md §10): a key of another type, or a hash holding a value that is no
        decimal, is stray (appended to ``stray``)."""
        ring, paused, *hashes = small
        out: dict[str, Any] = {"ring": [], "paused": [], "hashes": {}}
        for kind, reply in (("ring", ring), ("paused", paused)):
            if _wrongtype(reply):
                stray.append(lane[kind])
            else:
                out[kind] = [_text(g) for g in reply]
        for h, reply in zip(LANE_HASHES, hashes):
            if _wrongtype(reply):
                stray.append(lane[h])
                continue
            fields = {_text(f): bytes(v) for f, v in reply.items()}
            out["hashes"][h] = {g: int(v) for g, v in fields.items() if _integer(v)}
            if len(out["hashes"][h]) != len(fields):
                stray.append(lane[h])  # a value the grammar does not describe
        return out

    def strays(self, audit: QueueAudit, keys: list[str]) -> None:
        audit.stray += len(keys)
        self.report(audit, invariants.check_invariants(Snapshot.build(audit.queue, {}, {}, stray=keys)))

    def lanes(self, node: Any, audit: QueueAudit) -> list[str]:
        """The groups whose lane key ``emq:{q}:g:<group>:pending`` is a sorted set (SCAN);
        a lane key of another type is left to ``keys``, which reports it stray."""
        head = keyspace.prefix(audit.queue) + keyspace.LANE_HEAD
        named = (keyspace.group_of(audit.queue, _text(key))
                 for key in node.scan_iter(match=keyspace.glob(head) + "*", count=self.batch))
        groups = sorted({g for g in named if g is not None})
        with node.pipeline(transaction=False) as pipe:
            for g in groups:
                pipe.type(keyspace.lane_key(audit.queue, g))
            types = pipe.execute()
        return [g for g, t in zip(groups, types) if t == b"zset"]

    def _is_lane(self, node: Any, queue: str, group: str) -> bool:
        return bool(node.type(keyspace.lane_key(queue, group)) == b"zset")

    def location(self, node: Any, audit: QueueAudit, place: Place, key: str, places: list[Place]) -> None:
        """Walk ``place`` (a location or a lane) with ZSCAN; judge each page's ids on one
        atomic read."""
        total = node.zcard(key)
        done = 0
        stage = place if isinstance(place, str) else f"lane {place[1]}"
        for page in _chunks(node.zscan_iter(key, count=self.batch), self.batch):
            if isinstance(place, str):
                audit.counts[place] += len(page)
            else:
                audit.lanes += len(page)
            done += len(page)
            self.judge(node, audit, [_text(m) for m, _ in page], places, first=place)
            self.progress(Progress(audit.queue, stage, done, total))

    def keys(self, node: Any, audit: QueueAudit, places: list[Place]) -> None:
        """Walk the queue's keys with SCAN: judge the rows in no place (the others were
        judged with their first place), report keys outside the grammar."""
        row_head = keyspace.prefix(audit.queue) + "job:"
        fixed = {*keyspace.queue_keys(audit.queue), *keyspace.lane_keys(audit.queue).values()}
        walked = {p[1] for p in places if isinstance(p, tuple)}
        done = 0
        for page in _chunks(node.scan_iter(match=keyspace.pattern(audit.queue), count=self.batch), self.batch):
            done += len(page)
            ids, stray = [], []
            for raw in page:
                key = _text(raw)
                group = keyspace.group_of(audit.queue, key)
                if key in fixed or group in walked:
                    continue
                if key.startswith(row_head) and len(key) > len(row_head):
                    ids.append(key[len(row_head):])
                elif group is None or not self._is_lane(node, audit.queue, group):
                    stray.append(key)  # a lane made since the walks began is no stray: its ids blur (module doc)
            if stray:
                self.strays(audit, stray)
            if ids:
                self.judge(node, audit, self.unheld(node, audit.queue, ids, places), places, first=None)
            self.progress(Progress(audit.queue, "keys", done, None))

    def memberships(self, pipe: Any, queue: str, raws: list[bytes], places: list[Place]) -> None:
        """Queue on ``pipe`` one ZMSCORE per place (location, then lane) for all of ``raws``."""
        for place in places:
            pipe.zmscore(keyspace.queue_key(queue, place) if isinstance(place, str)
                         else keyspace.lane_key(queue, place[1]), raws)

    def unheld(self, node: Any, queue: str, ids: list[str], places: list[Place]) -> list[str]:
        """The ``ids`` that are in no place now (their rows are judged on their own)."""
        if not ids:
            return []
        with node.pipeline(transaction=False) as pipe:
            self.memberships(pipe, queue, [i.encode("utf-8", "surrogateescape") for i in ids], places)
            replies = pipe.execute(raise_on_error=False)
        for reply in replies:
            _wrongtype(reply)
        scores = [reply if isinstance(reply, list) else [None] * len(ids) for reply in replies]
        return [i for n, i in enumerate(ids) if all(by_place[n] is None for by_place in scores)]

    def judge(self, node: Any, audit: QueueAudit, ids: list[str], places: list[Place], *,
              first: Place | None) -> None:
        """Read the memberships (one ZMSCORE per place) and the rows of ``ids`` in one
        MULTI/EXEC and run the per-id invariants (INV-1..6, INV-9) on that small snapshot.
        Walking a place (``first`` = it), an id is judged there only if that is its first
        place, so an id in two is reported once; judging rows found by SCAN (``first`` =
        None), only ids still in no place are judged. Rows are counted where they are
        judged, and the active ones' groups for INV-11."""
        if not ids:
            return
        p = keyspace.prefix(audit.queue).encode()
        raws = [i.encode("utf-8", "surrogateescape") for i in ids]
        with node.pipeline(transaction=True) as pipe:
            self.memberships(pipe, audit.queue, raws, places)
            for raw in raws:
                pipe.hgetall(p + b"job:" + raw)
            replies = pipe.execute(raise_on_error=False)
        n_places = len(places)
        for reply in replies[:n_places]:
            _wrongtype(reply)  # a location of another type was skipped; ZMSCORE of a missing key is all None
        scores = [reply if isinstance(reply, list) else [None] * len(ids) for reply in replies[:n_places]]
        locations: dict[str, list[tuple[str, Any]]] = {}
        lanes: dict[str, list[tuple[str, Any]]] = {}
        rows: dict[str, dict[str, bytes]] = {}
        stray: list[str] = []
        judged: list[str] = []
        for n, i in enumerate(ids):
            row = replies[n_places + n]
            held = [(place, s) for place, by_place in zip(places, scores) if (s := by_place[n]) is not None]
            if (held[0][0] if held else None) != first:
                continue  # judged in an earlier place, or moved since it was listed
            judged.append(i)
            for place, s in held:
                if isinstance(place, str):
                    locations.setdefault(place, []).append((i, norm_score(s)))
                else:
                    lanes.setdefault(place[1], []).append((i, norm_score(s)))
            if _wrongtype(row):
                stray.append(keyspace.prefix(audit.queue) + "job:" + i)  # a row key holding another type
            elif row:
                rows[i] = {_text(f): bytes(v) for f, v in row.items()}
                if "group" in rows[i] and any(place == "active" for place, _ in held):
                    self.grouped.update(invariants.active_groups([rows[i]["group"]]))
        for g, entries in lanes.items():
            self.first.setdefault(g, entries[:1])  # INV-10 asks only whether a lane holds a member
        audit.rows += len(rows)
        if stray:
            self.strays(audit, stray)
        snapshot = Snapshot.build(audit.queue, locations, rows, lanes=lanes)
        self.report(audit, [v for found in invariants.of_ids(snapshot, judged).values() for v in found])


def _wrongtype(reply: Any) -> bool:
    """Whether ``reply`` is the WRONGTYPE refusal (the key is stray); any other error
    (NOPERM, a lost connection) is raised: it says nothing about the keyspace."""
    if not isinstance(reply, Exception):
        return False
    if isinstance(reply, redis.ResponseError) and str(reply).startswith("WRONGTYPE"):
        return True
    raise reply


def audit(url: str, queues: Iterable[str] = (), *, batch: int = BATCH, keep: int = KEEP,
          progress: Callable[[Progress], None] | None = None,
          on_violation: Callable[[str, Violation], None] | None = None) -> AuditResult:
    """Audit the deployment at ``url`` (``redis://``, ``valkey://``, ``redis+cluster://``
    …): the given ``queues``, or every queue the key grammar finds. Sends only
    ``READ_COMMANDS``. ``ArgError`` for a bad queue name or bound (before any I/O);
    ``AuditError`` when the deployment cannot be read or speaks another wire version."""
    names = [keyspace.check_queue(q) for q in queues]
    for label, value in (("batch", batch), ("keep", keep)):
        if not isinstance(value, int) or isinstance(value, bool) or value < (1 if label == "batch" else 0):
            raise errors.ArgError(f"{label} must be an integer of at least {1 if label == 'batch' else 0}, got {value!r}")

    url = check_url(url)  # not a str, or a scheme we do not serve: UrlError, one line
    try:
        client = _client(url)
    except (ValueError, redis.RedisError, RedisClusterException) as exc:  # a cluster client connects at once
        raise AuditError(f"cannot connect to {redact(url)}: {_reason(exc)}") from None
    try:
        handshake(url, client)
        got = client.get(keyspace.VERSION_KEY)
        fence = None if got is None else got.decode("utf-8", "replace")
        if fence is not None and fence != spec.WIRE_VERSION:
            raise AuditError(f"{keyspace.VERSION_KEY} is {fence!r}; this audit reads wire version {spec.WIRE_VERSION!r}")
        run = _Auditor(client, batch, keep, progress, on_violation)
        audits = [run.queue(q) for q in (names or run.discover())]
        return AuditResult(fence, audits, run.listed, run.total)
    except (redis.ConnectionError, redis.TimeoutError, redis.exceptions.InvalidResponse) as exc:
        raise AuditError(f"cannot connect to {redact(url)}: {_reason(exc)}") from None
    except (redis.RedisError, RedisClusterException) as exc:  # an ACL refusal, a cluster gone away ...
        raise AuditError(f"{redact(url)}: {type(exc).__name__}: {_reason(exc)}") from None
    finally:
        client.close()


def _reason(exc: BaseException) -> str:
    """redis-py's message for ``exc`` on one line, any URL in it redacted."""
    return redact(" ".join(str(exc).split()) or type(exc).__name__)

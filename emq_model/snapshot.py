"""The snapshot: one queue's whole keyspace as an immutable, comparable, printable value.

The model builds it from its memory; ``emq_live`` reads it from a real keyspace. Two
snapshots are equal exactly when every location holds the same members with the same
scores, every row has the same fields and bytes, the counters agree and no stray key
exists on either side.
"""

from __future__ import annotations

import re
from bisect import bisect_left, insort
from dataclasses import dataclass, field
from functools import cached_property
from heapq import merge
from typing import Any, Iterable, Iterator, Mapping, NamedTuple, TypeVar

from .spec import LOCATIONS

Score = int | float
Entries = tuple[tuple[str, Score], ...]
Row = tuple[tuple[str, bytes], ...]
Counts = tuple[tuple[str, int], ...]
Place = str | tuple[str, str]
"""A sorted set of a queue: one of the four locations by name, or a lane as
``("lane", group)`` (the model's own name for a lane key)."""
"""A lane hash (``glimit``, ``gactive``, ``gweight``): ``(group, value)`` sorted by group."""
LANE_HASHES: tuple[str, ...] = ("glimit", "gactive", "gweight")


K = TypeVar("K")
V = TypeVar("V")


class Patched(Mapping[K, V]):
    """A look-up that is another one with a few keys set or removed, made in the time of
    the change rather than of the whole (INC-3): a deep queue's step patches its sets'
    and rows' look-ups without copying them. The changes of a chain of patches are kept
    in one dict over the first look-up, folded into a plain dict once they grow past
    ``FOLD`` or a sixteenth of it, so a look-up stays two dict probes. ``None`` as a value
    in ``changes``: the key removed (a look-up's values are never ``None``)."""

    FOLD = 256
    __slots__ = ("base", "over", "size")
    base: Mapping[K, V]
    over: dict[K, V | None]
    size: int

    def __init__(self, base: Mapping[K, V], changes: Mapping[K, V | None]) -> None:
        size = len(base)
        for key, value in changes.items():
            size += (value is not None) - (key in base)
        over: dict[K, V | None] = {}
        if isinstance(base, Patched):
            over.update(base.over)
            base = base.base
        over.update(changes)
        if len(over) > min(self.FOLD, len(base) // 16 + 16):
            folded = dict(base)
            for key, value in over.items():
                if value is None:
                    folded.pop(key, None)
                else:
                    folded[key] = value
            base, over = folded, {}
        self.base, self.over, self.size = base, over, size

    def __getitem__(self, key: K) -> V:
        if key in self.over:
            value = self.over[key]
            if value is None:
                raise KeyError(key)
            return value
        return self.base[key]

    def __contains__(self, key: object) -> bool:
        if key in self.over:
            return self.over[key] is not None
        return key in self.base

    def get(self, key: K, default: Any = None) -> Any:
        if key in self.over:
            value = self.over[key]
            return default if value is None else value
        return self.base.get(key, default)

    def __iter__(self) -> Iterator[K]:
        over = self.over
        yield from (key for key in self.base if key not in over)
        yield from (key for key, value in over.items() if value is not None)

    def __len__(self) -> int:
        return self.size


class Deferred(NamedTuple):
    """What a snapshot's location or rows are made from on first read (INC-3): ``base``,
    an earlier snapshot's entries (or rows), ``was`` that snapshot's look-up of its entries
    (rows need none: an id is its own sort key), and ``keys``, every member (or row id)
    written since."""

    base: tuple[Any, ...]
    was: Mapping[str, Any]
    keys: frozenset[str]


SPAN = 64
"""The most keys one ``Deferred`` carries; past it the earlier snapshot's own are made first,
so a step's bookkeeping stays small and a first read patches few keys."""


def patched_entries(deferred: Deferred, now: Mapping[str, Score]) -> Entries:
    """The entries of a sorted set whose look-up is ``now``, from what ``deferred`` holds: only the
    keys written are moved, each found and placed by bisection; new members all past the
    last one (a fill's) appended at once; most of the set moved: sorted whole."""
    base, was = deferred.base, deferred.was
    moved = [(m, now.get(m)) for m in sorted(deferred.keys)]
    if all(score is not None and m not in was for m, score in moved):
        added = zset_order((m, s) for m, s in moved if s is not None)
        if not base or not added or zset_key(base[-1]) < zset_key(added[0]):
            return base + added
    if len(moved) * 16 > len(base):
        return zset_order(now.items())
    entries = list(base)
    for m, score in moved:
        if m in was:
            del entries[bisect_left(entries, zset_key((m, was[m])), key=zset_key)]
        if score is not None:
            insort(entries, (m, score), key=zset_key)
    return tuple(entries)


def patched_rows(deferred: Deferred, now: Mapping[str, Row]) -> tuple[tuple[str, Row], ...]:
    """The rows whose look-up is ``now``, from what ``deferred`` holds: only the ids written are
    moved; most of them written: sorted whole."""
    if len(deferred.keys) * 16 > len(deferred.base):
        return tuple(sorted(now.items()))
    rows = list(deferred.base)
    for i in sorted(deferred.keys):
        at = bisect_left(rows, i, key=_first)
        if at < len(rows) and rows[at][0] == i:
            del rows[at]
        if (row := now.get(i)) is not None:
            rows.insert(at, (i, row))
    return tuple(rows)


def _first(entry: tuple[str, object]) -> str:
    return entry[0]


class _MadeOnRead:
    """A snapshot's location or rows, made on first read from its ``Deferred`` (INC-3): a
    deep queue's step that no one reads whole costs what it wrote, not a copy of the set
    it wrote in. A non-data descriptor: once made, the value in the instance is read
    directly."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, snapshot: "Snapshot | None", owner: type | None = None) -> Any:
        if snapshot is None:
            return ()  # the field's default, as the dataclass declares it
        held = snapshot.__dict__
        deferred = held["_deferred"][self.name]  # dropped once made: a read cut short leaves it
        held[self.name] = value = (patched_rows(deferred, snapshot.row_index) if self.name == "rows" else
                                   patched_entries(deferred, snapshot.index[self.name]))
        del held["_deferred"][self.name]
        if not held["_deferred"]:
            del held["_deferred"]
        return value


def zset_key(entry: tuple[str, Score]) -> tuple[Score, bytes]:
    """The sort key of a ``(member, score)`` entry in a sorted set: score, then bytes."""
    return entry[1], entry[0].encode("utf-8", "surrogateescape")


def zset_order(entries: Iterable[tuple[str, Score]]) -> Entries:
    """Entries in the order Valkey keeps a sorted set: by score, then by member bytes."""
    return tuple(sorted(entries, key=zset_key))


def norm_score(score: float | int | str | bytes) -> Score:
    """An integral score as ``int`` (Valkey hands scores back as doubles, the client
    sometimes as text): the one score normalisation of the model, the client and the kit."""
    if type(score) is int:  # the model's own scores: already normal
        return score
    f = float(score)
    return int(f) if f.is_integer() else f


_CANONICAL = re.compile(rb"0|[1-9][0-9]*")


def canonical_int(raw: bytes | None) -> int | None:
    """A counter field's value (``attempts``, a count) when it is a canonical decimal
    integer (no sign, no leading zero, ASCII digits only; INV-5), else None: the one such
    check of the model, the client and the kit."""
    return int(raw) if raw is not None and _CANONICAL.fullmatch(raw) else None


def small_of(completed: int, failed: int, stray: Iterable[str], ring: Iterable[str], paused: Iterable[str],
             hashes: Mapping[str, Mapping[str, int]]) -> dict[str, Any]:
    """A snapshot's small keys (the counters, the stray keys, the ring, the paused
    groups, the lane hashes), each normalised as ``Snapshot.build`` keeps it."""
    return {"completed": completed, "failed": failed, "stray": tuple(sorted(stray)), "ring": tuple(ring),
            "paused": tuple(sorted(paused)), **{name: tuple(sorted(hashes.get(name, {}).items())) for name in LANE_HASHES}}


def lanes_of(lanes: Mapping[str, Iterable[tuple[str, Score]]]) -> tuple[tuple[str, Entries], ...]:
    """A snapshot's lanes (group -> entries), normalised as ``Snapshot.build`` keeps them:
    by group, each lane in a sorted set's order, an empty lane left out (it is no key)."""
    lane_sets = ((g, zset_order((m, norm_score(s)) for m, s in e)) for g, e in lanes.items())
    return tuple(sorted((g, e) for g, e in lane_sets if e))


@dataclass(frozen=True)
class Snapshot:
    """A queue's keyspace. ``locations`` maps each of the four sets to its entries in
    Valkey order; ``rows`` maps ids (the row key's suffix) to their fields, sorted;
    ``stray`` lists keys under ``emq:{q}:`` that the grammar does not name.

    Lanes (lifecycle.md §10): ``lanes`` maps each group to its lane's entries (sorted by
    group; a lane's members count as ``pending`` in ``members``, ``where`` and ``ids``),
    ``ring`` is the ring in list order, ``paused`` the paused groups sorted, and
    ``glimit``, ``gactive``, ``gweight`` the lane hashes."""

    queue: str
    pending: Entries = ()
    active: Entries = ()
    schedule: Entries = ()
    dead: Entries = ()
    rows: tuple[tuple[str, Row], ...] = ()
    completed: int = 0
    failed: int = 0
    stray: tuple[str, ...] = field(default=())
    lanes: tuple[tuple[str, Entries], ...] = ()
    ring: tuple[str, ...] = ()
    paused: tuple[str, ...] = ()
    glimit: Counts = ()
    gactive: Counts = ()
    gweight: Counts = ()

    @classmethod
    def build(
        cls,
        queue: str,
        locations: Mapping[str, Iterable[tuple[str, Score]]],
        rows: Mapping[str, Mapping[str, bytes] | Row],
        completed: int = 0,
        failed: int = 0,
        stray: Iterable[str] = (),
        lanes: Mapping[str, Iterable[tuple[str, Score]]] | None = None,
        ring: Iterable[str] = (),
        paused: Iterable[str] = (),
        hashes: Mapping[str, Mapping[str, int]] | None = None,
    ) -> "Snapshot":
        """A snapshot from plain mappings, normalised to the canonical order (an empty
        lane is no key, so it is left out). A row given as a ``Row`` is taken as it is:
        its fields already sorted, each once."""
        sets: dict[str, Any] = {loc: zset_order((m, norm_score(s)) for m, s in locations.get(loc, ())) for loc in LOCATIONS}
        return cls(
            lanes=lanes_of(lanes or {}),
            queue=queue,
            rows=tuple(sorted((i, r if isinstance(r, tuple) else tuple(sorted(r.items()))) for i, r in rows.items())),
            **small_of(completed, failed, stray, ring, paused, hashes or {}),
            **sets,
        )

    @cached_property
    def index(self) -> dict[Place, Mapping[str, Score]]:
        """Every non-empty sorted set by place (the four locations always), as
        ``{member: score}``: made once a snapshot, for look-ups by member."""
        out: dict[Place, Mapping[str, Score]] = {loc: dict(self.location(loc)) for loc in LOCATIONS}
        out.update({("lane", g): dict(e) for g, e in self.lanes})
        return out

    @cached_property
    def row_index(self) -> Mapping[str, Row]:
        """Every row by id (its fields as the snapshot holds them): made once a snapshot."""
        return dict(self.rows)

    def location(self, name: str) -> Entries:
        """The entries of one of the four sets."""
        return getattr(self, name)

    def walk(self, name: str) -> Iterator[tuple[str, Score]]:
        """The entries of one of the four sets in order, as they are read: a set not
        made yet is merged from what it is made from, so reading its first few costs few."""
        deferred = self.__dict__.get("_deferred", {}).get(name)
        if deferred is None:
            return iter(getattr(self, name))
        now = self.index[name]
        added = zset_order((m, score) for m in deferred.keys if (score := now.get(m)) is not None)
        kept = (entry for entry in deferred.base if entry[0] not in deferred.keys)
        return merge(kept, added, key=zset_key)

    def size(self, name: str) -> int:
        """The cardinality of one of the four sets, without making its entries."""
        held = self.__dict__
        return len(held[name]) if name in held else len(self.index[name])

    def deferral(self, name: str, keys: Iterable[str]) -> Deferred:
        """What this snapshot's location (or ``rows``) and the ``keys`` written after it
        make: its own ``Deferred`` widened while it stays within ``SPAN`` keys, else its
        entries, made now."""
        pending = self.__dict__.get("_deferred", {}).get(name)
        written = frozenset(keys)
        if pending is not None and len(widened := pending.keys | written) <= SPAN:
            return Deferred(pending.base, pending.was, widened)
        was = {} if name == "rows" else self.index[name]  # rows are found by id: no old look-up kept alive
        return Deferred(getattr(self, name), was, written)

    @classmethod
    def deferred(cls, deferred: Mapping[str, Deferred], **fields: Any) -> "Snapshot":
        """A snapshot whose locations and rows named in ``deferred`` are made on first read
        (their look-ups, ``index`` and ``row_index``, are the caller's to set), the
        other fields as given."""
        snapshot = cls.__new__(cls)
        snapshot.__dict__.update(fields)
        if deferred:
            snapshot.__dict__["_deferred"] = dict(deferred)
        return snapshot

    def retold(self, queue: str, stray: tuple[str, ...]) -> "Snapshot":
        """This snapshot under another queue name and stray keys (a run's names told in
        the logical ones), sharing the rest: its sets and rows, made or not, and their
        look-ups."""
        held = self.__dict__
        out = Snapshot.deferred(held.get("_deferred", {}), **{k: v for k, v in held.items() if k != "_deferred"})
        out.__dict__.update(queue=queue, stray=stray)
        return out

    def __getstate__(self) -> dict[str, Any]:
        """The fields, each made (a ``Deferred`` refers to other snapshots' look-ups)."""
        return {name: getattr(self, name) for name in self.__dataclass_fields__}

    def where(self, job_id: str) -> list[str]:
        """Every location that holds ``job_id`` (one, in a sound keyspace); a lane counts
        as ``pending``."""
        return [loc for loc, m, _ in self.members() if m == job_id]

    def score(self, loc: str, job_id: str) -> Score | None:
        """The score of ``job_id`` in ``loc``, or ``None``."""
        return next((s for m, s in self.location(loc) if m == job_id), None)

    def members(self) -> Iterator[tuple[str, str, Score]]:
        """``(location, id, score)`` for every member of every set."""
        for loc in LOCATIONS:
            for m, s in self.location(loc):
                yield loc, m, s
        for _, entries in self.lanes:
            for m, s in entries:
                yield "pending", m, s

    def lane_map(self) -> dict[str, dict[str, Score]]:
        """Every lane's members with their scores, by group."""
        return {g: dict(e) for g, e in self.lanes}

    def group_of(self, job_id: str) -> str | None:
        """The group whose lane holds ``job_id``, or ``None``."""
        return next((g for g, e in self.lanes if any(m == job_id for m, _ in e)), None)

    def lane_json(self) -> dict[str, Any]:
        """The lane fields that are not empty, JSON-able (absent ones read as empty)."""
        out: dict[str, Any] = {}
        if self.lanes:
            out["lanes"] = {g: [[m, s] for m, s in e] for g, e in self.lanes}
        if self.ring:
            out["ring"] = list(self.ring)
        if self.paused:
            out["paused"] = list(self.paused)
        for name in LANE_HASHES:
            if getattr(self, name):
                out[name] = dict(getattr(self, name))
        return out

    def row(self, job_id: str) -> dict[str, bytes] | None:
        """The fields of ``job_id``'s row, or ``None``."""
        for i, r in self.rows:
            if i == job_id:
                return dict(r)
        return None

    def row_map(self) -> dict[str, dict[str, bytes]]:
        """Every row, by id."""
        return {i: dict(r) for i, r in self.rows}

    def ids(self) -> set[str]:
        """Every id that is a member somewhere or has a row."""
        return {m for _, m, _ in self.members()} | {i for i, _ in self.rows}

    def to_json(self) -> dict[str, Any]:
        """A JSON-able form (bytes as latin-1 text keeps every byte; see specs/trace.md)."""
        return {
            "queue": self.queue,
            **{loc: [[m, s] for m, s in self.location(loc)] for loc in LOCATIONS},
            "rows": {i: {f: v.decode("latin-1") for f, v in r} for i, r in self.rows},
            "completed": self.completed,
            "failed": self.failed,
            "stray": list(self.stray),
            **self.lane_json(),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Snapshot":
        """The inverse of ``to_json``."""
        return cls.build(
            data["queue"],
            {loc: [tuple(e) for e in data[loc]] for loc in LOCATIONS},
            {i: {f: v.encode("latin-1") for f, v in r.items()} for i, r in data["rows"].items()},
            data["completed"],
            data["failed"],
            data.get("stray", ()),
            {g: [tuple(x) for x in e] for g, e in data.get("lanes", {}).items()},
            data.get("ring", ()),
            data.get("paused", ()),
            {name: data.get(name, {}) for name in LANE_HASHES},
        )

    def __str__(self) -> str:
        lines = [f"queue {self.queue!r}: completed={self.completed} failed={self.failed}"]
        for loc in LOCATIONS:
            body = ", ".join(f"{m}@{s}" for m, s in self.location(loc))
            lines.append(f"  {loc:<8} [{body}]")
        for i, r in self.rows:
            body = " ".join(f"{f}={v!r}" for f, v in r)
            lines.append(f"  row {i}: {body}")
        for g, e in self.lanes:
            lines.append(f"  lane {g:<4} [{', '.join(f'{m}@{s}' for m, s in e)}]")
        for name, value in self.lane_json().items():
            if name != "lanes":
                lines.append(f"  {name}: {value}")
        if self.stray:
            lines.append(f"  stray keys: {', '.join(self.stray)}")
        return "\n".join(lines)


DEFERRABLE = (*LOCATIONS, "rows")
"""The fields a snapshot ``apply`` makes may hold as a ``Deferred``, made on first read."""
for _name in DEFERRABLE:
    setattr(Snapshot, _name, _MadeOnRead(_name))


def diff(expected: Snapshot, seen: Snapshot) -> list[str]:
    """The differences between two snapshots, in plain words, ``expected`` first."""
    out: list[str] = []
    for loc in LOCATIONS:
        want, got = dict(expected.location(loc)), dict(seen.location(loc))
        for m in sorted(want.keys() | got.keys()):
            if m not in got:
                out.append(f"{m} should be in {loc} (score {want[m]}) but is not")
            elif m not in want:
                out.append(f"{m} is in {loc} (score {got[m]}) but should not be")
            elif want[m] != got[m]:
                out.append(f"{m} in {loc} has score {got[m]}, expected {want[m]}")
    want_rows, got_rows = expected.row_map(), seen.row_map()
    for i in sorted(want_rows.keys() | got_rows.keys()):
        if i not in got_rows:
            out.append(f"row {i} is missing")
        elif i not in want_rows:
            out.append(f"row {i} exists but should not")
        else:
            w, g = want_rows[i], got_rows[i]
            for f in sorted(w.keys() | g.keys()):
                if w.get(f) != g.get(f):
                    out.append(f"row {i} field {f} is {g.get(f)!r}, expected {w.get(f)!r}")
    want_lanes, got_lanes = expected.lane_map(), seen.lane_map()
    for group in sorted(want_lanes.keys() | got_lanes.keys()):
        if want_lanes.get(group) != got_lanes.get(group):
            out.append(f"lane {group} holds {got_lanes.get(group, {})}, expected {want_lanes.get(group, {})}")
    for name in ("ring", "paused", *LANE_HASHES):
        if getattr(expected, name) != getattr(seen, name):
            out.append(f"{name} is {list(getattr(seen, name))}, expected {list(getattr(expected, name))}")
    for name in ("completed", "failed"):
        if getattr(expected, name) != getattr(seen, name):
            out.append(f"counter {name} is {getattr(seen, name)}, expected {getattr(expected, name)}")
    for key in sorted(set(seen.stray) - set(expected.stray)):
        out.append(f"stray key {key} exists")
    for key in sorted(set(expected.stray) - set(seen.stray)):
        out.append(f"stray key {key} is not reported (a key the grammar does not describe)")
    if not out and expected != seen:  # never a difference without words
        out.append(f"the snapshots differ: expected {expected!r:.300}, seen {seen!r:.300}")
    return out

"""A queue's snapshot kept up to date from what each step wrote, read on the server by
the keys it touched (specs/lifecycle.md DEPTH-3, DEPTH-4): a step's cost does not grow
with the jobs already queued.

``read_change`` reads, for the keys the server named as written (``emq_live.tracking``),
only what can have changed: in each touched location the score of every candidate id
and the location's cardinality, every touched row whole, every touched small key (a lane,
the ring, ``paused``, a lane hash, a counter) whole, and whether each touched key outside
the grammar exists. A key of another type than its grammar's reads as snapshot.lua reads
it: absent, and stray (an operator's spoil, FLT-4). What the operator moved at once is
named at once (``Change.whole``), as is a location the server counts empty that was not
(every entry known, none placed one by one): a location just spoiled holds nothing, and
one that was stray and is of its type again (mended) holds what it held when spoiled,
known by its ``DUMP`` being the very one the spoil took (``Overwritten``), else read
whole.
``Kept.apply`` patches the last snapshot with it.
Whatever it cannot place is a doubt (``None``), and the caller reads the whole snapshot
instead: a value the snapshot would call stray though of its grammar's type (a counter of
another field, a lane hash value that is no integer), any other error, a flush, a
cardinality that disagrees with the patched location (a member moved that no candidate
named)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, NamedTuple

from redis.exceptions import ResponseError

from emq_model import keyspace, spec
from emq_model.change import Change, apply, sizes_of
from emq_model.snapshot import LANE_HASHES, Entries, Place, Score, Snapshot, canonical_int, norm_score, zset_order

COUNTERS = ("completed", "failed")
SMALL = (*COUNTERS, "ring", "paused", *LANE_HASHES)
"""The small keys, read whole by every change (INC-2), in the order they are read."""


class Overwritten(NamedTuple):
    """What an operator's spoil overwrote: the key's ``DUMP`` (``None``: it was absent)
    and, for a location read by change, its entries as last read (else ``None``)."""

    dump: bytes | None
    shown: Entries | None


@dataclass
class Touched:
    """The keys of one queue written since its last read, sorted by what they are:
    ``outside``, the keys the grammar does not name; ``names``, every key as written
    (full key names)."""

    locations: set[str]
    rows: set[str]
    lanes: set[str]
    small: set[str]
    outside: set[str] = dataclasses.field(default_factory=set)
    names: set[str] = dataclasses.field(default_factory=set)


def sort_keys(name: str, keys: Iterable[str]) -> Touched:
    """``keys`` (all under the queue's prefix) by kind."""
    head = keyspace.prefix(name)
    out = Touched(set(), set(), set(), set(), names=set(keys))
    fixed = dict(zip(keyspace.KINDS, (*spec.LOCATIONS, *COUNTERS)))
    for key in out.names:
        rest = key[len(head):]
        if rest in fixed:
            (out.locations if rest in spec.LOCATIONS else out.small).add(fixed[rest])
        elif rest in keyspace.LANE_KINDS:
            out.small.add(rest)
        elif rest.startswith("job:") and rest != "job:":
            out.rows.add(rest[len("job:"):])
        elif (group := keyspace.group_of(name, key)) is not None:
            out.lanes.add(group)
        else:
            out.outside.add(key)
    return out


def _wrong_type(reply: Any) -> bool:
    """Whether ``reply`` is the server's refusal of a key of another type (WRONGTYPE);
    any other error is a doubt (``_Doubt``)."""
    if isinstance(reply, ResponseError) and str(reply).startswith("WRONGTYPE"):
        return True
    if isinstance(reply, Exception):
        raise _Doubt
    return False


class _Doubt(Exception):
    """A read ``read_change`` cannot place: the caller reads whole."""


def read_change(client: Any, name: str, before: Snapshot, touched: Touched, ids: Iterable[str],
                restored: Mapping[str, Overwritten] | None = None) -> Change | None:
    """The ``Change`` (INC-1) of queue ``name`` since ``before`` (its last snapshot), read
    in one round trip, a pipeline of reads (the kit is the only writer between steps):
    the score of each candidate (``ids`` and the touched rows' ids) in each touched
    location, every location's cardinality, every touched row and lane whole, every small
    key whole (INC-2), whether each touched key outside the grammar exists; a location
    that was stray by its ``DUMP`` when ``restored`` names what was put back in it, else
    whole. ``None``: a doubt (see the module docstring)."""
    try:
        return _read(client, name, before, touched, ids, restored or {})
    except _Doubt:
        return None


def _read(client: Any, name: str, before: Snapshot, touched: Touched, ids: Iterable[str],
          restored: Mapping[str, Overwritten]) -> Change:
    head = keyspace.prefix(name)
    candidates = sorted(set(ids) | touched.rows)
    keys = dict(zip((*spec.LOCATIONS, *COUNTERS), keyspace.queue_keys(name)))
    keys.update({part: head + part for part in SMALL if part not in keys})
    was_stray = set(before.stray)
    pipe = client.pipeline(transaction=False)
    locations = sorted(touched.locations)
    mended = [loc for loc in locations if keys[loc] in was_stray]  # of its type again: read whole
    for loc in spec.LOCATIONS:
        pipe.zcard(keys[loc])
    wire = [job.encode("utf-8", "surrogateescape") for job in candidates]
    for loc in locations:
        if loc in mended and loc in restored:
            pipe.dump(keys[loc])
        elif loc in mended:
            pipe.zrange(keys[loc], 0, -1, withscores=True)
        elif wire:
            pipe.zmscore(keys[loc], wire)  # every candidate's score in one command a location
    rows = sorted(touched.rows)
    for job in rows:
        pipe.hgetall((head + "job:" + job).encode("utf-8", "surrogateescape"))
    lanes = sorted(touched.lanes)
    for group in lanes:
        pipe.zrange(keyspace.lane_key(name, group), 0, -1, withscores=True)
    for part in SMALL:
        (pipe.lrange(keys[part], 0, -1) if part == "ring" else
         pipe.smembers(keys[part]) if part == "paused" else pipe.hgetall(keys[part]))
    outside = sorted(touched.outside)
    for key in outside:
        pipe.exists(key)
    replies = iter(pipe.execute(raise_on_error=False))
    # snapshot.lua's stray keys: those untouched stay as they were; a touched one is
    # stray when it is of another type than its grammar's, or outside the grammar
    stray = was_stray - touched.names
    sizes: dict[Place, int] = {}
    for loc in spec.LOCATIONS:
        reply = next(replies)
        if _wrong_type(reply):
            stray.add(keys[loc])
            reply = 0
        sizes[loc] = int(reply)
    members: dict[tuple[Place, str], Score | None] = {}
    whole: dict[str, Entries] = {}
    for loc in locations:
        reply = next(replies) if loc in mended or wire else ()
        if keys[loc] in stray:  # spoiled: it holds nothing a snapshot shows
            whole[loc] = ()
            continue
        if isinstance(reply, Exception):
            raise _Doubt
        if loc in mended and loc in restored:
            dump, shown = restored[loc]
            if reply != dump or shown is None:
                raise _Doubt  # not what the spoil took: read whole
            whole[loc] = shown
            continue
        if loc in mended:
            whole[loc] = zset_order((_text(m), norm_score(s)) for m, s in reply)
            continue
        if not sizes[loc] and before.size(loc):  # emptied: every entry known, none to place one by one
            whole[loc] = ()
            continue
        for job, score in zip(candidates, reply, strict=True):
            members[(loc, job)] = None if score is None else norm_score(score)
    row_of: dict[str, Any] = {}
    for job in rows:
        reply = next(replies)
        if _wrong_type(reply):
            stray.add(head + "job:" + job)
            reply = {}
        row_of[job] = tuple(sorted(_fields(reply).items())) or None
    was = dict(before.lanes)  # the lanes, not ``before.index``: that is every location
    sizes.update({("lane", g): len(e) for g, e in was.items() if g not in touched.lanes})
    for group in lanes:
        reply = next(replies)
        if _wrong_type(reply):
            stray.add(keyspace.lane_key(name, group))
            reply = []
        now = {_text(m): norm_score(s) for m, s in reply}
        members.update({(("lane", group), m): now.get(m) for m in dict(was.get(group, ())).keys() | now.keys()})
        sizes[("lane", group)] = len(now)
    small: dict[str, object] = {}
    for part in SMALL:
        reply = next(replies)
        if _wrong_type(reply):
            stray.add(keys[part])
            reply = [] if part in ("ring", "paused") else {}
        value = _small(part, reply)
        if value is None:
            raise _Doubt
        small[part] = value
    for key in outside:
        if _wrong_type(reply := next(replies)) or reply:
            stray.add(key)
    small["stray"] = tuple(sorted(stray))
    return Change(name, members, row_of, {p: n for p, n in sizes.items() if n}, small, whole)


def _text(value: Any) -> str:
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else str(value)


def _fields(flat: Mapping[Any, Any]) -> dict[str, bytes]:
    return {_text(f): bytes(v) for f, v in flat.items()}


def _small(part: str, reply: Any) -> Any:
    """A small key's value as the snapshot holds it; ``None`` where the snapshot would
    call the key stray (a counter with another field or a value that is no count, a lane
    hash value that is no integer)."""
    if part == "ring":
        return tuple(map(_text, reply))
    if part == "paused":
        return tuple(sorted(map(_text, reply)))
    fields = _fields(reply)
    if part in COUNTERS:
        count = fields.pop("count", b"0")
        return None if fields or canonical_int(count) is None else int(count)
    if not all(canonical_int(v.removeprefix(b"-")) is not None for v in fields.values()):
        return None
    return tuple(sorted((g, int(v)) for g, v in fields.items()))


class Kept:
    """A queue's last snapshot, patched in place of a rebuild (``emq_model.change.apply``:
    a step costs what its change names)."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot

    def apply(self, change: Change) -> Snapshot | None:
        """The snapshot after ``change`` (INC-3), kept; ``None`` when a place's patched
        cardinality is not the change's (a member moved that no candidate named: a
        doubt, read whole by the caller)."""
        after = apply(self.snapshot, change)
        if sizes_of(after) != {place: n for place, n in change.sizes.items() if n}:
            return None
        self.snapshot = after
        return after

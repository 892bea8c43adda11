"""A step's change to one queue's keyspace (specs/lifecycle.md INC-1..4): what a step
wrote, by member, row and small key, so a step is judged by what it touched rather than
by the whole queue.

``between`` computes it exactly by diffing two whole snapshots: the reference every
other producer of a ``Change`` (the model's own bookkeeping, a target's read of the keys
a step wrote) must agree with. ``apply`` replays it on the snapshot before the step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

from .snapshot import DEFERRABLE, LANE_HASHES, SPAN, Counts, Deferred, Entries, Patched, Place, Row, Score, Snapshot, patched_entries, zset_order
from .spec import LOCATIONS

SMALL = ("ring", "paused", *LANE_HASHES, "completed", "failed", "stray")
"""The keys a change carries whole (INC-2): few, short, read in one round trip."""


@dataclass(frozen=True)
class Change:
    """INC-1: ``members`` maps each ``(place, member)`` a step may have written to its
    score after the step, or ``None`` when absent; ``rows`` maps each row id it may have
    written to its fields after (sorted), or ``None`` when absent; ``sizes`` holds every
    place's cardinality after the step (a place absent from ``sizes`` is empty: an empty
    set is no key). ``small`` holds the small keys whole (``SMALL``), as the snapshot
    after the step has them. ``whole`` holds the locations the step replaced at once (an
    operator's spoil empties one, a mend puts one back: FLT-4), by their entries after
    it; ``members`` names no member of these. A key a change names but the step did not
    write is allowed (a producer may over-approximate); a key the step wrote and the
    change omits is not.
    """

    queue: str
    members: Mapping[tuple[Place, str], Score | None]
    rows: Mapping[str, Row | None]
    sizes: Mapping[Place, int]
    small: Mapping[str, object]
    whole: Mapping[str, Entries] = field(default_factory=dict)

    def touched(self) -> set[str]:
        """Every id the change names, as a member or a row (a whole location's members
        apart: ``moved_whole``)."""
        return {m for _, m in self.members} | set(self.rows)


def moved_whole(before: Snapshot, after: Snapshot, places: Iterable[str]) -> set[str]:
    """The ids held before or after in each of ``places`` (locations replaced whole)
    whose entries are not the same: a location put back as it was moved none of them."""
    out: set[str] = set()
    for place in places:
        was, now = before.location(place), after.location(place)
        if was is not now and was != now:
            out.update(before.index[place].keys(), after.index[place].keys())
    return out


def _by_place(snapshot: Snapshot) -> dict[Place, tuple[tuple[str, Score], ...]]:
    """Every non-empty sorted set of ``snapshot`` by place, as its entries."""
    out: dict[Place, tuple[tuple[str, Score], ...]] = {loc: snapshot.location(loc) for loc in LOCATIONS if snapshot.location(loc)}
    out.update({("lane", g): e for g, e in snapshot.lanes})
    return out


def sizes_of(snapshot: Snapshot) -> dict[Place, int]:
    """Every non-empty place's cardinality in ``snapshot`` (a change's ``sizes``)."""
    out: dict[Place, int] = {loc: n for loc in LOCATIONS if (n := snapshot.size(loc))}
    out.update({("lane", g): len(e) for g, e in snapshot.lanes if e})
    return out


def small_keys(snapshot: Snapshot) -> dict[str, object]:
    """The small keys of ``snapshot`` whole (``SMALL``)."""
    return {name: getattr(snapshot, name) for name in SMALL}


def between(before: Snapshot, after: Snapshot) -> Change:
    """INC-3: the exact change from ``before`` to ``after`` (same queue): every member
    and row that differs, no other; ``apply(before, between(before, after)) == after``."""
    was, now = _by_place(before), _by_place(after)
    members: dict[tuple[Place, str], Score | None] = {}
    for place in was.keys() | now.keys():
        old, new = was.get(place, ()), now.get(place, ())
        if old != new:  # the whole set compared at once: most of a deep queue's did not move
            scores = after.index.get(place, {})
            for m in sorted({m for m, _ in set(old) ^ set(new)}):
                members[(place, m)] = scores.get(m)
    new_rows = after.row_index
    rows = {} if before.rows == after.rows else \
        {i: new_rows.get(i) for i in sorted({i for i, _ in set(before.rows) ^ set(after.rows)})}
    return Change(after.queue, members, rows, sizes_of(after), small_keys(after))


def change_from(made: tuple[Snapshot, Change, Snapshot] | None, before: Snapshot, after: Snapshot) -> Change | None:
    """The change of ``made`` (a producer's ``last_change``: the snapshot it was applied
    to, the change, the snapshot it made) when it brought the very ``before`` to the very
    ``after`` (by identity: the objects a step judged), else None (a snapshot built or
    read whole, or a pair it does not join)."""
    return made[1] if made is not None and made[0] is before and made[2] is after else None


def composed(changes: Sequence[Change]) -> Change | None:
    """One change for a run of them, each from the snapshot the one before it made (INC-1):
    a key at its value after the last that names it, the sizes and small keys the last's;
    None for no change or when one replaced a location whole."""
    if not changes or any(change.whole for change in changes):
        return None
    members: dict[tuple[Place, str], Score | None] = {}
    rows: dict[str, Row | None] = {}
    for change in changes:
        members.update(change.members)
        rows.update(change.rows)
    last = changes[-1]
    return Change(last.queue, members, rows, last.sizes, last.small)


def apply(before: Snapshot, change: Change) -> Snapshot:
    """INC-3: the snapshot after the step, from the one before and the step's change: a
    set or the rows the change names are made on first read from the ones before and the
    keys it moved (``Snapshot.deferral``), so a step no one reads whole costs what it wrote;
    a change of many keys (a fill's) and a lane (few members) are made now; a location
    replaced whole is as the change names it."""
    index, rows = before.index, before.row_index
    moved: dict[Place, list[tuple[str, Score | None]]] = {}
    for (place, m), score in change.members.items():
        if index.get(place, {}).get(m) != score:  # a key named at the value it held did not move
            moved.setdefault(place, []).append((m, score))
    written = {i: row for i, row in change.rows.items() if rows.get(i) != row}
    held = before.__dict__
    deferred = dict(held.get("_deferred", {}))  # a set no step made yet, untouched: as it was to be made
    made = {name: held[name] for name in DEFERRABLE if name in held}
    for name, keys in ((loc, [m for m, _ in moved[loc]]) for loc in LOCATIONS if loc in moved):
        deferred[name] = before.deferral(name, keys)
        made.pop(name, None)
    if written:
        deferred["rows"] = before.deferral("rows", written)
        made.pop("rows", None)
    for loc, entries in change.whole.items():
        made[loc] = entries
        deferred.pop(loc, None)
    lanes = dict(before.lanes)
    for place, members in moved.items():
        if isinstance(place, tuple):
            was = index.get(place, {})
            lanes[place[1]] = patched_entries(Deferred(lanes.get(place[1], ()), was, frozenset(m for m, _ in members)),
                                              Patched(was, dict(members)))
    small = change.small
    after = Snapshot.deferred(
        deferred, queue=before.queue, **made,
        lanes=tuple(sorted((g, e) for g, e in lanes.items() if e)),
        completed=_int(small["completed"]), failed=_int(small["failed"]), stray=_strs(small["stray"]),
        ring=_strs(small["ring"]), paused=_strs(small["paused"]), glimit=_counts(small["glimit"]),
        gactive=_counts(small["gactive"]), gweight=_counts(small["gweight"]))
    _carry(before, after, moved, written, change.whole)
    for name, value in deferred.items():
        if len(value.keys) > SPAN:
            getattr(after, name)  # a change of many keys: made now, by the step that wrote them
    return after


def _carry(before: Snapshot, after: Snapshot, moved: Mapping[Place, list[tuple[str, Score | None]]],
           rows: Mapping[str, Row | None], whole: Mapping[str, Entries]) -> None:
    """Give ``after`` its look-ups (``index``, ``row_index``) from ``before``'s, patched
    with what moved, instead of building them from every member: a set or the rows the
    step left alone are shared (a snapshot's look-ups are never written), one it touched
    is ``Patched``, so a step's cost does not grow with the queue (INC-3); a location
    replaced whole is looked up anew."""
    was = before.index
    index: dict[Place, Mapping[str, Score]] = {}
    places: list[Place] = [*LOCATIONS, *(("lane", g) for g, _ in after.lanes)]
    for place in places:
        if isinstance(place, str) and place in whole:
            index[place] = dict(whole[place])
        else:
            index[place] = Patched(was.get(place, {}), dict(moved[place])) if place in moved else was[place]
    by_id = Patched(before.row_index, rows) if rows else before.row_index
    after.__dict__.update(index=index, row_index=by_id)  # the cached properties' own slots


def _int(value: object) -> int:
    assert isinstance(value, int)
    return value


def _strs(value: object) -> tuple[str, ...]:
    assert isinstance(value, tuple)
    return value


def _counts(value: object) -> Counts:
    assert isinstance(value, tuple)
    return value


def agree(before: Snapshot, mine: Change, theirs: Change) -> bool:
    """INC-4 (INV-8 by what changed): from the same ``before``, the two changes lead to
    equal snapshots. Every key either side names is compared at its value after; a key
    neither names is unchanged on both sides, so equal."""
    if mine.small != theirs.small or dict(mine.sizes) != dict(theirs.sizes):
        return False
    replaced = mine.whole.keys() | theirs.whole.keys()
    if any(_entries(before, mine, loc) != _entries(before, theirs, loc) for loc in replaced):
        return False
    was, old_rows = before.index, before.row_index

    def score(change: Change, key: tuple[Place, str]) -> Score | None:
        if key in change.members:
            return change.members[key]
        return was.get(key[0], {}).get(key[1])

    def row(change: Change, i: str) -> Row | None:
        return change.rows[i] if i in change.rows else old_rows.get(i)

    if any(score(mine, key) != score(theirs, key) for key in mine.members.keys() | theirs.members.keys()
           if key[0] not in replaced):
        return False
    return all(row(mine, i) == row(theirs, i) for i in mine.rows.keys() | theirs.rows.keys())


def _entries(before: Snapshot, change: Change, loc: str) -> Entries:
    """The entries of the location ``loc`` after ``change`` from ``before``."""
    if loc in change.whole:
        return change.whole[loc]
    held: dict[str, Score | None] = dict(before.index[loc])
    held.update({m: score for (place, m), score in change.members.items() if place == loc})
    return zset_order((m, score) for m, score in held.items() if score is not None)



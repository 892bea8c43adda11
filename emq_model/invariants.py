"""The invariants INV-1..7 of specs/lifecycle.md §7 and the lane invariants INV-9..14 of
§10, checked on a snapshot.

``check_invariants`` never stops at the first violation: it reports every one, each naming the
invariant, the id (or key) and what was seen, so a counterexample explains itself.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Mapping, NamedTuple

from .branded_id import is_valid
from .change import Change, moved_whole
from .errors import ArgError
from .snapshot import Place, Row, Score, Snapshot, canonical_int
from .spec import LIMITS, ROW_FIELDS, STATE_OF, check_value

_REQUIRED = ("state", "attempts", "payload")
_REQUIRED_SET = frozenset(_REQUIRED)
_FIELDS = frozenset(ROW_FIELDS)


class Violation(NamedTuple):
    """One broken invariant: its number (``INV-3``), the id or key, and what was seen."""

    invariant: str
    id: str | None
    seen: str

    def __str__(self) -> str:
        return f"{self.invariant} {self.id or '-'}: {self.seen}"


def _attempts(row: dict[str, bytes]) -> int | None:
    return canonical_int(row.get("attempts"))


def check_invariants(
    snapshot: Snapshot, previous: Snapshot | None = None, *, born: int = 0, one_step: bool = True
) -> list[Violation]:
    """Every violation of INV-1..7 and INV-9..14 in ``snapshot``; INV-5, INV-7 and
    INV-12..14 also compare with the ``previous`` snapshot of the same queue when it is
    given. ``born`` bounds how many jobs may have been created since ``previous`` (0 when
    nothing ran in between but one step): a job created and completed between two
    snapshots is in neither, yet counts. INV-12..14 judge one transition: pass
    ``one_step=False`` when other calls may have run between the two snapshots."""
    out: list[Violation] = []
    rows = snapshot.row_map()
    held: dict[str, list[str]] = {}
    for loc, member, score in snapshot.members():
        held.setdefault(member, []).append(loc)
        out.extend(_member_of(loc, member, score))

    for member, locs in sorted(held.items()):
        if len(locs) > 1:
            out.append(Violation("INV-1", member, f"is in {' and in '.join(locs)}"))
        if member not in rows:
            out.append(Violation("INV-2", member, f"is in {locs[0]} but has no row (orphan member)"))
            continue
        state = rows[member].get("state")
        expected = STATE_OF[locs[0]].encode()
        if len(locs) == 1 and state != expected:
            out.append(Violation("INV-3", member, f"row state is {state!r} but the id is in {locs[0]}"))

    for job_id, row in sorted(rows.items()):
        out.extend(_row_of(job_id, row, held.get(job_id, [])))

    for key in snapshot.stray:
        out.append(Violation("INV-6", key, "key under the queue prefix is outside the grammar"))
    for name in ("completed", "failed"):
        if getattr(snapshot, name) < 0:
            out.append(Violation("INV-7", None, f"counter {name} is {getattr(snapshot, name)}"))

    out.extend(_lanes(snapshot, rows))
    if previous is not None:
        out.extend(_against(snapshot, previous, born))
        if one_step:
            out.extend(_lane_step(snapshot, previous))
    return out


def beyond(theirs: Snapshot, mine: Snapshot, previous: Snapshot | None = None) -> list[Violation]:
    """The violations of ``theirs`` (a target's snapshot) that ``mine`` (the model's after
    the same steps) does not show, word for word: what the target broke. What both show
    is the operator's damage (a row deleted, a key spoiled or written by hand), never the
    target's (lifecycle.md FLT-2)."""
    shared = set(check_invariants(mine, previous))
    return [v for v in check_invariants(theirs, previous) if v not in shared]


def _group(raw: bytes | str | None) -> str | None:
    """A well-formed group name (LANE-2), else ``None``."""
    try:
        return check_value("group", "group", raw.decode("ascii") if isinstance(raw, bytes) else raw)
    except (ArgError, UnicodeDecodeError):
        return None


def serviceable(snapshot: Snapshot) -> set[str]:
    """LANE-4: the lanes that hold a member, are not paused and are below their limit."""
    limit, active = dict(snapshot.glimit), dict(snapshot.gactive)
    return {g for g, entries in snapshot.lanes
            if entries and g not in snapshot.paused and (g not in limit or active.get(g, 0) < limit[g])}


def _lanes(snapshot: Snapshot, rows: dict[str, dict[str, bytes]]) -> list[Violation]:
    """INV-9 (a grouped job pends in its own lane only), INV-10 (the ring is exactly the
    serviceable lanes, once each), INV-11 (gactive counts the active jobs of each group;
    lane hashes hold only canonical non-default values of well-formed groups)."""
    out: list[Violation] = []
    for g, entries in snapshot.lanes:
        for member, _ in entries:
            said = rows.get(member, {}).get("group")
            if member in rows and said != g.encode():
                out.append(Violation("INV-9", member, f"is in lane {g} but its row says group {said!r}"))
    for member, _ in snapshot.pending:
        if "group" in rows.get(member, {}):
            out.append(Violation("INV-9", member, f"is grouped ({rows[member]['group']!r}) but in the plain pending set"))
    for job_id, row in sorted(rows.items()):
        if "group" in row and _group(row["group"]) is None:
            out.append(Violation("INV-9", job_id, f"row group {row['group']!r} is not a well-formed group"))
    return out + lane_keys(snapshot, active_groups(rows[m]["group"] for m, _ in snapshot.active
                                                   if "group" in rows.get(m, {})))


def active_groups(groups: Iterable[bytes]) -> Counter[str]:
    """How many active jobs' rows say each group (``groups``: the group field of each
    active job's row that has one), as INV-11 counts them."""
    return Counter(raw.decode("latin-1") for raw in groups)


def lane_keys(snapshot: Snapshot, counted: Mapping[str, int]) -> list[Violation]:
    """INV-10 and INV-11: the ring and the lane hashes of ``snapshot`` (of its lanes only
    whether each holds a member is read), ``counted`` the active jobs per group
    (``active_groups``)."""
    out: list[Violation] = []
    ring = list(snapshot.ring)
    if ring or snapshot.lanes:  # else no lane is serviceable and none is on the ring
        for g in sorted({g for g in ring if ring.count(g) > 1}):
            out.append(Violation("INV-10", g, f"is on the ring {ring.count(g)} times"))
        want = serviceable(snapshot)
        for g in sorted(want - set(ring)):
            out.append(Violation("INV-10", g, "is serviceable but not on the ring"))
        for g in sorted(set(ring) - want):
            out.append(Violation("INV-10", g, "is on the ring but not serviceable (empty, paused or at its limit)"))

    if not (counted or ring or snapshot.paused or snapshot.glimit or snapshot.gactive or snapshot.gweight):
        return out  # no lane key and no grouped job active: nothing below can break
    gactive = dict(snapshot.gactive)
    for g in sorted(gactive.keys() | counted.keys()):
        if gactive.get(g, 0) != counted.get(g, 0):
            out.append(Violation("INV-11", g, f"gactive is {gactive.get(g, 0)} but {counted.get(g, 0)} of its jobs are active"))
    bounds = {"glimit": (1, LIMITS["limit_max"]), "gactive": (1, None), "gweight": (2, LIMITS["weight_max"])}
    for name, (lo, hi) in bounds.items():
        for g, v in getattr(snapshot, name):
            if v < lo or (hi is not None and v > hi):
                out.append(Violation("INV-11", g, f"{name} holds {v}, outside [{lo}, {hi or '...'}]"))
    named = [*ring, *snapshot.paused, *(g for name in bounds for g, _ in getattr(snapshot, name))]
    for g in sorted({g for g in named if _group(g) is None}):
        out.append(Violation("INV-11", g, "a lane key names a group that is not well-formed"))
    return out


def _lane_step(snapshot: Snapshot, previous: Snapshot, among: Iterable[str] | None = None) -> list[Violation]:
    """INV-12 (a paused lane is never served), INV-13 (a lane at its limit is never
    served), INV-14 (one grouped claim is one turn of the ring: it serves the first lane
    on the ring that held a job whose row says its group, at most its weight)."""
    out: list[Violation] = []
    if not previous.lanes:  # no lane held a job before the step: none was served
        return out
    now, rows_now = snapshot.index, snapshot.row_index
    served: dict[str, list[str]] = {}
    # Served from lane g: it left g, is active, and its row says g. (An id reused beside a
    # lane's orphan, lifecycle.md §8, is in two places: its orphan copy is dropped from
    # one lane, or stays there, while the job itself goes active from elsewhere.) Only a
    # member the step wrote can have left a lane (INC-1): ``among`` names them.
    was = ((g, m) for g, entries in previous.lanes for m, _ in entries) if among is None else \
        ((p[1], m) for m in sorted(among) for p, idx in previous.index.items() if isinstance(p, tuple) and m in idx)
    for g, member in was:
        if (member in now["active"] and member not in now.get(("lane", g), {})
                and dict(rows_now.get(member, ())).get("group") == g.encode()):
            served.setdefault(g, []).append(member)
    for members in served.values():
        members.sort()
    if not served:
        return out
    limit, active, weight = dict(previous.glimit), dict(previous.gactive), dict(previous.gweight)
    for g, members in sorted(served.items()):
        if g in previous.paused:
            out.append(Violation("INV-12", g, f"paused, yet served {', '.join(members)}"))
        if g in limit and len(members) > limit[g] - active.get(g, 0):
            out.append(Violation("INV-13", g, f"limit {limit[g]} with {active.get(g, 0)} active, yet served {len(members)}"))
        if len(members) > weight.get(g, 1):
            out.append(Violation("INV-14", g, f"served {len(members)} in one turn, more than its weight {weight.get(g, 1)}"))
    if len(served) > 1:
        out.append(Violation("INV-14", None, f"one step served several lanes: {sorted(served)}"))
        return out
    rows = previous.row_index
    due = next((g for g in previous.ring
                if any(dict(rows.get(m, ())).get("group") == g.encode() for m in previous.index.get(("lane", g), ()))),
               None)
    (g,) = served
    if g != due:
        out.append(Violation("INV-14", g, f"was served, but the ring's turn was {due} (ring {list(previous.ring)})"))
    return out


def _against(snapshot: Snapshot, previous: Snapshot, born: int, among: Iterable[str] | None = None) -> list[Violation]:
    """INV-5 (attempts never decrease) and INV-7 (counters move with the jobs); ``among``:
    the ids the step wrote (INC-1), the only ones that can have moved (None: every id)."""
    out: list[Violation] = []
    before, now = previous.row_index, snapshot.row_index
    for job_id in sorted(i for i in (now if among is None else set(among) & now.keys()) if now[i] is not before.get(i)):
        was = before.get(job_id)  # a row the step left as it was (the same object) kept its attempts
        now_attempts = _attempts(dict(now[job_id]))
        then_attempts = _attempts(dict(was)) if was is not None else None
        if now_attempts is not None and then_attempts is not None and now_attempts < then_attempts:
            out.append(Violation("INV-5", job_id, f"attempts went from {then_attempts} to {now_attempts}"))

    for name in ("completed", "failed"):
        then, now_count = getattr(previous, name), getattr(snapshot, name)
        if now_count < then:
            out.append(Violation("INV-7", None, f"counter {name} went from {then} to {now_count}"))
    # Places left, not ids: an id reused beside a lane's orphan (lifecycle.md §8) is in
    # two places, and its completion empties one of them. With one place per id (INV-1)
    # this is the number of ids that vanished.
    if among is None:
        places = Counter(m for _, m, _ in previous.members())
        places.subtract(m for _, m, _ in snapshot.members())
    else:
        places = Counter({m: sum(m in idx for idx in previous.index.values())
                          - sum(m in idx for idx in snapshot.index.values()) for m in among})
    vanished = sum(n for n in places.values() if n > 0)
    if snapshot.completed - previous.completed > vanished + born:
        out.append(Violation("INV-7", None, f"completed grew by {snapshot.completed - previous.completed} "
                                            f"but only {vanished} jobs vanished" + (f" and {born} were born" if born else "")))
    was_dead, dead = previous.index["dead"], snapshot.index["dead"]
    entered = len(set(dead if among is None else set(among) & dead.keys()) - was_dead.keys())
    if snapshot.failed - previous.failed > entered:
        out.append(Violation("INV-7", None, f"failed grew by {snapshot.failed - previous.failed} "
                                            f"but only {entered} jobs entered dead"))
    return out


Carried = dict[str, tuple[Violation, ...]]
"""The violations of INV-1..6 and INV-9 that one id's members and row make in a
snapshot, by id (no entry: none): what ``check_step`` carries from step to step."""


def of_ids(snapshot: Snapshot, ids: Iterable[str]) -> Carried:
    """The per-id violations (``Carried``) of ``ids`` in ``snapshot``: each depends only on
    the id's members and row, so a step changes those of the ids it wrote, no other."""
    out: Carried = {}
    for job_id in ids:
        found = _of_id(snapshot, job_id)
        if found:
            out[job_id] = tuple(found)
    return out


def of_all(snapshot: Snapshot) -> Carried:
    """``of_ids(snapshot, snapshot.ids())`` in one pass: each id's places found by set
    operations over the look-ups, and an id held in one place with a row judged by
    ``_sound`` (a deep queue's rows repeat, so a row's verdict is made once per place);
    any other id, and one ``_sound`` does not pass, by ``_of_id``, word for word."""
    place_of: dict[str, Place] = {}
    twice: set[str] = set()
    for where, held in snapshot.index.items():
        twice.update(place_of.keys() & held.keys())
        place_of.update(dict.fromkeys(held, where))
    index, rows = snapshot.index, snapshot.row_index
    verdicts: dict[tuple[Place, Row], bool] = {}
    out: Carried = {}
    for job_id in place_of.keys() | rows.keys():
        place, row = place_of.get(job_id), rows.get(job_id)
        if place is not None and row is not None and job_id not in twice:
            sound = verdicts.get((place, row))
            if sound is None:
                sound = verdicts[(place, row)] = _sound(place, row)
            if sound and _placed(place, index[place][job_id]) and is_valid(job_id, "JOB"):
                continue
        found = _of_id(snapshot, job_id)
        if found:
            out[job_id] = tuple(found)
    return out


def _placed(place: Place, score: Score) -> bool:
    """Whether ``_member_of`` finds nothing in a member's score at ``place``."""
    if isinstance(place, tuple) or place in ("pending", "dead"):
        return not score != 0
    return isinstance(score, int) and not score < 0


def _sound(place: Place, row: Row) -> bool:
    """Whether ``_of_id`` finds nothing in the row of an id held in ``place`` alone, its
    id and score apart (INV-3, INV-5, INV-6, INV-9)."""
    loc = "pending" if isinstance(place, tuple) else place
    fields = dict(row)
    if fields.get("state") != STATE_OF[loc].encode() or not fields.keys() <= _FIELDS or not _REQUIRED_SET <= fields.keys():
        return False
    attempts = canonical_int(fields.get("attempts"))
    if attempts is None or (loc == "active" and attempts < 1):
        return False
    group = fields.get("group")
    if isinstance(place, tuple):
        return group == place[1].encode() and _group(group) is not None
    return group is None or (place != "pending" and _group(group) is not None)


def check_whole(snapshot: Snapshot, previous: Snapshot | None = None) -> tuple[list[Violation], Carried]:
    """``check_invariants(snapshot, previous)`` (the same violations, as a multiset) with
    the per-id ones (``of_all``), in one pass over the ids: what ``check_step`` finds
    when a step named every id."""
    carried = of_all(snapshot)
    out = [v for found in carried.values() for v in found]
    out.extend(_keys(snapshot))
    if previous is not None:
        out.extend(_against(snapshot, previous, 0))
        out.extend(_lane_step(snapshot, previous))
    return out, carried


def _member_of(loc: str, member: str, score: Score) -> list[Violation]:
    """The violations of one member of ``loc`` (INV-4, INV-6)."""
    out: list[Violation] = []
    if not is_valid(member, "JOB"):
        out.append(Violation("INV-6", member, f"member of {loc} is not a well-formed JOB id"))
    if loc in ("pending", "dead") and score != 0:
        out.append(Violation("INV-4", member, f"score in {loc} is {score}, not 0"))
    elif not isinstance(score, int) or score < 0:
        out.append(Violation("INV-4", member, f"score in {loc} is {score}, not a non-negative integer"))
    return out


def _row_of(job_id: str, row: Mapping[str, bytes], locs: list[str]) -> list[Violation]:
    """The violations of ``job_id``'s row (INV-2, INV-5, INV-6), held in ``locs``."""
    out: list[Violation] = []
    if not locs:
        out.append(Violation("INV-2", job_id, f"row (state {row.get('state')!r}) is in no location (orphan row)"))
    if not is_valid(job_id, "JOB"):
        out.append(Violation("INV-6", job_id, "row key does not end in a well-formed JOB id"))
    extra = sorted(set(row) - set(ROW_FIELDS))
    missing = [f for f in _REQUIRED if f not in row]
    if extra or missing:
        out.append(Violation("INV-6", job_id, f"row fields: extra {extra}, missing {missing}"))
    attempts = canonical_int(row.get("attempts"))
    if attempts is None:
        out.append(Violation("INV-5", job_id, f"attempts is {row.get('attempts')!r}, not a canonical integer"))
    elif "active" in locs and attempts < 1:
        out.append(Violation("INV-5", job_id, f"active with attempts {attempts}"))
    return out


def _of_id(snapshot: Snapshot, job_id: str) -> list[Violation]:
    """``check_invariants``'s per-id violations of ``job_id``, the same words."""
    out: list[Violation] = []
    held = [(place, idx[job_id]) for place, idx in snapshot.index.items() if job_id in idx]
    locs = ["pending" if isinstance(place, tuple) else place for place, _ in held]
    raw = snapshot.row_index.get(job_id)
    row = dict(raw) if raw is not None else None
    for loc, (_, score) in zip(locs, held):
        out.extend(_member_of(loc, job_id, score))
    if len(locs) > 1:
        out.append(Violation("INV-1", job_id, f"is in {' and in '.join(locs)}"))
    if locs and row is None:
        out.append(Violation("INV-2", job_id, f"is in {locs[0]} but has no row (orphan member)"))
    elif len(locs) == 1 and row is not None and row.get("state") != STATE_OF[locs[0]].encode():
        out.append(Violation("INV-3", job_id, f"row state is {row.get('state')!r} but the id is in {locs[0]}"))
    if row is not None:
        out.extend(_row_of(job_id, row, locs))
        for place, _ in held:
            if isinstance(place, tuple) and row.get("group") != place[1].encode():
                out.append(Violation("INV-9", job_id, f"is in lane {place[1]} but its row says group {row.get('group')!r}"))
        if any(place == "pending" for place, _ in held) and "group" in row:
            out.append(Violation("INV-9", job_id, f"is grouped ({row['group']!r}) but in the plain pending set"))
        if "group" in row and _group(row["group"]) is None:
            out.append(Violation("INV-9", job_id, f"row group {row['group']!r} is not a well-formed group"))
    return out


@dataclass
class Since:
    """Per-id violations judged at a snapshot before the previous one (``at``), with what
    the changes after it named: their ids and the locations they replaced whole. While a
    key is spoiled every violation is the operator's (FLT-4), so the machine judges the
    ids again only once it is mended, from here, not at each step of the episode."""

    at: Snapshot
    carried: Carried
    ids: set[str] = field(default_factory=set)
    places: set[str] = field(default_factory=set)

    def add(self, change: Change) -> None:
        """One more step's ``change``."""
        self.ids |= change.touched()
        self.places |= change.whole.keys()

    def judged(self, snapshot: Snapshot, change: Change | None = None) -> Carried:
        """The per-id violations of ``snapshot``, where the changes added (and ``change``)
        led from ``at``: only the ids they named, and those of a location replaced by
        other entries, judged again."""
        ids, places = self.ids, self.places
        if change is not None:
            ids, places = ids | change.touched(), places | change.whole.keys()
        touched = ids | moved_whole(self.at, snapshot, places)
        if len(touched) * 4 > len(snapshot.row_index):  # most ids moved: one pass
            return of_all(snapshot)
        now = {i: v for i, v in self.carried.items() if i not in touched}
        now.update(of_ids(snapshot, touched))
        return now


def check_step(snapshot: Snapshot, previous: Snapshot, change: Change, carried: Carried | Since,
               against: bool = True) -> tuple[list[Violation], Carried]:
    """``check_invariants(snapshot, previous)`` judged by what the step changed (INC-1):
    ``change`` from ``previous`` to ``snapshot`` (it may name more than the step wrote),
    ``carried`` the per-id violations of ``previous`` (or of an earlier snapshot,
    ``Since``). The same violations as the whole check, as a multiset (the order may
    differ), and the per-id ones of ``snapshot``. ``against=False``:
    ``check_invariants(snapshot)``, no invariant of the step itself (a mended key,
    FLT-4), ``previous`` only the snapshot the change starts from."""
    since = carried if isinstance(carried, Since) else Since(previous, carried)
    now = since.judged(snapshot, change)
    out = [v for found in now.values() for v in found]
    out.extend(_keys(snapshot))
    if against:
        touched = change.touched() | moved_whole(previous, snapshot, change.whole)
        out.extend(_against(snapshot, previous, 0, touched))
        out.extend(_lane_step(snapshot, previous, touched))
    return out, now


def _keys(snapshot: Snapshot) -> list[Violation]:
    """The violations no one id makes: stray keys (INV-6), counters (INV-7), the ring and
    the lane hashes (INV-10, INV-11)."""
    out = [Violation("INV-6", key, "key under the queue prefix is outside the grammar") for key in snapshot.stray]
    for name in ("completed", "failed"):
        if getattr(snapshot, name) < 0:
            out.append(Violation("INV-7", None, f"counter {name} is {getattr(snapshot, name)}"))
    rows = snapshot.row_index
    return out + lane_keys(snapshot, active_groups(value for m in snapshot.index["active"] if m in rows
                                                   for field, value in rows[m] if field == "group"))

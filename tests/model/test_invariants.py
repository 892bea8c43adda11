"""invariants.check_invariants finds every violation it is meant to (specs/lifecycle.md §7, INV-1..7).

Each case starts from a SOUND snapshot the model made, asserts that check_invariants() of it is []
(so the checker cannot pass vacuously), corrupts it by hand (Snapshot.build /
dataclasses.replace) and asserts the exact list of (invariant, id) that check_invariants() reports.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import pytest

from emq_model import invariants, spec
from emq_model.branded_id import encode
from emq_model.invariants import Violation
from emq_model.model import QueueModel
from emq_model.snapshot import Snapshot

Q = "q"
A, P, S, D, C, N = (encode("JOB", n) for n in (1000, 2000, 3000, 4000, 6000, 5000))
ORD = encode("ORD", 7000)
OVERFLOW = "JOBzzzzzzzzzzz"


def make_sound() -> tuple[QueueModel, Snapshot]:
    """One job in each location, one completed, one dead-lettered."""
    m = QueueModel(Q)
    m.enqueue(C, b"c")
    m.claim(10, now=0)
    assert m.complete(C, 1) == "ok"
    m.enqueue(D, b"d")
    m.claim(10, now=0)
    assert m.retry(D, 1, delay_ms=0, max_attempts=1, error=b"boom", now=0) == "dead"
    m.enqueue(A, b"a")
    m.claim(500, now=1000)
    m.enqueue(P, b"p")
    m.schedule(S, b"s", run_at=5000, now=1000)
    return m, m.snapshot()


_, SOUND = make_sound()


def _sound2() -> tuple[Snapshot, Snapshot]:
    """(before, after) of a reap and a re-claim of A: attempts 1 -> 2."""
    m, before = make_sound()
    assert m.reap(now=1500) == 1
    assert m.claim(100, now=1500).id == A
    return before, m.snapshot()


_, SOUND2 = _sound2()


def edit(s: Snapshot, *, sets: dict[str, dict[str, Any]] | None = None,
         rows: dict[str, dict[str, Any] | None] | None = None, **fields: Any) -> Snapshot:
    """``s`` with members set (score) or removed (None), row fields set or removed (None),
    whole rows removed (None), and other fields replaced."""
    locs = {loc: dict(s.location(loc)) for loc in spec.LOCATIONS}
    for loc, changes in (sets or {}).items():
        for member, score in changes.items():
            if score is None:
                locs[loc].pop(member)
            else:
                locs[loc][member] = score
    r = s.row_map()
    for job_id, changes in (rows or {}).items():
        if changes is None:
            r.pop(job_id)
            continue
        r.setdefault(job_id, {})
        for f, v in changes.items():
            if v is None:
                r[job_id].pop(f)
            else:
                r[job_id][f] = v
    out = Snapshot.build(s.queue, {loc: d.items() for loc, d in locs.items()}, r, s.completed, s.failed, s.stray)
    return dataclasses.replace(out, **fields) if fields else out


def pairs(violations: list[Violation]) -> list[tuple[str, str | None]]:
    return sorted(((v.invariant, v.id) for v in violations), key=repr)


# (name, sound, previous, corrupt(sound) -> corrupted, expected (invariant, id) list)
Corruption = tuple[str, Snapshot, Snapshot | None, Callable[[Snapshot], Snapshot], list[tuple[str, str | None]]]
CASES: list[Corruption] = [
    # INV-1
    ("id-in-pending-and-active", SOUND, None, lambda s: edit(s, sets={"pending": {A: 0}}), [("INV-1", A)]),
    ("id-in-schedule-and-dead", SOUND, None, lambda s: edit(s, sets={"schedule": {D: 10}}), [("INV-1", D)]),
    ("id-in-all-four", SOUND, None,
     lambda s: edit(s, sets={"active": {P: 9}, "schedule": {P: 9}, "dead": {P: 0}}),
     [("INV-1", P), ("INV-5", P)]),  # P (attempts 0) is also in active
    # INV-2
    ("orphan-row", SOUND, None, lambda s: edit(s, sets={"pending": {P: None}}), [("INV-2", P)]),
    ("orphan-row-was-active", SOUND, None, lambda s: edit(s, sets={"active": {A: None}}), [("INV-2", A)]),
    ("orphan-member", SOUND, None, lambda s: edit(s, rows={P: None}), [("INV-2", P)]),
    ("orphan-member-in-active", SOUND, None, lambda s: edit(s, rows={A: None}), [("INV-2", A)]),
    ("orphan-member-new-id", SOUND, None, lambda s: edit(s, sets={"schedule": {N: 7}}), [("INV-2", N)]),
    # INV-3
    ("state-active-in-pending", SOUND, None, lambda s: edit(s, rows={P: {"state": b"active"}}), [("INV-3", P)]),
    ("state-location-name-not-state", SOUND, None, lambda s: edit(s, rows={S: {"state": b"schedule"}}),
     [("INV-3", S)]),
    ("state-pending-in-dead", SOUND, None, lambda s: edit(s, rows={D: {"state": b"pending"}}), [("INV-3", D)]),
    ("state-str-not-bytes", SOUND, None, lambda s: edit(s, rows={A: {"state": "active"}}), [("INV-3", A)]),
    # INV-4
    ("pending-score-nonzero", SOUND, None, lambda s: edit(s, sets={"pending": {P: 5}}), [("INV-4", P)]),
    ("pending-score-negative", SOUND, None, lambda s: edit(s, sets={"pending": {P: -1}}), [("INV-4", P)]),
    ("dead-score-nonzero", SOUND, None, lambda s: edit(s, sets={"dead": {D: 1}}), [("INV-4", D)]),
    ("dead-score-fraction", SOUND, None, lambda s: edit(s, sets={"dead": {D: 0.5}}), [("INV-4", D)]),
    ("active-score-negative", SOUND, None, lambda s: edit(s, sets={"active": {A: -1}}), [("INV-4", A)]),
    ("active-score-float", SOUND, None, lambda s: edit(s, sets={"active": {A: 1500.5}}), [("INV-4", A)]),
    ("schedule-score-negative", SOUND, None, lambda s: edit(s, sets={"schedule": {S: -5000}}), [("INV-4", S)]),
    ("schedule-score-float", SOUND, None, lambda s: edit(s, sets={"schedule": {S: 0.25}}), [("INV-4", S)]),
    # INV-6: members, row ids, row fields, keys
    ("member-overflowing-id", SOUND, None,
     lambda s: edit(s, sets={"pending": {OVERFLOW: 0}}, rows={OVERFLOW: {"state": b"pending", "attempts": b"0",
                                                                        "payload": b""}}),
     [("INV-6", OVERFLOW), ("INV-6", OVERFLOW)]),
    ("member-other-namespace", SOUND, None,
     lambda s: edit(s, sets={"dead": {ORD: 0}}, rows={ORD: {"state": b"dead", "attempts": b"1", "payload": b""}}),
     [("INV-6", ORD), ("INV-6", ORD)]),
    ("member-malformed-no-row", SOUND, None, lambda s: edit(s, sets={"active": {"JOB-1": 9}}),
     [("INV-2", "JOB-1"), ("INV-6", "JOB-1")]),
    ("row-id-malformed-no-member", SOUND, None,
     lambda s: edit(s, rows={"job": {"state": b"pending", "attempts": b"0", "payload": b""}}),
     [("INV-2", "job"), ("INV-6", "job")]),
    ("row-extra-field", SOUND, None, lambda s: edit(s, rows={P: {"foo": b"1"}}), [("INV-6", P)]),
    ("row-missing-payload", SOUND, None, lambda s: edit(s, rows={S: {"payload": None}}), [("INV-6", S)]),
    ("row-missing-state", SOUND, None, lambda s: edit(s, rows={P: {"state": None}}), [("INV-3", P), ("INV-6", P)]),
    ("row-missing-attempts", SOUND, None, lambda s: edit(s, rows={P: {"attempts": None}}),
     [("INV-5", P), ("INV-6", P)]),
    ("stray-key", SOUND, None, lambda s: dataclasses.replace(s, stray=("emq:{q}:junk",)),
     [("INV-6", "emq:{q}:junk")]),
    ("stray-keys", SOUND, None, lambda s: dataclasses.replace(s, stray=("emq:{q}:job:bad", "emq:{q}:pending:x")),
     [("INV-6", "emq:{q}:job:bad"), ("INV-6", "emq:{q}:pending:x")]),
    # INV-5
    *[(f"attempts-{raw!r}", SOUND, None, lambda s, raw=raw: edit(s, rows={P: {"attempts": raw}}), [("INV-5", P)])
      for raw in (b"01", b"00", b"-1", b"+1", b" 1", b"1 ", b"1.0", b"", b"0x1", b"\xd9\xa1")],
    ("active-attempts-non-canonical", SOUND, None, lambda s: edit(s, rows={A: {"attempts": b"01"}}),
     [("INV-5", A)]),
    ("active-with-attempts-0", SOUND, None, lambda s: edit(s, rows={A: {"attempts": b"0"}}), [("INV-5", A)]),
    ("attempts-decrease", SOUND2, SOUND2, lambda s: edit(s, rows={A: {"attempts": b"1"}}), [("INV-5", A)]),
    ("attempts-reset-to-0-in-dead", SOUND, SOUND, lambda s: edit(s, rows={D: {"attempts": b"0"}}),
     [("INV-5", D)]),
    # INV-7
    ("completed-negative", SOUND, None, lambda s: dataclasses.replace(s, completed=-1), [("INV-7", None)]),
    ("failed-negative", SOUND, None, lambda s: dataclasses.replace(s, failed=-1), [("INV-7", None)]),
    ("completed-decreases", SOUND, SOUND, lambda s: dataclasses.replace(s, completed=0), [("INV-7", None)]),
    ("failed-decreases", SOUND, SOUND, lambda s: dataclasses.replace(s, failed=0), [("INV-7", None)]),
    ("completed-grows-nothing-vanished", SOUND, SOUND, lambda s: dataclasses.replace(s, completed=2),
     [("INV-7", None)]),
    ("failed-grows-nothing-entered-dead", SOUND, SOUND, lambda s: dataclasses.replace(s, failed=2),
     [("INV-7", None)]),
    # a removed job vanished, but completed may grow by at most one
    ("completed-grows-2-one-vanished", SOUND, SOUND,
     lambda s: dataclasses.replace(edit(s, sets={"pending": {P: None}}, rows={P: None}), completed=3),
     [("INV-7", None)]),
    # a job entered dead, but failed may grow by at most one
    ("failed-grows-2-one-entered-dead", SOUND, SOUND,
     lambda s: dataclasses.replace(edit(s, sets={"pending": {P: None}, "dead": {P: 0}},
                                        rows={P: {"state": b"dead"}}), failed=3),
     [("INV-7", None)]),
]


@pytest.mark.parametrize("name,sound,previous,corrupt,expected", CASES, ids=[c[0] for c in CASES])
def test_check_reports_the_corruption(name: str, sound: Snapshot, previous: Snapshot | None,
                                      corrupt: Callable[[Snapshot], Snapshot],
                                      expected: list[tuple[str, str | None]]) -> None:
    assert invariants.check_invariants(sound, previous) == []  # not vacuous: the same call on the sound value is clean
    assert invariants.check_invariants(sound) == []
    bad = corrupt(sound)
    assert bad != sound
    got = invariants.check_invariants(bad, previous)
    assert pairs(got) == sorted(expected, key=repr), "\n".join(map(str, got))
    for v in got:
        assert isinstance(v, Violation) and v.seen and str(v).startswith(v.invariant)


def test_decrease_is_only_seen_against_previous() -> None:
    bad = edit(SOUND2, rows={A: {"attempts": b"1"}})
    assert invariants.check_invariants(bad) == []  # on its own it is a sound keyspace
    assert pairs(invariants.check_invariants(bad, SOUND2)) == [("INV-5", A)]
    grown = dataclasses.replace(SOUND, completed=5, failed=5)
    assert invariants.check_invariants(grown) == []
    assert pairs(invariants.check_invariants(grown, SOUND)) == [("INV-7", None), ("INV-7", None)]


def test_sound_snapshots_yield_nothing() -> None:
    assert invariants.check_invariants(SOUND) == []
    assert invariants.check_invariants(SOUND2) == []
    assert invariants.check_invariants(Snapshot.build(Q, {}, {})) == []
    assert invariants.check_invariants(Snapshot.build(Q, {}, {}), Snapshot.build(Q, {}, {})) == []


def test_every_transition_of_the_model_is_sound_against_its_previous() -> None:
    """The positive side of INV-5/INV-7: real moves (a completion, a dead-lettering, a
    reap, a remove, a reprocess) never trip the comparison."""
    m, prev = make_sound()
    steps = [
        lambda: m.complete(A, 1),  # one vanished, completed +1
        lambda: m.claim(100, now=2000),  # P active
        lambda: m.reap(now=2100, max_attempts=1),  # P dead, failed +1
        lambda: m.reprocess(P),
        lambda: m.promote(now=5000),
        lambda: m.claim(1, now=5000),
        lambda: m.retry(P, 2, delay_ms=0, max_attempts=2, error=b"x", now=5000),  # dead, failed +1
        lambda: m.remove(D),  # vanished, completed unchanged
        lambda: m.claim(1, now=5000),
        lambda: m.reap(now=5001),
        lambda: m.complete(S, 1),  # late ack from pending
    ]
    for step in steps:
        step()
        cur = m.snapshot()
        assert invariants.check_invariants(cur, prev) == [], str(cur)
        prev = cur
    assert (prev.completed, prev.failed) == (3, 3)


def test_every_invariant_has_a_case() -> None:
    seen = {inv for *_, expected in CASES for inv, _ in expected}
    assert seen == {f"INV-{k}" for k in range(1, 8)}

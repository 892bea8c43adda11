"""The invariants judged by what a step changed (``check_step``, specs/lifecycle.md INC-1)
report exactly what the whole check (``check_invariants``, the reference) reports, step
by step: on arbitrary pairs of snapshots, sound or not, and on random programs of the
model, operator faults included; and the model's snapshot, kept up to date by the ids
its transitions wrote, is the one built whole."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emq_model.branded_id import encode
from emq_model.change import Change, agree, between, moved_whole
from emq_model.invariants import Carried, Since, check_invariants, check_step, check_whole, of_all, of_ids
from emq_model.model import QueueModel
from emq_model.snapshot import Snapshot
from tests.model.test_change import snapshots, widened

POOL = [encode("JOB", n) for n in range(1000, 1006)]


def agrees(before: Snapshot, after: Snapshot, extra: list[str] = (), made: Change | None = None) -> None:  # type: ignore[assignment]
    """``check_step`` on ``made`` (else the reference change, naming ``extra`` too) is
    the whole check, and carries the whole per-id violations; without the step's own
    invariants (``against=False``) it is the whole check of ``after`` alone."""
    carried = of_ids(before, before.ids())
    change = made or widened(before, between(before, after), list(extra))
    found, now = check_step(after, before, change, carried)
    assert Counter(found) == Counter(check_invariants(after, before))
    assert now == of_ids(after, after.ids())
    whole, per_id = check_whole(after, before)  # the doubt's whole check, in one pass
    assert Counter(whole) == Counter(check_invariants(after, before)) and per_id == now
    alone, _ = check_step(after, before, change, carried, against=False)  # a mended key's step (FLT-4)
    assert Counter(alone) == Counter(check_invariants(after))


@settings(max_examples=400)
@given(snapshots(), snapshots(), st.lists(st.sampled_from(POOL)))
def test_the_step_check_is_the_whole_check_on_any_snapshots(before: Snapshot, after: Snapshot, extra: list[str]) -> None:
    agrees(before, after, extra)


CALLS = st.one_of(
    st.tuples(st.just("enqueue"), st.sampled_from(POOL)),
    st.tuples(st.just("lane_enqueue"), st.sampled_from(POOL), st.sampled_from(["a", "b"])),
    st.tuples(st.just("claim"), st.integers(1, 5)),
    st.tuples(st.just("lane_claim"), st.integers(1, 5)),
    st.tuples(st.just("lane_wclaim"), st.integers(1, 5)),
    st.tuples(st.just("settle"), st.sampled_from(POOL), st.integers(1, 3), st.sampled_from(["complete", "retry"])),
    st.tuples(st.just("schedule"), st.sampled_from(POOL), st.integers(0, 5)),
    st.tuples(st.just("pump"), st.sampled_from(["promote", "reap"])),
    st.tuples(st.just("reprocess"), st.sampled_from(POOL)),
    st.tuples(st.just("remove"), st.sampled_from(POOL)),
    st.tuples(st.just("lane_config"), st.sampled_from(["pause", "resume", "limit", "weight"]), st.sampled_from(["a", "b"])),
    st.tuples(st.just("forget_row"), st.sampled_from(POOL)),
    st.tuples(st.just("tick"), st.integers(0, 4)),
    st.tuples(st.just("spoil"), st.sampled_from(["pending", "active", "row", "lane", "ring", "completed"]),
              st.sampled_from(POOL), st.sampled_from(["a", "b"]), st.booleans()),
    st.tuples(st.just("stray"), st.sampled_from(["x", "job", "pending:"]), st.booleans()),
)


def run(m: QueueModel, call: tuple[Any, ...], now: int) -> int:
    """One call of a program on ``m`` (a refusal changes nothing); the clock after it."""
    op, *a = call
    try:
        if op == "enqueue":
            m.enqueue(a[0], b"p")
        elif op == "lane_enqueue":
            m.lane_enqueue(a[0], b"p", a[1])
        elif op in ("claim", "lane_claim", "lane_wclaim"):
            getattr(m, op)(a[0], now=now)
        elif op == "settle" and a[2] == "complete":
            m.complete(a[0], a[1])
        elif op == "settle":
            m.retry(a[0], a[1], delay_ms=1, max_attempts=2, error=b"e", now=now)
        elif op == "schedule":
            m.schedule(a[0], b"s", delay_ms=a[1], now=now)
        elif op == "pump":
            getattr(m, a[0])(now=now)
        elif op in ("reprocess", "remove", "forget_row"):
            getattr(m, op)(a[0])
        elif op == "lane_config":
            {"pause": lambda: m.lane_pause(a[1]), "resume": lambda: m.lane_resume(a[1]),
             "limit": lambda: m.lane_limit(a[1], 1), "weight": lambda: m.lane_weight(a[1], 2)}[a[0]]()
        elif op == "tick":
            return now + a[0]
        elif op == "spoil":
            which = {"row": {"id": a[1]}, "lane": {"group": a[2]}}.get(a[0], {})
            (m.spoil if a[3] else m.mend)(a[0], **which)
        elif op == "stray":
            (m.write_stray if a[1] else m.drop_stray)(a[0])
    except Exception:  # noqa: BLE001 - a refusal: the model changed nothing
        pass
    return now


@settings(max_examples=150)
@given(st.lists(CALLS, max_size=40))
def test_the_step_check_is_the_whole_check_on_model_programs(program: list[tuple[Any, ...]]) -> None:
    m, now = QueueModel("q"), 0
    before = m.snapshot()
    kept: Carried | Since = of_all(before)
    for call in program:
        now = run(m, call, now)
        after = m.snapshot()
        assert after == m.built()  # the snapshot kept up to date is the one built whole (INC-3)
        agrees(before, after)
        if m.last_change is not None:  # the model's own change, as the machine judges by it
            assert m.last_change[0] is before and m.last_change[2] is after
            made = m.last_change[1]
            agrees(before, after, made=made)
            assert agree(before, made, between(before, after))  # INV-8 by change (INC-4)
            assert agree(before, between(before, after), made)
            kept = judged_as_the_machine(before, after, made, kept, m.spoiled)
        else:
            kept = of_all(after)
        before = after


def judged_as_the_machine(before: Snapshot, after: Snapshot, made: Change, kept: Carried | Since,
                          spoiled: Any) -> Carried | Since:
    """As ``Conformance._judge``: while a key is spoiled the ids are not judged, only
    what each change named is kept (``Since``); the first step after it is judged from
    the snapshot before the episode, and finds what the whole check finds."""
    if spoiled:
        since = kept if isinstance(kept, Since) else Since(before, kept)
        since.add(made)
        return since
    found, now = check_step(after, before, made, kept)
    assert Counter(found) == Counter(check_invariants(after, before))
    assert now == of_all(after)
    return now


SPOILS = (
    *(("field", f, v) for f in ("state", "attempts", "payload", "group", "x")
      for v in (None, b"", b"0", b"01", b"1", b"pending", b"active", b"dead", b"a", b"b", b"a b")),
    *(("score", v) for v in (0, 1, -1, 2.5, float("nan"))),
    ("id", "JOBzzzzzzzzzzz"),
    *(("twice", p) for p in ("pending", "active", "schedule", "dead", ("lane", "a"))),
)
"""Each way one job is broken (``spoiled``): a row field set or deleted, its score, its
id, a second place."""


def spoiled(snap: Snapshot, job: str, how: tuple[Any, ...]) -> Snapshot:
    """``snap`` with one thing about ``job`` broken as ``how`` says."""
    places = {p: dict(e) for p, e in snap.index.items()}
    rows = {i: dict(r) for i, r in snap.rows}
    if how[0] == "field":
        if how[2] is None:
            rows.get(job, {}).pop(how[1], None)
        elif job in rows:
            rows[job][how[1]] = how[2]
    elif how[0] == "score":
        places = {p: {m: how[1] if m == job else s for m, s in e.items()} for p, e in places.items()}
    elif how[0] == "id":
        for e in places.values():
            if job in e:
                e[how[1]] = e.pop(job)
        if job in rows:
            rows[how[1]] = rows.pop(job)
    else:
        places.setdefault(how[1], {})[job] = 0
    lanes = {p[1]: e.items() for p, e in places.items() if isinstance(p, tuple)}
    return Snapshot.build(snap.queue, {p: e.items() for p, e in places.items() if isinstance(p, str)}, rows,
                          snap.completed, snap.failed, snap.stray, lanes, snap.ring, snap.paused,
                          {name: dict(getattr(snap, name)) for name in ("glimit", "gactive", "gweight")})


@settings(max_examples=60, deadline=None)  # every job of the queue broken every way: many snapshots an example
@given(st.lists(CALLS, max_size=30))
def test_the_whole_check_in_one_pass_is_the_reference_on_a_spoiled_queue(program: list[tuple[Any, ...]]) -> None:
    """``check_whole`` and ``of_all`` (a doubt's whole check, INC-4) find exactly what
    ``check_invariants`` and ``of_ids`` find on a model's queue with any one of its jobs
    broken any one way (``SPOILS``): the others sound, so the quick test meets each way
    of being almost sound, in every place."""
    m, now = QueueModel("q"), 0
    for call in program:
        now = run(m, call, now)
    before = m.snapshot()
    for job in sorted(before.ids()):
        for how in SPOILS:
            after = spoiled(before, job, how)
            found, per_id = check_whole(after, before)
            assert Counter(found) == Counter(check_invariants(after, before)), (job, how)
            assert per_id == of_ids(after, after.ids()) == of_all(after), (job, how)


@pytest.mark.parametrize("written", [False, True])
def test_a_location_spoiled_and_mended_is_named_whole(written: bool) -> None:
    """INC-1: a spoil and a mend of a deep location each name it whole, no member: none
    held after the spoil, after the mend the very entries the snapshot before the spoil
    held, so no id of it is judged again (``moved_whole``); a member written after the
    mend and before the next snapshot (``written``) is in the entries named."""
    m = QueueModel("q")
    m.enqueue_many([(encode("JOB", 5000 + n), b"") for n in range(200)])
    held = m.snapshot()
    m.spoil("pending")
    spoiled = m.snapshot()
    assert m.last_change is not None and m.last_change[1].whole == {"pending": ()} and not m.last_change[1].members
    m.mend("pending")
    if written:
        m.enqueue(POOL[0], b"p")
    mended = m.snapshot()
    assert m.last_change is not None and mended == m.built()
    made = m.last_change[1]
    assert (made.whole["pending"] is held.pending) is not written and not {p for p, _ in made.members} & {"pending"}
    assert moved_whole(held, mended, ["pending"]) == ({*held.index["pending"], POOL[0]} if written else set())
    agrees(spoiled, mended, made=made)

"""A step's change (specs/lifecycle.md INC-1..4): ``between`` is exact, ``apply`` replays
it, and ``agree`` (INV-8 by what changed) says equal exactly when whole snapshots are."""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from emq_model.branded_id import encode
from emq_model.change import Change, agree, apply, between
from emq_model.snapshot import Snapshot

IDS = [*(encode("JOB", n) for n in (1000, 2000, 3000, 4000)), "JOBzzzzzzzzzzz"]
GROUPS = ["a", "b"]
scores = st.sampled_from([0, 0, 1, 7, 2.5, -1])
fields = st.dictionaries(st.sampled_from(["state", "attempts", "payload", "group", "x"]),
                         st.sampled_from([b"", b"0", b"1", b"2", b"pending", b"active", b"a", b"b", b"-"]), max_size=4)
counts = st.dictionaries(st.sampled_from([*GROUPS, "-"]), st.integers(0, 3), max_size=2)


@st.composite
def snapshots(draw: Any) -> Snapshot:
    """A small snapshot of queue ``q``, sound or not (a change does not judge)."""
    members = st.dictionaries(st.sampled_from(IDS), scores, max_size=3)
    return Snapshot.build(
        "q", {loc: draw(members).items() for loc in ("pending", "active", "schedule", "dead")},
        draw(st.dictionaries(st.sampled_from(IDS), fields, max_size=4)),
        draw(st.integers(0, 2)), draw(st.integers(0, 2)),
        draw(st.lists(st.sampled_from(["emq:{q}:x", "emq:{q}:job:"]), unique=True, max_size=2)),
        {g: draw(members).items() for g in draw(st.lists(st.sampled_from(GROUPS), unique=True))},
        draw(st.lists(st.sampled_from(GROUPS), unique=True)), draw(st.lists(st.sampled_from(GROUPS), unique=True)),
        {"glimit": draw(counts), "gactive": draw(counts), "gweight": draw(counts)},
    )


def widened(before: Snapshot, change: Change, extra: list[str]) -> Change:
    """``change`` naming also ``extra`` ids at their unchanged values (INC-1 allows it)."""
    members = dict(change.members)
    rows = dict(change.rows)
    for i in extra:
        for place, entries in before.index.items():
            members.setdefault((place, i), entries.get(i))
        rows.setdefault(i, before.row_index.get(i))
    return dataclasses.replace(change, members=members, rows=rows)


@settings(max_examples=300)
@given(snapshots(), snapshots(), st.lists(st.sampled_from(IDS)))
def test_between_is_exact_and_apply_replays_it(before: Snapshot, after: Snapshot, extra: list[str]) -> None:
    change = between(before, after)
    assert apply(before, change) == after
    assert apply(before, widened(before, change, extra)) == after
    assert between(before, before).members == {} and between(before, before).rows == {}
    for made in (apply(before, change), apply(before, widened(before, change, extra))):
        fresh = dataclasses.replace(made)  # the look-ups built from its members, not carried
        assert made.index == fresh.index and list(made.index) == list(fresh.index)
        assert made.row_index == fresh.row_index
    assert {i for (_, i), s in change.members.items()} <= before.ids() | after.ids()


@settings(max_examples=300)
@given(snapshots(), snapshots(), st.data())
def test_agree_is_full_equality(before: Snapshot, mine: Snapshot, data: st.DataObject) -> None:
    theirs = data.draw(st.one_of(st.just(mine), snapshots()))
    extra = data.draw(st.lists(st.sampled_from(IDS)))
    ours, others = between(before, mine), widened(before, between(before, theirs), extra)
    assert agree(before, ours, others) == (mine == theirs)
    assert agree(before, others, ours) == (mine == theirs)

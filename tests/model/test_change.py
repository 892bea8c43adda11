"""A step's change (specs/lifecycle.md INC-1..4): ``between`` is exact, ``apply`` replays
it (its sets and rows made on first read, along chains of steps read in any order), and
``agree`` (INV-8 by what changed) says equal exactly when whole snapshots are."""

from __future__ import annotations

import dataclasses
import pickle
from contextlib import contextmanager
from typing import Any, Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emq_model import change as change_module
from emq_model import snapshot as snapshot_module
from emq_model.branded_id import encode
from emq_model.change import Change, agree, apply, between, composed
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


@contextmanager
def span(keys: int) -> Iterator[None]:
    """``SPAN`` set to ``keys`` (the snapshots drawn here name a few ids a step)."""
    was = snapshot_module.SPAN
    snapshot_module.SPAN = change_module.SPAN = keys
    try:
        yield
    finally:
        snapshot_module.SPAN = change_module.SPAN = was


READS = ("none", "pending", "walk", "size", "rows", "equal", "pickle", "retold")


def read(made: Snapshot, how: str, reference: Snapshot) -> None:
    """One read of ``made`` (a snapshot ``apply`` made), answered as ``reference``'s."""
    if how == "pending":
        assert made.pending == reference.pending
    elif how == "walk":
        assert [*made.walk("active")] == list(reference.active) and [*made.walk("dead")][:1] == list(reference.dead[:1])
    elif how == "size":
        assert [made.size(loc) for loc in ("pending", "active")] == [len(reference.pending), len(reference.active)]
    elif how == "rows":
        assert made.rows == reference.rows
    elif how == "equal":
        assert made == reference
    elif how == "pickle":
        assert pickle.loads(pickle.dumps(made)) == reference
    elif how == "retold":
        told = made.retold("other", ("emq:{other}:x",))
        assert told == dataclasses.replace(reference, queue="other", stray=("emq:{other}:x",))


@settings(max_examples=120)
@given(snapshots(), st.lists(st.tuples(snapshots(), st.sampled_from(READS), st.lists(st.sampled_from(IDS))),
                             max_size=8), st.sampled_from([1, 3, 64]), st.data())
def test_a_chain_of_steps_reads_as_the_snapshots_it_stands_for(first: Snapshot, steps: list[tuple[Snapshot, str, list[str]]],
                                                               keys: int, data: st.DataObject) -> None:
    """Each snapshot ``apply`` makes answers every read as the one built whole, whenever it
    is read: right after its step, later, or never before the end (its sets made from an
    earlier snapshot's, widened step by step, across ``SPAN``)."""
    with span(keys):
        chain, references = [first], [first]
        for reference, how, extra in steps:
            chain.append(apply(chain[-1], widened(references[-1], between(references[-1], reference), extra)))
            references.append(reference)
            read(chain[-1], how, reference)
        for at in data.draw(st.permutations(range(len(chain)))):
            read(chain[at], data.draw(st.sampled_from(READS)), references[at])
            assert chain[at] == references[at]
            assert chain[at].index == references[at].index and chain[at].row_index == references[at].row_index


def test_a_step_no_one_reads_whole_copies_no_set() -> None:
    """INC-3: a deep set's step costs what it wrote: its sets and rows are made on first
    read, not at the step."""
    jobs = [encode("JOB", 1000 + n) for n in range(2000)]
    deep = Snapshot.build("q", {"pending": [(job, 0) for job in jobs]},
                          {job: {"attempts": b"0", "state": b"pending"} for job in jobs})
    claimed = dataclasses.replace(deep, pending=deep.pending[1:], active=((jobs[0], 30),),
                                  rows=((jobs[0], ((("attempts", b"1"), ("state", b"active")))), *deep.rows[1:]))
    made = apply(deep, between(deep, claimed))
    assert not {"pending", "active", "rows"} & made.__dict__.keys()
    assert made.size("pending") == 1999 and next(made.walk("pending")) == (jobs[1], 0)
    assert made == claimed


def test_a_first_read_cut_short_leaves_the_snapshot_to_be_read_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Ctrl-C during a set's first read (the kit's interrupt handler raises wherever the
    code is, emq_kit/interrupts.py) leaves the snapshot readable, as it was to be made."""
    before = Snapshot.build("q", {"pending": [(job, 0) for job in IDS]}, {})
    after = dataclasses.replace(before, pending=before.pending[1:])
    made = apply(before, between(before, after))

    def cut(*_: Any) -> Any:
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(snapshot_module, "patched_entries", cut)
        with pytest.raises(KeyboardInterrupt):
            made.pending
    assert made.pending == after.pending and made == after


@settings(max_examples=80)
@given(snapshots(), st.lists(snapshots(), min_size=1, max_size=4))
def test_a_run_of_changes_composed_replays_to_the_last(first: Snapshot, later: list[Snapshot]) -> None:
    """``composed``: one change for a run of them (a raw call's judge took snapshots
    between two steps) replays to the last snapshot, as the reference diff does."""
    changes = [between(a, b) for a, b in zip([first, *later], later)]
    one = composed(changes)
    assert one is not None and apply(first, one) == later[-1]
    assert agree(first, one, between(first, later[-1]))

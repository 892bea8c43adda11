"""The rules' draws from kept orders (emq_kit/check/orders.py) answer exactly what sorting
the model's sets anew answers, on random programs of the model (operator faults, lanes,
snapshots skipped or taken twice included); and the generated steps are unchanged."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from emq_kit.check.orders import Orders, pick_of_union
from emq_model import spec
from emq_model.model import QueueModel
from tests.model.test_incremental import CALLS, run


def holds(m: QueueModel, job: str) -> bool:
    return job in m.rows and m.rows[job]["attempts"] != b"0"


@settings(max_examples=150)
@given(st.lists(st.tuples(CALLS, st.sampled_from([0, 1, 1, 1, 2]), st.sampled_from([True, True, False])),
                max_size=40))
def test_the_kept_orders_are_the_sorted_sets(program: list[tuple[tuple[Any, ...], int, bool]]) -> None:
    """Drawn after some calls only, so the orders follow the model several snapshots
    behind (``changes_since``), or past what it keeps (``RECENT``)."""
    m, now = QueueModel("q"), 0
    orders = Orders(m)
    for call, snapshots, draw in program:
        now = run(m, call, now)
        for _ in range(snapshots):  # none: drawn with writes not yet in a snapshot
            m.snapshot()
        if not draw:
            continue
        for loc in spec.LOCATIONS:
            assert orders.sorted_members(loc) == sorted(m.sets[loc])
            assert orders.sorted_holders(loc) == [j for j in sorted(m.sets[loc]) if holds(m, j)]
            assert orders.sorted_marks(loc) == sorted(set(m.sets[loc].values()))


@given(st.lists(st.text("abcdef", max_size=2), unique=True), st.lists(st.text("abcdef", max_size=2)),
       st.integers(0, 200))
def test_a_pick_of_a_union_is_the_sorted_unions(big: list[str], small: list[str], pick: int) -> None:
    union = sorted(set(big) | set(small))
    if union:
        assert pick_of_union(sorted(big), small, pick) == union[pick % len(union)]

"""Transition coverage: which (op, outcome) cells of the spec table a run reached.

The cells come from ``specs/transitions.json``; ``classify`` names the cell a call landed
in from its answer and the model's state around it, so a rule whose precondition never
holds shows up as an unreached cell instead of hiding.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from emq_model.errors import EmqError
from emq_model.spec import cells, lane_cells


def classify(
    op: str, answer: Any, *, was: str | None = None, dropped: bool = False, dead_before: int = 0, dead_after: int = 0,
    args: dict[str, Any] | None = None,
) -> list[str]:
    """The outcome names of one call, a plain op's or a lane op's (``spec.cells()``,
    ``spec.lane_cells()``). ``answer`` is the model's answer or its ``EmqError``; ``was``
    is the id's location before the call (complete); ``dropped`` whether a claim (plain
    or grouped) dropped orphans; the failed counter before/after tells a reap's
    dead-letterings from its requeues; ``args`` the call's arguments (lane_limit)."""
    if isinstance(answer, EmqError):
        return [answer.code]
    extra = ["dropped"] if dropped else []
    if op in ("claim", "lane_claim"):
        return ["empty" if answer is None else "claimed"] + extra
    if op == "lane_wclaim":
        return [("empty", "one")[len(answer)] if len(answer) < 2 else "several"] + extra
    if op == "lane_limit":
        assert args is not None, "lane_limit is classified by its n"
        return ["cleared" if args["n"] == 0 else "ok"]
    if op == "complete" and answer == "ok" and was == "pending":
        return ["late"]
    if op == "promote":
        return ["moved" if answer else "none"]
    if op == "reap":
        dead = dead_after - dead_before
        out = []
        if dead:
            out.append("dead")
        if answer - dead:
            out.append("requeued")
        return out or ["none"]
    return [answer]


class Coverage:
    """Counts of every cell reached; the spec's cells are the denominator."""

    def __init__(self, total: list[tuple[str, str]] | None = None) -> None:
        """``total``: the layout's cells (the four-set layout's by default)."""
        self.hits: Counter[tuple[str, str]] = Counter()
        self.total = cells() if total is None else total

    def add(self, op: str, outcome: str) -> None:
        """Count one reached cell (a cell outside the table is a kit bug, so it raises)."""
        if (op, outcome) not in self.total and (op, outcome) not in lane_cells():
            raise KeyError(f"outcome {op}/{outcome} is not a cell of the layout's table")
        self.hits[(op, outcome)] += 1

    def include(self, more: list[tuple[str, str]]) -> None:
        """Add cells to the denominator (the lane cells, for a target with lane ops)."""
        self.total = self.total + [c for c in more if c not in self.total]

    def unreached(self) -> list[tuple[str, str]]:
        """Cells of the table no call reached, in table order."""
        return [c for c in self.total if not self.hits[c]]

    def reached(self) -> int:
        """How many distinct cells were reached."""
        return len(self.total) - len(self.unreached())

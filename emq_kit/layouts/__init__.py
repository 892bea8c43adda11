"""Layouts: how a queue's states are laid out in the keyspace, each one module boundary
(specs/layouts/README.md). A ``Layout`` is everything the kit needs of one: its contract
table, the coverage cells it gates on, the target it opens, the conformance machine that
drives model and target side by side, and the replay of a trace's steps. ``emq check``,
``emq replay`` and ``emq audit`` ask ``layout(name)`` and never branch on the name.

``echomq`` (the four sets, the default) is ``emq_kit/layouts/echomq.py``; ``bullmq``
(BullMQ's own scripts) is ``emq_kit/layouts/bullmq.py``.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from emq_kit.errors import BadArgument

if TYPE_CHECKING:
    from emq_kit.check.clock import Clock
    from emq_kit.check.step import Replayed, Step
    from emq_kit.check.tally import Run

NAMES = ("echomq", "bullmq")
DEFAULT = "echomq"


@dataclass(frozen=True)
class Layout:
    """One layout as the kit sees it.

    - ``contract``: the spec table its cells and rules come from (printed in reports);
    - ``cells()``: the (op, outcome) cells a gating run must reach;
    - ``open_target(url, scripts, driver, *, clock, timeout, observe, partial)``: the target, or a
      ``KitError`` naming why there is none;
    - ``machine(target, run, clock)``: a zero-argument factory of the Hypothesis
      rule-based machine (``run_state_machine_as_test`` takes it);
    - ``replay(steps, target, clock)``: a trace's steps re-run on a fresh model and the
      target, a ``Replayed``;
    - ``audit(url)``: a read-only audit of a live keyspace laid out this way: (counts per
      location, violations), or ``None`` when the layout's audit is ``emq_kit/audit.py``
      (the four sets: many queues, paged, with its own report);
    - ``step_args(op)``: the (required, allowed) argument names of a trace step's op, or
      ``None`` for an op the layout has not; ``queues``: the queues its steps may name
      (``emq replay`` checks a trace against both before anything runs);
    - ``check_values(where, op, queue, args)``: each argument value of a trace step at
      ``where`` (``steps/3``) against what the layout's run sends, ``TraceError`` naming
      the first that is not (before anything runs);
    - ``settings``: the ops that set an example's settings (bullmq's ``retention``): a
      trace keeps them however it is minimized (emq_kit/check/minimize.py);
    - ``logical()``: every queue name a run may send, each of which gets a name of the
      run's own on a server (its claim, ``emq_kit.claim``; specs/ownership.md OWN-2),
      passed to ``open_target`` as ``names``."""

    name: str
    contract: str
    cells: Callable[[], list[tuple[str, str]]]
    open_target: Callable[..., Any]
    machine: Callable[[Any, "Run", "Clock | None"], Callable[[], Any]]
    replay: Callable[[list["Step"], Any, "Clock | None"], "Replayed"]
    step_args: Callable[[str], "tuple[set[str], set[str]] | None"]
    check_values: Callable[[str, str, str, dict[str, Any]], None]
    queues: tuple[str, ...]
    logical: Callable[[], tuple[str, ...]]
    audit: Callable[[str], tuple[dict[str, int], list[str]]] | None = None
    settings: tuple[str, ...] = ()


def layout(name: str | None = None) -> Layout:
    """The layout called ``name`` (the default when None); ``BadArgument`` for another."""
    name = name or DEFAULT
    if name not in NAMES:
        raise BadArgument(f"unknown layout {name!r}: one of {', '.join(NAMES)}")
    found: Layout = importlib.import_module(f"emq_kit.layouts.{name}").LAYOUT
    return found


def of_trace(header: dict[str, Any]) -> Layout:
    """The layout a trace header names (traces written before layouts existed: echomq)."""
    return layout(header.get("layout") or header.get("target", {}).get("layout"))

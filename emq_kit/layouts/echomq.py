"""The four-set layout (``pending``, ``active``, ``schedule``, ``dead`` and the job row):
EchoMQ's own layout and the kit's default. Its contract is specs/lifecycle.md and
specs/transitions.json, its model emq_model/model.py, its invariants
emq_model/invariants.py, its target emq_kit/check/target.py's ``open_target``, its
machine emq_kit/check/machine.py's ``Conformance`` (those files predate the layouts
folder and keep their names; this module is the boundary the kit asks)."""

from __future__ import annotations

from typing import Any

from emq_kit.check.machine import Conformance
from emq_kit.check.names import vocabulary
from emq_kit.check.pools import QUEUES
from emq_kit.check.target import open_target
from emq_kit.layouts import Layout
from emq_model.spec import cells


def _step_args(op: str) -> Any:
    from emq_kit.trace.validate import step_args

    return step_args(op)


def _check_values(where: str, op: str, queue: str, encoded: dict[str, Any]) -> None:
    from emq_kit.trace.validate import check_values

    check_values(where, op, queue, encoded)


def _replay(steps: list[Any], target: Any, clock: Any = None) -> Any:
    from emq_kit.trace.replay import replay

    return replay(steps, target, clock)


def _windowed(target: Any, run: Any, clock: Any = None) -> Any:
    """``emq check``'s machine: it verifies in windows where the target can
    (emq_kit/check/window.py); a replay's is step by step."""
    return Conformance.factory(target, run, clock, windowed=True)


LAYOUT = Layout(
    name="echomq",
    contract="specs/transitions.json",
    cells=cells,
    open_target=open_target,
    machine=_windowed,
    replay=_replay,
    step_args=_step_args,
    check_values=_check_values,
    queues=tuple(QUEUES),
    logical=vocabulary,
)

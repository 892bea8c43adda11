"""The four-set layout (``pending``, ``active``, ``schedule``, ``dead`` and the job row):
EchoMQ's own layout and the kit's default. Its contract is specs/lifecycle.md and
specs/transitions.json, its model emq_model/model.py, its invariants
emq_model/invariants.py, its target emq_kit/check/target.py's ``open_target``, its
machine emq_kit/check/machine.py's ``Conformance`` (those files predate the layouts
folder and keep their names; this module is the boundary the kit asks)."""

from __future__ import annotations

from typing import Any

from emq_kit.check.machine import QUEUES, Conformance
from emq_kit.check.target import open_target
from emq_kit.layouts import Layout
from emq_model.spec import cells


def _step_args(op: str) -> Any:
    from emq_kit.trace.validate import step_args

    return step_args(op)


def _replay(steps: list[Any], target: Any, clock: Any = None) -> Any:
    from emq_kit.trace.replay import replay

    return replay(steps, target, clock)


LAYOUT = Layout(
    name="echomq",
    contract="specs/transitions.json",
    cells=cells,
    open_target=open_target,
    machine=Conformance.factory,
    replay=_replay,
    step_args=_step_args,
    queues=tuple(QUEUES),
)

"""Deferred verification: a window of steps goes to the target as one batch and is judged
when the replies come back, step by step, in order.

Why it is sound: the model is the oracle, and every argument the machine generates comes
from the model's state (its answers, its locations, the kept claims it handed out), never
from the target's. So the machine can run the model's side of a step at once, hand the
step's target call to the window, and go on generating; the target's answers and
snapshots are judged later, in step order, with the same checks and the same
``Divergence`` as step-by-step verification: the first diverging step is the one
reported, and the steps after it in the window are dropped from the counterexample.

The window is flushed (sent and judged) when it is full, at the end of an example, and
before any step that is not windowed: a step whose target side must follow the previous
calls (a queue opened by a refused name, a read the target answers outside its scripts,
an operator's fault on a target that is sent its windows whole) or whose generation
depends on the target (the server clock, where no window is opened at all). On an
``Ahead`` the faults are posted among the calls (``LiveTarget.post``), and a mend flushes
a window that holds a spoil (it puts back what the spoil read).

A target windows through ``batch(calls, snapshots=True)`` (``BatchReply`` per call: the
answer or the exception it stands for, the orphans a claim dropped, the snapshot after
it) and says how many calls one window may hold in ``batch_max`` (0: none; the machine
then verifies step by step). A driver is sent a window as DP-20 batch requests
(``DriverTarget.batch``). The built-in client on a server declares ``ahead`` (an
``Ahead``): each call, its EVALSHA followed by snapshot.lua's, is written to one
connection as its step is made (``LiveTarget.post``), and the replies are read when the
window is judged (``collect``). The server runs a window's calls while the machine makes
its next steps, instead of after them, and judging a window reads only what already
waits in the socket.

Shrinking verifies step by step (``run_machine``). The search runs in windows without
shrinking and keeps its failing example in a database held in memory; a second run,
step by step, replays that example (it stops at the divergence) and shrinks it. Why:
the shrunk counterexample is then one step-by-step verification finds (a windowed
example draws the steps after its divergence until its window is sent, which leads the
shrinker elsewhere), each shrink attempt stops at its divergence, and Hypothesis, which
demands that a choice sequence draw the same whenever it runs, sees one mode per run.
The shrinking is bounded either way by the run's budget of checked steps
(``Run.shrink_budget``, ``ShrinkCut``): what it costs on a target is the steps it
replays, so a window would save little there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator, cast

from hypothesis import Phase, settings
from hypothesis.database import InMemoryExampleDatabase
from hypothesis.stateful import run_state_machine_as_test

from emq_kit.errors import TargetFault

if TYPE_CHECKING:
    from emq_kit.check.step import Step
    from emq_kit.targets.protocol import Ahead, Target
    from emq_live.client import BadReply
    from emq_model.invariants import Violation

from emq_model.snapshot import Snapshot


@dataclass
class Pending:
    """A step whose model side ran and whose target side waits in the window: what the
    model answered and dropped, and the model's snapshot after it with its invariants
    judged against the previous one (``prepared``, as ``Conformance.verify`` takes it)."""

    step: Step
    dropped: tuple[str, ...]
    prepared: tuple[Snapshot, list[Violation]]


@dataclass
class Judged:
    """A windowed step with the target's side back: its answer (or the exception it
    stands for), the orphans it dropped, its snapshot (None: the target did not bring
    it back; the machine reads it)."""

    pending: Pending
    answer: Any
    dropped: tuple[str, ...]
    snapshot: Snapshot | BadReply | None


def run_machine(machine: Any, config: settings) -> None:
    """``run_state_machine_as_test(machine, settings=config)``, searching in windows and
    shrinking step by step (see the module docstring) when ``machine`` (a
    ``Machine.factory``'s ``Built``: its ``windowed`` is set here) opens windows."""
    if not (getattr(machine, "windowed", False) and window_size(machine.target, machine.clock.mode)):
        run_state_machine_as_test(machine, settings=config)
        return
    found = InMemoryExampleDatabase()
    try:
        run_state_machine_as_test(machine, settings=settings(
            config, database=found, phases=[p for p in config.phases if p is not Phase.shrink]))
    except BaseException as exc:
        if Phase.shrink not in config.phases or isinstance(exc, KeyboardInterrupt):  # Ctrl-C is no failure
            raise
        # Kept as secondary examples: a primary one that replays exactly is taken as
        # shrunk already, and the replay, step by step, may stop exactly where it did.
        for key, values in list(found.data.items()):
            found.data[key + b".secondary"] = found.data.pop(key) | values
        machine.windowed = False
        try:
            run_state_machine_as_test(machine, settings=settings(config, database=found,
                                                                 phases=[Phase.reuse, Phase.shrink]))
        finally:
            machine.windowed = True
        raise  # the failure did not come back step by step: report the windowed one


WINDOW_JOBS = 20_000
"""The jobs a window's snapshots may hold together, about (a deep run's, DEPTH-1): one
pipeline's reply stays well inside the bound of a call (CC-9, ``hang.SERVER_SECONDS``)."""


def window_size(target: Target, clock_mode: str, depth: int = 0) -> int:
    """How many steps one window holds on ``target`` under a clock of ``clock_mode``: 0
    (verify step by step) when the target cannot batch or the clock is the server's
    (generation then waits on the target's clock); fewer in a queue ``depth`` jobs deep,
    whose every step brings back a snapshot of them all."""
    if clock_mode != "virtual" or not target.capabilities.batch_max:
        return 0
    return max(1, min(target.capabilities.batch_max, WINDOW_JOBS // max(depth, 1)))


class Window:
    """The steps made but not yet judged, at most ``size``. A target that takes calls
    ahead (``capabilities.ahead``) is sent each step's call as the step is made; any
    other is sent the window whole, as one batch, when it is flushed."""

    def __init__(self, target: Target, size: int) -> None:
        self.target, self.size = target, size
        self.ahead = target.capabilities.ahead
        self.pending: list[Pending] = []
        self.fault: TargetFault | None = None  # a post that failed: the window's verdict

    def __bool__(self) -> bool:
        return bool(self.pending)

    def holds(self, op: str) -> bool:
        """Whether a step of ``op`` waits in the window."""
        return any(p.step.op == op for p in self.pending)

    def add(self, pending: Pending) -> bool:
        """Hold ``pending`` (and post its call, ahead); whether the window is now due:
        full, or its target failed."""
        self.pending.append(pending)
        if self.ahead and self.fault is None:
            try:
                cast("Ahead", self.target).post([_call(pending)])
            except TargetFault as exc:
                self.fault = exc
        return len(self.pending) >= self.size or self.fault is not None

    def flush(self) -> Iterator[Judged]:
        """Send every held step not sent yet and yield them with their replies, in step
        order. The window is empty afterwards, whatever the caller does with the rest."""
        held, self.pending = self.pending, []
        fault, self.fault = self.fault, None
        if not held:
            return
        try:
            if fault is not None:
                raise fault
            replies = cast("Ahead", self.target).collect() if self.ahead else self.target.batch([_call(p) for p in held],
                                                                                 snapshots=True)
        except TargetFault as exc:
            # The port failed the batch as a whole (it died, hung, broke the protocol):
            # which call did is unknown, so the first held step carries the failure.
            yield Judged(held[0], exc, (), None)
            return
        for p, reply in zip(held, replies, strict=True):
            yield Judged(p, reply.answer, tuple(reply.dropped), reply.snapshot)


def _call(pending: Pending) -> tuple[str, str, dict[str, Any]]:
    """The target's call of a held step: (op, queue, arguments)."""
    step = pending.step
    return step.op, step.queue, step.args

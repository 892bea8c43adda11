"""A step and what it came to: the values the machine, its runner, the traces, the
reports and a port's client share. ``Step`` is one call as it ran on both sides;
``outcome`` and ``target_outcome`` turn a call into its answer or refusal (a ``Crash``
for what the target raised); a ``Divergence`` is the target leaving the model at a
step; a ``Replayed`` is a trace's steps run again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from emq_kit.check import effect
from emq_kit.check.hang import hang_of
from emq_kit.errors import DriverExited, DriverGarbage, DriverTimeout, KitBug, TargetFault
from emq_model.errors import EmqError
from emq_model.invariants import Violation
from emq_model.snapshot import Snapshot


@dataclass
class Step:
    """One call as it ran on both sides: the machine's record of it and a trace's step
    (emq_kit.trace.format). ``op`` is an op of the spec table, ``forget_row`` (a row
    deleted by hand), ``queue`` (opening a queue by a refused name) or ``raw`` (a call
    past the client, ``emq_kit/check/raw/rule.py``); ``index`` is its place in the
    example, from 1."""

    queue: str
    op: str
    args: dict[str, Any]
    model: Any = None
    target: Any = None
    index: int = 0
    at: int | None = None
    """Under the server clock, the clock a clock op ran at (the model's, inside the call's
    ``TIME`` window): the minimizer makes the time between two of them a ``sleep_ms``
    step (specs/trace.md TR-4c); a trace records it (TR-2), a replay never sends it."""

    def call(self) -> str:
        body = ", ".join(f"{k}={v!r}" for k, v in self.args.items())
        return f"{self.op}({self.queue!r}, {body})"


SLEEP = "sleep_ms"
"""The step of a wait (specs/trace.md TR-2, TR-4c): ``args.ms``, how far the clock moves
on past the last clock op's before the next step; no call, no answers."""
SLEEP_MAX = 60_000
"""The longest wait a ``sleep_ms`` step may ask for (ms): a replay waits it out."""


class ModelBroken(AssertionError):
    """The model broke an invariant the operator's faults do not explain (FLT-2)."""


class Divergence(AssertionError):
    """The target left the model: ``kind`` is answer, snapshot or invariant; ``rule`` the
    spec rule it cites; ``lines`` the evidence in plain words; ``steps`` the example's
    steps up to and including ``step`` (the counterexample, once Hypothesis has shrunk it)."""

    def __init__(self, kind: str, rule: str, step: "Step", lines: list[str], steps: list["Step"] | None = None) -> None:
        self.kind, self.rule, self.step, self.lines = kind, rule, step, lines
        self.steps = list(steps) if steps is not None else [step]
        self.again: list[Step] | None = None  # the same draws run again, when the target did otherwise (DET-1)
        super().__init__(f"{kind} diverges at step {step.index} {step.call()} ({rule}):\n  " + "\n  ".join(lines))


def outcome(fn: Callable[[], Any]) -> Any:
    """A call's answer, or the refusal it raised (refusals compare by code)."""
    try:
        return fn()
    except EmqError as err:
        # a value, kept with its step: its traceback's frames (the frame holding it among
        # them) would make each refusal a cycle for the collector to walk and free
        return err.with_traceback(None)


class Crash:
    """A target call that raised something other than a refusal (a script error, a bad
    reply): always a divergence, never equal to an answer."""

    def __init__(self, exc: Exception) -> None:
        self.exc = exc

    def __repr__(self) -> str:
        return f"raised {type(self.exc).__name__}: {self.exc}"


def target_outcome(fn: Callable[[], Any]) -> Any:
    """``outcome`` for the target side. What the target raised (an error reply of the
    server or a script, a reply of the wrong shape, a port's driver error) becomes a
    ``Crash``; a lost connection is the environment's problem and propagates; anything
    else was raised in the kit's own code (a ``TypeError`` in our client, a redis-py API
    mismatch) and is a ``KitBug``: never a verdict on the target."""
    try:
        return outcome(fn)
    except (ConnectionError, OSError) + connection_errors():
        raise
    except _target_errors() as exc:
        return Crash(hang_of(exc) or exc)  # the embedded fakeredis's bound stopped a script (CC-9)
    except Exception as exc:  # noqa: BLE001 - ours, by elimination
        raise KitBug(exc, "the client") from exc


def died(answer: Any) -> bool:
    """Whether a target's outcome is its driver's death: it exited, hung past the timeout
    or answered garbage, and was killed (DP-14..16)."""
    return isinstance(answer, Crash) and isinstance(answer.exc, (DriverExited, DriverTimeout, DriverGarbage))


def connection_errors() -> tuple[type[Exception], ...]:
    """redis-py's lost connection: the environment's problem, never a verdict."""
    import redis

    return (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)


def refusals() -> tuple[type[Exception], ...]:
    """redis-py's ``NOPERM`` raised by a command of the kit's own (a fault, a raw call's
    fingerprint, a wipe): the user's ACL lacks a rule, the environment's problem, never
    a verdict (a script's own refusal is its step's answer: ``target_outcome``)."""
    import redis

    return (redis.exceptions.NoPermissionError,)


def _target_errors() -> tuple[type[Exception], ...]:
    """The exceptions that carry the target's behaviour, not the kit's: a server's or
    script's error reply, a reply of the wrong shape, a port's driver breaking the
    protocol or failing."""
    import redis

    from emq_live.client import BadReply

    return (redis.exceptions.ResponseError, BadReply, TargetFault)


@dataclass
class Replayed:
    """A replay's result: every step run (answers filled in), and at the first divergence
    its index (1-based), the divergence, both snapshots and the target's violations."""

    steps: list[Step]
    divergence: Divergence | None = None
    index: int = 0
    model: Snapshot | None = None
    target: Snapshot | None = None
    violations: tuple[Violation, ...] = ()

    @property
    def conforms(self) -> bool:
        return self.divergence is None

    @property
    def klass(self) -> str:
        """The divergence's class by its effect (``emq_kit/check/effect.py``)."""
        d = self.divergence
        return effect.klass(d.kind, d.step.op, self.model, self.target) if d is not None else effect.SURFACE

"""What every layout's conformance machine shares: how it picks a rule (``Selection``),
and ``Machine``, the bookkeeping of an example (its start, its steps, the run's figures),
how a divergence is raised (signatures: a known difference ends the example quietly)
and how an example ends (a known difference) and how a run does (a lost server, a kit bug).

A layout's machine (``emq_kit/check/machine.py``'s ``Conformance`` for the four sets,
``emq_kit/layouts/bullmq.py``'s ``BullConformance``) supplies only its rules, their
weights and ops, the state a new example starts from (``begin``), and how a step is run
and judged.
"""

from __future__ import annotations

import contextlib
import time
from bisect import bisect_right
from itertools import accumulate
from typing import Any, Callable, ClassVar, Generic, Iterator, Mapping, TypeVar

from hypothesis.errors import HypothesisException
from hypothesis.stateful import RuleBasedStateMachine, RuleStrategy

from emq_kit import interrupts
from emq_kit._signals import Quiet, Refused
from emq_kit.check.clock import Clock, VirtualClock
from emq_kit.check.signature import signature
from emq_kit.check.step import Divergence, Step, connection_errors, refusals
from emq_kit.check.tally import Run
from emq_kit.errors import KitBug, KitError, TargetFault
from emq_kit.targets.protocol import Opened

AIM = 8
"""How many times its weight a rule that can reach an aimed cell weighs (COV-2)."""


class Selection(RuleStrategy):
    """How the machine picks its next rule: Hypothesis's own way, at a fraction of the
    cost. Hypothesis draws a swarm flag for every rule an example asks about and retries
    a draw that lands on a disabled or invalid rule: about eight choices a step here,
    more than the step's own arguments and most of a step's cost on a fast server. This
    draws the swarm once per example (one byte string: a threshold, then a byte per rule;
    a rule whose byte is below the threshold is off for the example, as in swarm
    testing, but never one of the machine's ``always_on``; zeros, where shrinking goes,
    turn every rule on), then one index a step
    among the rules whose preconditions hold and that are on (all the valid ones if none
    is on). Rules, preconditions and arguments are Hypothesis's (``RuleStrategy``).
    A plain ``RuleBasedStateMachine`` (no ``Machine``: no run, no weights) may use it too:
    every rule then weighs 1 and the focus allows every rule."""

    def __init__(self, machine: RuleBasedStateMachine) -> None:
        super().__init__(machine)
        self.off: set[str] | None = None
        own = machine if isinstance(machine, Machine) else None
        self.weights: Mapping[str, int] = own.weights if own else {}
        # Heaviest first, sorted once: an integer draw leans to 0 (the shrinker's aim, and
        # a constant Hypothesis mixes in), so index 0 must be the most common rule, not
        # whichever sorts first by name (bad_queue, weight 1, would then be drawn far above it).
        self.heaviest = sorted(self.rules, key=lambda r: -self.weights.get(r.function.__name__, 1))
        aimed = own.aimed(own.run.aim) if own else frozenset()
        self.weight = {id(r): self.weights.get(r.function.__name__, 1) * (AIM if r.function.__name__ in aimed else 1)
                       for r in self.rules}
        self.always = frozenset(own.always_on if own else ()) | aimed  # never swarmed off (COV-2)
        self.allowed: list[Any] | None = None  # _in_focus's
        self.gates: list[tuple[Any, tuple[str, ...], tuple[Callable[[Any], Any], ...]]] | None = None  # _valid's
        # The rules laid end to end by weight for each set of valid rules met this
        # example (the swarm is fixed for an example): _weighted's, by _valid's mask.
        self.laid: dict[int, tuple[list[Any], list[int]]] = {}
        self.drawn = 0  # rules drawn: the fence test's proof that Hypothesis draws through this

    def do_draw(self, data: Any) -> tuple[Any, dict[str, Any]]:
        if isinstance(self.machine, Machine) and self.machine.clock.mode != "virtual":
            return self._draw_steady(data)
        valid, mask = self._valid()
        if not valid:  # Hypothesis's own "no progress can be made" error (InvalidDefinition)
            return super().do_draw(data)
        rule = self._weighted(data, valid, mask)
        return rule, {k: data.draw(s) for k, s in rule.arguments_strategies.items()}

    def _valid(self) -> tuple[list[Any], int]:
        """The rules the focus allows whose bundles are not empty and whose preconditions
        hold now (``_holds``, unrolled: asked of every rule at every step), in
        ``_in_focus``'s order, and their positions there as a bit mask."""
        if self.gates is None:
            self.gates = [(r, tuple(b.name for b in r.bundles), tuple(r.preconditions)) for r in self._in_focus()]
        machine, valid, mask = self.machine, [], 0
        for at, (rule, bundles, preconditions) in enumerate(self.gates):
            if bundles and not all(machine.bundle(b) for b in bundles):
                continue
            for holds in preconditions:
                if not holds(machine):
                    break
            else:
                valid.append(rule)
                mask |= 1 << at
        return valid, mask

    def _weighted(self, data: Any, candidates: list[Any], mask: int = -1) -> Any:
        """One of ``candidates`` (the swarm drawn first, once an example), by the
        machine's ``weights``; ``mask`` names ``candidates`` (``_valid``'s; -1: every
        rule in focus)."""
        self.drawn += 1
        if self.off is None:
            swarm = data.draw_bytes(len(self.rules) + 1, len(self.rules) + 1)
            self.off = {r.function.__name__ for r, b in zip(self.rules, swarm[1:])
                        if b < swarm[0] and r.function.__name__ not in self.always}
        laid = self.laid.get(mask)
        if laid is None:
            on = {id(r) for r in candidates if r.function.__name__ not in self.off} or {id(r) for r in candidates}
            live = [r for r in self.heaviest if id(r) in on]
            # One index into the rules laid end to end, each as many times as it weighs.
            laid = self.laid[mask] = (live, list(accumulate(self.weight[id(r)] for r in live)))
        live, ends = laid
        return live[bisect_right(ends, data.draw_integer(0, ends[-1] - 1))]

    def _draw_steady(self, data: Any) -> tuple[Any, dict[str, Any]]:
        """Under the server clock the model's state follows the server's timing (a lease
        may be due in one run and not in the next), so the draws must not follow the
        state, or Hypothesis meets other choices when it replays an example (a
        ``FlakyStrategyDefinition``): the rule is drawn among those the focus allows, its
        arguments drawn, and a rule whose preconditions do not hold now is a tick of 0
        (a machine run under the server clock has a ``tick(delta)`` rule)."""
        rule = self._weighted(data, self._in_focus())
        args = {k: data.draw(s) for k, s in rule.arguments_strategies.items()}
        if self._holds(rule):
            return rule, args
        return next(r for r in self.rules if r.function.__name__ == "tick"), {"delta": 0}

    def _allowed(self, rule: Any) -> bool:
        """A rule some op of which the focus allows (the machine's ``hostile_rules``:
        unless hostile is off). A machine with no run has no focus: every rule."""
        machine = self.machine
        if not isinstance(machine, Machine):
            return True
        focus = machine.run.focus
        ops = machine.rule_ops.get(rule.function.__name__, ())
        if ops and not any(focus.allows(op) for op in ops):
            return False
        return not (rule.function.__name__ in machine.hostile_rules and focus.hostile == "off")

    def _in_focus(self) -> list[Any]:
        """The rules the run's focus allows (``_allowed``), found once: the focus is fixed
        for a run."""
        if self.allowed is None:
            self.allowed = [r for r in self.rules if self._allowed(r)]
        return self.allowed

    def _holds(self, rule: Any) -> bool:
        """The rule's bundles are not empty and its preconditions hold now: ``is_valid``
        without its per-call observability bookkeeping (a description of every
        precondition, built for every rule at every step, cost more than the
        preconditions themselves)."""
        machine = self.machine
        return all(machine.bundle(b.name) for b in rule.bundles) and all(p(machine) for p in rule.preconditions)


M = TypeVar("M", bound="Machine")


class Built(Generic[M]):
    """One run's machine: the zero-argument factory ``run_state_machine_as_test`` calls
    for each example, a layout's machine class with the run's parts. The class is the
    layout's own, never one made per run: Hypothesis keeps each machine class it meets
    (its rules) for the life of the process, and a class made per run kept its run with
    it — every step, every difference's frames — a check's worth of memory per check,
    freed only as the interpreter wound down (seconds, after a long run)."""

    def __init__(self, machine: type[M], target: Any, run: Run, clock: Clock, windowed: bool) -> None:
        self.machine, self.target, self.run, self.clock = machine, target, run, clock
        self.windowed = windowed  # may steps be verified in windows (``emq check``; never replay)

    def __call__(self) -> M:
        return self.machine(self)


class Machine(RuleBasedStateMachine):
    """A layout's model and its target side by side, step by step. Build with
    ``factory(target, run, clock)``. A subclass supplies its rules, ``weights``,
    ``rule_ops`` (the ops each rule may send: a rule none of whose ops the focus allows
    is off), ``hostile_rules`` (off under ``--hostile off``), ``always_on`` (never
    swarmed off), ``begin`` (the state an example starts from) and how its steps run and
    are judged, raising ``diverge(...)``."""

    weights: ClassVar[Mapping[str, int]] = {}
    """How often ``Selection`` picks each rule among those on; a rule not named weighs 1."""
    rule_ops: ClassVar[Mapping[str, tuple[str, ...]]] = {}
    hostile_rules: ClassVar[tuple[str, ...]] = ()
    always_on: ClassVar[tuple[str, ...]] = ()

    def __init__(self, built: Built[Any]) -> None:
        super().__init__()
        self.target: Opened = built.target
        self.run: Run = built.run
        self.clock: Clock = built.clock
        self.windowed = built.windowed
        self.run.starting()
        self._rules_strategy = Selection(self)  # see Selection: Hypothesis reads this attribute
        try:
            self.target.reset()
        except BaseException as exc:  # outside a step: a retry by Hypothesis would meet a restarted target
            self.run.fatal = exc
            raise
        self.run.examples += 1
        self.steps: list[Step] = []
        self._diverged = False
        self.stopped = False  # a known difference ended this example: no more calls
        self.begin()
        if self.run.progress:
            try:
                self.run.progress(self.run)
            except Exception as exc:  # the caller's callback: never the target's crash (FLT-1)
                self.run.fatal = self.run.fatal or KitBug(exc, "the progress callback")
                raise self.run.fatal from exc

    def begin(self) -> None:
        """The layout's state at the start of an example (the target was just reset)."""
        raise NotImplementedError

    @classmethod
    def factory(cls: type[M], target: Any, run: Run, clock: Clock | None = None, *,
                windowed: bool = False) -> Built[M]:
        """A zero-argument factory for ``run_state_machine_as_test`` (the virtual clock
        unless ``clock`` says otherwise; ``windowed``: verify in windows where the machine
        and the target can, see emq_kit/check/window.py)."""
        return Built(cls, target, run, clock or VirtualClock(), windowed)

    @classmethod
    def aimed(cls, aim: frozenset[tuple[str, str]]) -> frozenset[str]:
        """The rules that can send a cell of ``aim`` (COV-2): those whose ops include the
        cell's op."""
        ops = {op for op, _ in aim}
        return frozenset(name for name, sent in cls.rule_ops.items() if ops & set(sent))

    def diverge(self, kind: str, rule: str, step: Step, lines: list[str]) -> Divergence:
        """The divergence to raise; the run notes when it first saw one. When the run
        reports every difference, a known one (or one met while another is being
        shrunk) raises ``Quiet`` instead: the caller ends the example without failing."""
        now = time.perf_counter()
        if self.run.first_failure is None:
            self.run.first_failure = now
        # The steps after ``step`` were generated while it waited in a window: not part of it.
        found = Divergence(kind, rule, step, lines, self.steps[:step.index])
        sig = signature(found)
        self.run.seen_at.setdefault(sig, now)
        self.run.met[sig] += 1
        if self.run.focus.report:
            if sig in self.run.known or (self.run.hunting is not None and sig != self.run.hunting):
                raise Quiet(str(sig))
            if self.run.hunting is None:
                self.run.hunting, self.run.hunted_at = sig, self.run.examples
        self._diverged = True
        self.run.diverged(found)
        return found

    def _record(self, queue: str, op: str, args: dict[str, Any]) -> Step:
        """A new step of this example's trace; past its first, a stopping point for Ctrl-C
        (INT-1): a deep fill, the raw sweep, a long example make many steps between two
        starts, and the steps so far an interrupted run keeps hold one at least."""
        if self.steps:
            interrupts.check()
        step = Step(queue, op, args, index=len(self.steps) + 1)
        self.steps.append(step)
        self.run.current = self.steps
        return step

    @contextlib.contextmanager
    def _ends_the_run(self) -> Iterator[None]:
        """A lost connection (the server went away), a command of the kit's the server's
        ACL refuses, or a kit bug ends the run as itself
        (``run.fatal``), whatever Hypothesis makes of the failure: it replays a failing
        example, and a replay may draw otherwise (under the server clock the draws follow
        the server's timing; a kit bug need not recur), which it would report as a flaky
        search or shrink into another example's divergence (OWN-5: no verdict then)."""
        ending: tuple[type[Exception], ...] = (ConnectionError, OSError, KitBug, *connection_errors(), *refusals())
        try:
            yield
        except ending as exc:
            self.run.fatal = self.run.fatal or exc
            raise
        except (Divergence, Quiet, Refused, HypothesisException, KitError, TargetFault):
            raise
        except Exception as exc:  # the kit's own code raised: a kit bug, never a verdict (FLT-2)
            bug = KitBug(exc)
            self.run.fatal = self.run.fatal or bug
            raise bug from exc

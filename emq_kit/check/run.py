"""``emq check`` as a library call: run the conformance machine against a target under a
profile, and return a ``Report`` (verdict, figures, coverage, the shrunk counterexample).

The ``ci`` and ``thorough`` profiles gate on coverage: they keep running rounds of new
examples (fresh seeds) until every (op, outcome) cell of the spec table is reached, up to
a budget; a cell still unreached then fails the run, so a rule whose precondition never
holds cannot hide.
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from hypothesis import HealthCheck, Phase, Verbosity, settings
from hypothesis import seed as hseed
from hypothesis.reporting import with_reporter
from hypothesis.stateful import run_state_machine_as_test

from emq_kit.check.clock import Clock, ServerClock
from emq_kit.check.coverage import Coverage
from emq_kit.check.machine import Conformance, Divergence, Run, Step
from emq_kit.check.rawrule import raw_cells
from emq_kit.check.target import Target
from emq_kit.layouts import Layout
from emq_kit.layouts import layout as layout_named


@dataclass(frozen=True)
class Profile:
    """How much a run does: examples and steps per example; whether unreached cells fail
    it, and how many extra examples it may spend reaching them."""

    name: str
    examples: int
    steps: int
    gate: bool
    extra_examples: int = 0
    round_examples: int = 100
    sweep: bool = False  # the once-per-run raw sweep (rawrule.RawCalls.raw_sweep) on a target that takes raw calls


SERVER_CLOCK = Profile("server-clock", examples=20, steps=25, gate=False)
"""The server-clock phase of a gated run on a target of our calling convention: its
calls carry no ``now``, so every clock script takes its ``TIME`` branch (CLK-1), and the
model runs inside the server's ``TIME`` window (``ServerClock``, as ``--clock server``)."""

PROFILES = {
    "dev": Profile("dev", examples=30, steps=30, gate=False),
    "ci": Profile("ci", examples=200, steps=50, gate=True, extra_examples=800, sweep=True),
    "thorough": Profile("thorough", examples=2000, steps=100, gate=True, extra_examples=4000, round_examples=500,
                        sweep=True),
}


@dataclass
class Report:
    """What a run found. ``verdict`` is ``conforms``, ``counterexample`` or ``uncovered``."""

    verdict: str
    profile: str
    seed: int
    target: dict[str, Any]
    examples: int
    steps: int
    checks: int
    seconds: float
    reached: int
    total: int
    unreached: list[tuple[str, str]]
    hits: dict[str, int]
    divergence: Divergence | None = None
    shrunk: list[Step] = field(default_factory=list)
    trace: Path | None = None
    trace_text: str = ""
    first_failure: float | None = None  # perf_counter() at the first divergence
    phases: dict[str, dict[str, Any]] = field(default_factory=dict)
    """The once-per-run phases beside the rounds, apart from the figures above (their
    counts depend on the server's clock): ``sweep`` (raw calls the draws leave out) and
    ``server_clock`` (its own examples and steps)."""
    clock: Clock | None = None  # the clock the divergence ran under, when not the run's

    @property
    def steps_per_second(self) -> float:
        return self.steps / self.seconds if self.seconds else 0.0

    @property
    def ok(self) -> bool:
        return self.verdict == "conforms"


def first_divergence(exc: BaseException) -> Divergence | None:
    """The divergence inside what Hypothesis raised (it may group several failures)."""
    if isinstance(exc, Divergence):
        return exc
    for inner in getattr(exc, "exceptions", ()):
        found = first_divergence(inner)
        if found is not None:
            return found
    return None


def run_check(
    target: Target,
    profile: Profile,
    *,
    examples: int | None = None,
    steps: int | None = None,
    seed: int | None = None,
    progress: Callable[[Run], None] | None = None,
    clock: Clock | None = None,
    raw_calls: bool = True,
    layout: Layout | None = None,
) -> Report:
    """Run the ``layout``'s machine (the default layout's when None) on ``target`` under
    ``clock`` (virtual by default) and judge it. On a target that takes raw calls
    (``Target.raw``; ``raw_calls`` False: none), a profile with ``sweep`` first sweeps the
    raw calls the draws leave out, and a gated one ends with the server-clock phase
    (``SERVER_CLOCK``). Exceptions that are not divergences (a server that went away, a
    bug in the kit) propagate."""
    seed = random.randrange(2**32) if seed is None else seed
    layout = layout or layout_named()
    run = Run(progress=progress, coverage=Coverage(layout.cells()), raw_calls=raw_calls)
    raw_on = raw_calls and getattr(target, "raw", False)
    once = raw_on and profile.sweep
    if raw_on:
        run.coverage.total = [*run.coverage.total, *raw_cells(sweep=once)]
    phases: dict[str, dict[str, Any]] = {}
    phase_clock: Clock | None = None
    budget = (examples or profile.examples) + (profile.extra_examples if profile.gate else 0)
    per_round = examples or profile.examples
    divergence: Divergence | None = None
    started = time.perf_counter()
    quiet = logging.getLogger("emq_live")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # dropped-orphan warnings are expected here
    try:
        if once:
            divergence = _sweep(target, run, clock, phases)
        round_no, size = 0, per_round if divergence is None else 0
        while size > 0:
            divergence = _search(layout.machine(target, run, clock), seed + round_no, size, steps or profile.steps)
            if divergence is not None:
                break
            if not profile.gate or not run.coverage.unreached():
                break
            round_no, size = round_no + 1, min(profile.round_examples, budget - run.examples)
        if raw_on and profile.gate and divergence is None and getattr(clock, "mode", "virtual") != "server":
            phase_clock = ServerClock.over(target.conn.redis)  # type: ignore[attr-defined]
            phase = Run(coverage=Coverage(run.coverage.total), raw_calls=raw_calls)
            divergence = _search(layout.machine(target, phase, phase_clock), seed, SERVER_CLOCK.examples,
                                 SERVER_CLOCK.steps)
            phases["server_clock"] = {"examples": phase.examples, "steps": phase.steps,
                                      "seconds": round(time.perf_counter() - phase.started, 3)}
            if divergence is not None and run.first_failure is None:
                run.first_failure = phase.first_failure
    finally:
        quiet.setLevel(level)
    seconds = time.perf_counter() - started
    unreached = run.coverage.unreached()
    verdict = "counterexample" if divergence else ("uncovered" if profile.gate and unreached else "conforms")
    return Report(
        verdict=verdict,
        profile=profile.name,
        seed=seed,
        target=target.describe(),
        examples=run.examples,
        steps=run.steps,
        checks=run.checks,
        seconds=seconds,
        reached=run.coverage.reached(),
        total=len(run.coverage.total),
        unreached=unreached,
        hits={f"{op}/{outcome}": n for (op, outcome), n in run.coverage.hits.items()},
        divergence=divergence,
        shrunk=list(divergence.steps) if divergence else [],
        first_failure=run.first_failure,
        phases=phases,
        clock=phase_clock if divergence is not None and phase_clock is not None else None,
    )


def _search(machine: Callable[[], Any], seed: int, examples: int, steps: int) -> Divergence | None:
    """One round of a machine (a zero-argument factory): ``examples`` examples of up to
    ``steps`` steps from ``seed``; the divergence it found, if any."""
    factory = hseed(seed)(machine)
    config = settings(
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
        verbosity=Verbosity.normal,
        print_blob=False,
        # The explain phase re-runs the failing example many times to annotate
        # which draws matter; our trace says that better, at a fraction of the cost.
        phases=[p for p in Phase if p is not Phase.explain],
    )
    try:
        with with_reporter(lambda _: None):  # the report and the trace say it better
            run_state_machine_as_test(factory, settings=config)
    except BaseException as exc:  # noqa: BLE001 - Hypothesis may group failures
        divergence = first_divergence(exc)
        if divergence is None:
            raise
        return divergence
    return None


def _sweep(target: Target, run: Run, clock: Clock | None, phases: dict[str, dict[str, Any]]) -> Divergence | None:
    """The raw calls the draws leave out (``raw.SWEPT``), once, before the rounds; its
    cells count as the run's; its calls are reported apart (``phases``): how many depends
    on the server's clock (a lease of the server-clock calls may expire between them)."""
    started = time.perf_counter()
    swept = Run(coverage=run.coverage)
    machine = Conformance.factory(target, swept, clock)()
    try:
        machine.raw_sweep()
    except Divergence as d:
        return d
    finally:
        run.first_failure = run.first_failure or swept.first_failure
        phases["sweep"] = {"calls": swept.steps, "seconds": round(time.perf_counter() - started, 3)}
    return None

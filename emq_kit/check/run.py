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

from emq_kit.check.clock import Clock
from emq_kit.check.coverage import Coverage
from emq_kit.check.machine import Divergence, Run, Step
from emq_kit.check.target import Target
from emq_kit.check.window import run_machine
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


PROFILES = {
    "dev": Profile("dev", examples=30, steps=30, gate=False),
    "ci": Profile("ci", examples=200, steps=50, gate=True, extra_examples=800),
    "thorough": Profile("thorough", examples=2000, steps=100, gate=True, extra_examples=4000, round_examples=500),
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
    layout: Layout | None = None,
) -> Report:
    """Run the ``layout``'s machine (the default layout's when None) on ``target`` under
    ``clock`` (virtual by default) and judge it. Exceptions that are not divergences (a
    server that went away, a bug in the kit) propagate."""
    seed = random.randrange(2**32) if seed is None else seed
    layout = layout or layout_named()
    run = Run(progress=progress, coverage=Coverage(layout.cells()))
    budget = (examples or profile.examples) + (profile.extra_examples if profile.gate else 0)
    per_round = examples or profile.examples
    divergence: Divergence | None = None
    started = time.perf_counter()
    quiet = logging.getLogger("emq_live")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # dropped-orphan warnings are expected here
    try:
        round_no, size = 0, per_round
        while size > 0:
            factory = hseed(seed + round_no)(layout.machine(target, run, clock))
            config = settings(
                max_examples=size,
                stateful_step_count=steps or profile.steps,
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
                    run_machine(factory, config)
            except BaseException as exc:  # noqa: BLE001 - Hypothesis may group failures
                divergence = first_divergence(exc)
                if divergence is None:
                    raise
                break
            if not profile.gate or not run.coverage.unreached():
                break
            round_no, size = round_no + 1, min(profile.round_examples, budget - run.examples)
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
    )

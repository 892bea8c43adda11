"""``emq check`` as a library call: run the conformance machine against a target under a
profile, and return a ``Report`` (verdict, figures, coverage, the shrunk counterexample).

The ``ci`` and ``thorough`` profiles gate on coverage: they keep running rounds of new
examples (fresh seeds) until every (op, outcome) cell of the spec table is reached, up to
a budget; a cell still unreached then fails the run, so a rule whose precondition never
holds cannot hide.

A run reports every difference (``emq_kit/check/signature.py``): once a divergence is
found and shrunk, its signature is *known*, later examples that meet it end quietly, and
the search goes on in rounds of fresh seeds until the profile's budget of examples is
spent, shrinking each new signature on its own. ``first=True`` stops at the first.
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
from hypothesis.errors import HypothesisException
from hypothesis.reporting import with_reporter

from emq_kit.check.clock import Clock
from emq_kit.check.coverage import Coverage
from emq_kit.check.fence import SIGNATURE as FENCE
from emq_kit.check.fence import fence_divergence
from emq_kit.check.machine import Divergence, Focus, Run, Step
from emq_kit.check.signature import Signature, ordered, signature
from emq_kit.check.target import Target
from emq_kit.check.window import run_machine
from emq_kit.errors import KitBug, SearchFailed
from emq_kit.layouts import Layout
from emq_kit.layouts import layout as layout_named

REFUSALS_OF_ARGUMENTS = ("EMQKIND", "EMQARG")
"""The outcomes only hostile calls reach: out of focus under ``--hostile off``, the only
ones in focus under ``--hostile only``."""


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
class Difference:
    """One distinct difference: its signature, the shrunk divergence, how many times
    examples met it, seconds from the run's start to the first meeting, and (once
    written) its trace file and printout."""

    signature: Signature
    divergence: Divergence
    shrunk: list[Step]
    seconds: float
    met: int = 1
    trace: Path | None = None
    trace_text: str = ""
    expected: str | None = None  # the reason an expectations file gives, when it lists it


@dataclass
class Report:
    """What a run found. ``verdict`` is ``conforms`` (a gated profile, every cell in
    focus reached, no difference), ``no-divergence`` (dev: not a conformance verdict),
    ``counterexample`` or ``uncovered``."""

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
    differences: list[Difference] = field(default_factory=list)  # lifecycle first, then surface
    not_implemented: list[tuple[str, str]] = field(default_factory=list)  # cells of ops not sent
    out_of_focus: list[tuple[str, str]] = field(default_factory=list)  # cells --hostile leaves out
    op_mix: dict[str, int] = field(default_factory=dict)
    focus: Focus = field(default_factory=Focus)
    fixed: list[tuple[Signature, str]] = field(default_factory=list)  # expected, not met
    expect_file: str | None = None
    rerun: str = ""  # the command that repeats the run (the CLI fills it in)
    gate: bool = False  # whether the profile gates on coverage

    @property
    def steps_per_second(self) -> float:
        return self.steps / self.seconds if self.seconds else 0.0

    @property
    def new(self) -> list[Difference]:
        """The differences no expectations file excuses."""
        return [d for d in self.differences if d.expected is None]

    @property
    def ok(self) -> bool:
        """No new difference, and the coverage the profile demands."""
        return self.verdict in ("conforms", "no-divergence") or (
            self.verdict == "counterexample" and not self.new and not (self.gate and self.unreached))


def first_divergence(exc: BaseException) -> Divergence | None:
    """The divergence inside what Hypothesis raised (it may group several failures)."""
    found = first_of(exc, Divergence)
    return found if isinstance(found, Divergence) else None


def first_of(exc: BaseException, kind: type[BaseException]) -> BaseException | None:
    """The first exception of ``kind`` in what Hypothesis raised (maybe a group)."""
    if isinstance(exc, kind):
        return exc
    for inner in getattr(exc, "exceptions", ()):
        found = first_of(inner, kind)
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
    focus: Focus | None = None,
) -> Report:
    """Run the ``layout``'s machine (the default layout's when None) on ``target`` under
    ``clock`` (virtual by default) and ``focus`` (every op, hostile calls mixed in, every
    difference reported: the default) and judge it. Exceptions that are not divergences
    (a server that went away, a bug in the kit) propagate."""
    seed = random.randrange(2**32) if seed is None else seed
    layout = layout or layout_named()
    focus = focus or Focus()
    run = Run(progress=progress, coverage=Coverage(layout.cells()), focus=focus)
    budget = (examples or profile.examples) + (profile.extra_examples if profile.gate else 0)
    per_round = examples or profile.examples
    found: list[Difference] = []
    searched = 0  # examples generated, not counting those spent shrinking
    started = time.perf_counter()
    quiet = logging.getLogger("emq_live")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # dropped-orphan warnings are expected here
    try:
        round_no, size = 0, per_round
        while size > 0:
            before, run.hunting = run.examples, None
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
                if run.fatal is not None:  # whatever Hypothesis made of it (a flaky test, a group)
                    raise run.fatal from None
                divergence = first_divergence(exc)
                bug = first_of(exc, KitBug)
                if divergence is None and bug is not None:
                    raise bug from None
                if divergence is None and isinstance(exc, HypothesisException):
                    raise SearchFailed(f"the search failed: {type(exc).__name__}: "
                                       f"{str(exc).splitlines()[0] if str(exc) else ''}") from None
                if divergence is None:
                    raise
                sig = signature(divergence)
                run.known.add(sig)
                found.append(Difference(sig, divergence, list(divergence.steps),
                                        run.seen_at.get(sig, time.perf_counter()) - started))
                searched += max(run.hunted_at - before, 1)
                if not focus.report:
                    break
            else:
                searched += run.examples - before
            # The profile's examples are all searched (past any difference found); its
            # extra examples only while a cell in focus is unreached (a gated profile).
            left = per_round - searched
            if profile.gate and _unreached(run, focus):
                left = budget - searched
            round_no, size = round_no + 1, min(profile.round_examples, left)
    finally:
        quiet.setLevel(level)
    seconds = time.perf_counter() - started
    unreached = _unreached(run, focus)
    for d in found:
        d.met = run.met[d.signature]
    fenced = fence_divergence(target)  # DP-9d: known at init, before any example
    found += [Difference(FENCE, fenced, [], 0.0)] if fenced is not None else []
    found = [d for s in ordered([d.signature for d in found]) for d in found if d.signature == s]
    divergence = found[0].divergence if found else None
    verdict = ("counterexample" if found else "uncovered" if profile.gate and unreached
               else "conforms" if profile.gate else "no-divergence")
    return Report(
        verdict=verdict,
        profile=profile.name,
        seed=seed,
        target=target.describe(),
        examples=run.examples,
        steps=run.steps,
        checks=run.checks,
        seconds=seconds,
        reached=len([c for c in run.coverage.total if _in_focus(c, focus) and run.coverage.hits[c]]),
        total=len([c for c in run.coverage.total if _in_focus(c, focus)]),
        unreached=unreached,
        hits={f"{op}/{outcome}": n for (op, outcome), n in run.coverage.hits.items()},
        divergence=divergence,
        shrunk=list(divergence.steps) if divergence else [],
        first_failure=run.first_failure,
        differences=found,
        not_implemented=[c for c in run.coverage.total if not focus.allows(c[0])],
        out_of_focus=[c for c in run.coverage.total if focus.allows(c[0]) and not _in_focus(c, focus)],
        op_mix=dict(run.op_mix.most_common()),
        focus=focus,
        gate=profile.gate,
    )


def _in_focus(cell: tuple[str, str], focus: Focus) -> bool:
    """Whether the focus can reach ``cell`` at all (its op allowed, its outcome one the
    hostile setting sends calls for)."""
    if not focus.allows(cell[0]):
        return False
    hostile = cell[1] in REFUSALS_OF_ARGUMENTS
    return {"both": True, "off": not hostile, "only": hostile}[focus.hostile]


def _unreached(run: Run, focus: Focus) -> list[tuple[str, str]]:
    """Cells in focus no call reached."""
    return [c for c in run.coverage.unreached() if _in_focus(c, focus)]

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
Each is then made 1-minimal (``minimize.py``) and replayed (``reproduce.py``): only a
difference whose steps reproduce it is listed; one that does not is kept apart
(``Report.unreproduced``). Differences are classed by their effect (``effect.py``) and
grouped into causes (``causes.py``).

A check runs as ``PHASES``, in order: the raw sweep, the search's rounds, the
server-clock phase, the minimizer, the replays, the fence. Each is a ``Phase`` (whether
it runs for this check, what it does) acting on one ``Check`` (what the run was asked and
has so far); each returns a typed result whose figures the report keeps
(``Report.phases``), and names itself to the progress meter (``PhaseName``).
"""

from __future__ import annotations

import logging
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Protocol

from hypothesis import HealthCheck, Verbosity, settings
from hypothesis import Phase as HypothesisPhase
from hypothesis import seed as hseed
from hypothesis.errors import Flaky, HypothesisException
from hypothesis.reporting import with_reporter

from emq_kit._signals import ShrinkCut
from emq_kit.check import collector, effect
from emq_kit.check.causes import Cause, causes_of
from emq_kit.check.clock import Clock, ServerClock
from emq_kit.check.coverage import Coverage
from emq_kit.check.fence import SIGNATURE as FENCE
from emq_kit.check.fence import fence_divergence
from emq_kit.check.focus import Focus
from emq_kit.check.machine import Conformance
from emq_kit.check.minimize import STEPS_MAX, minimize
from emq_kit.check.profiles import Profile
from emq_kit.check.raw.rule import raw_cells
from emq_kit.check.reproduce import SHOWN, reproduce
from emq_kit.check.seeded import seed_alone
from emq_kit.check.signature import Signature, signature
from emq_kit.check.step import Divergence, Step
from emq_kit.check.tally import SHRINK_STEPS, PhaseName, Run
from emq_kit.check.window import run_machine
from emq_kit.errors import EXIT_FAIL, EXIT_OK, BadArgument, KitBug, SearchFailed
from emq_kit.layouts import Layout
from emq_kit.layouts import layout as layout_named
from emq_kit.targets.protocol import Target

DET_RULE = "DET-1"
"""The rule a target breaks when the same calls from a reset keyspace give other answers
(specs/lifecycle.md DET-1)."""


SERVER_CLOCK = Profile("server-clock", examples=20, steps=25, gate=False)
"""The server-clock phase of a gated run on a target of our calling convention: its
calls carry no ``now``, so every clock script takes its ``TIME`` branch (CLK-1), and the
model runs inside the server's ``TIME`` window (``ServerClock``, as ``--clock server``)."""



@dataclass
class Difference:
    """One distinct difference: its signature, the shrunk divergence, how many times
    examples met it, seconds from the run's start to the first meeting, and (once
    written) its trace file and printout. Once replayed (``reproduce``): whether its
    steps reproduce it, in how many replays, what the others showed; when they do, the
    divergence and steps are that replay's, ``names`` the renaming it ran under (old id
    -> new) and ``klass`` its class by effect."""

    signature: Signature
    divergence: Divergence
    shrunk: list[Step]
    seconds: float
    met: int = 1
    trace: Path | None = None
    trace_text: str = ""
    expected: str | None = None  # the reason an expectations file gives, when it lists it
    clock: Clock | None = None  # the clock it ran under, its trace's (None: the virtual clock)
    klass: str = effect.LIFECYCLE
    replayed: Any = None  # the replay that reproduced it (the last one that did not)
    names: dict[str, str] = field(default_factory=dict)
    replays: int = 0
    reproduced: bool = True
    seen: list[str] = field(default_factory=list)
    again: list[Step] | None = None  # the same draws run again by Hypothesis, when the target did otherwise (DET-1)
    first: Divergence | None = None  # the search's divergence, before the minimizer (the run ``again`` disagrees with)


@dataclass
class Report:
    """What a run found. ``detail`` is the check's word (specs/verdicts.json, TR-18):
    ``conforms`` (a gated profile, every cell in focus reached, no difference),
    ``no-divergence`` (dev: not a conformance verdict), ``counterexample`` or
    ``uncovered``; ``verdict`` is its word of the vocabulary every command shares."""

    detail: str
    """``unreproduced`` when every difference the run met failed to reproduce;
    ``nondeterministic`` when one of those the search itself saw the target do otherwise
    on the same draws (DET-1)."""
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
    ``server_clock`` (its own examples and steps); a deep run's ``depth`` (DEPTH-5: the
    fill's steps and seconds, the steps after it and theirs, the examples' ends)."""
    differences: list[Difference] = field(default_factory=list)  # lifecycle first, then surface
    unreproduced: list[Difference] = field(default_factory=list)  # met, but no replay of its steps showed it
    causes: list[Cause] = field(default_factory=list)  # the differences grouped, lifecycle first
    not_implemented: list[tuple[str, str]] = field(default_factory=list)  # cells of ops not sent
    out_of_focus: list[tuple[str, str]] = field(default_factory=list)  # cells --hostile or --depth leaves out
    op_mix: dict[str, int] = field(default_factory=dict)
    focus: Focus = field(default_factory=Focus)
    fixed: list[tuple[Signature, str]] = field(default_factory=list)  # expected, not met, its cell reached
    unchecked: list[tuple[Signature, str]] = field(default_factory=list)  # expected, its cell never reached (TR-17a)
    expect_file: str | None = None
    rerun: str = ""  # the command that repeats the run (``emq_kit.check`` fills it in)
    gate: bool = False  # whether the profile gates on coverage
    strict: bool = False  # an expected difference not met (``fixed``) fails the run (``--strict``)
    trace_error: str | None = None  # why a difference's trace could not be written (the report still has it)
    corpus: list[Any] = field(default_factory=list)  # the traces directory replayed first (check/corpus.py Known)

    @property
    def verdict(self) -> str:
        """``conforms``, ``differs`` or ``inconclusive``: the verdict of ``detail``."""
        from emq_kit.report.verdicts import verdict

        return verdict("check", self.detail)

    @property
    def steps_per_second(self) -> float:
        return self.steps / self.seconds if self.seconds else 0.0

    @property
    def new(self) -> list[Difference]:
        """The differences (reproduced or not) no expectations file excuses."""
        return [d for d in [*self.differences, *self.unreproduced] if d.expected is None]

    @property
    def ok(self) -> bool:
        """No new difference, no known trace that still fails (``corpus``), and the
        coverage the profile demands."""
        if any(k.regression for k in self.corpus):
            return False
        return self.detail in ("conforms", "no-divergence") or (
            self.detail in ("counterexample", "unreproduced", "nondeterministic") and not self.new
            and not (self.gate and self.unreached))

    @property
    def exit_code(self) -> int:
        """What ``emq check`` exits with: 0 the run passed (``ok``, and under ``strict``
        every expected difference met), 1 it did not."""
        return EXIT_OK if self.ok and not (self.strict and self.fixed) else EXIT_FAIL


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


@dataclass
class Check:
    """One check as its phases see it: what it was asked (the target, profile, layout,
    focus, clock, seed and budgets) and what it has so far (``run``, the differences
    ``found``, the figures of each phase in ``phases``, the report's keys)."""

    target: Target
    profile: Profile
    layout: Layout
    focus: Focus
    clock: Clock | None
    seed: int
    examples: int | None
    steps: int | None
    shrink_steps: int
    run: Run
    raw_on: bool
    started: float = field(default_factory=time.perf_counter)
    found: list[Difference] = field(default_factory=list)
    unreproduced: list[Difference] = field(default_factory=list)
    phases: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def sweeps(self) -> bool:
        """The once-per-run raw sweep: a profile with ``sweep`` on a target taking raw calls."""
        return self.raw_on and self.profile.sweep

    @cached_property
    def kept(self) -> list[Difference]:
        """The differences to minimize and replay. ``Run.halt``: the halting difference
        is listed as met (a server still running its hang takes no replay at all; a dead
        driver's death needs all it ran before). Decided once, when the minimizer starts."""
        if self.run.halt:
            return [] if self.target.stuck else self.found[:-1]
        return self.found

    def now_in(self, name: PhaseName) -> None:
        """The progress line says the phase the run is in."""
        self.run.phase = name
        if self.run.progress:
            self.run.progress(self.run)

    def record(self, divergence: Divergence, clock: Clock | None) -> None:
        """``divergence``, found under ``clock``, is one of the run's differences."""
        _record(self.run, self.found, divergence, self.started, clock)


class Result(Protocol):
    """What a phase did, typed; ``figures`` are what the report keeps of it
    (``Report.phases``: figures by name, in the order the phases ran)."""

    def figures(self) -> dict[str, dict[str, Any]]: ...


@dataclass(frozen=True)
class Swept:
    """The sweep: raw calls sent (their count depends on the server's clock: a lease of
    the server-clock calls may expire between them)."""

    calls: int
    seconds: float

    def figures(self) -> dict[str, dict[str, Any]]:
        return {"sweep": {"calls": self.calls, "seconds": round(self.seconds, 3)}}


@dataclass(frozen=True)
class Searched:
    """The search's rounds: Hypothesis's shrinking of the differences they met (checked
    steps spent, budget, rounds the budget cut, seconds; ``None``: none met) and the
    rounds aimed at unreached cells (COV-2; ``None``: none was)."""

    shrink: dict[str, Any] | None
    aim: dict[str, Any] | None

    def figures(self) -> dict[str, dict[str, Any]]:
        return {**({"shrink": self.shrink} if self.shrink else {}), **({"aim": self.aim} if self.aim else {})}


@dataclass(frozen=True)
class ServerClocked:
    """The server-clock phase: its own examples and steps."""

    examples: int
    steps: int
    seconds: float

    def figures(self) -> dict[str, dict[str, Any]]:
        return {"server_clock": {"examples": self.examples, "steps": self.steps, "seconds": round(self.seconds, 3)}}


@dataclass(frozen=True)
class Minimized:
    """The kit's minimizer over the differences kept: steps replayed, its budget, the
    steps it cut."""

    steps: int
    cut: int
    seconds: float

    def figures(self) -> dict[str, dict[str, Any]]:
        return {"minimize": {"steps": self.steps, "budget": STEPS_MAX, "cut": self.cut,
                             "seconds": round(self.seconds, 3)}}


@dataclass(frozen=True)
class Reproduced:
    """The replays of the differences kept: how many, and how many reproduced."""

    replays: int
    reproduced: int
    unreproduced: int
    seconds: float

    def figures(self) -> dict[str, dict[str, Any]]:
        return {"reproduce": {"replays": self.replays, "reproduced": self.reproduced,
                              "unreproduced": self.unreproduced, "seconds": round(self.seconds, 3)}}


@dataclass(frozen=True)
class Phase:
    """One phase of a check (as Schemathesis's engine phases): its ``name``, whether it
    runs for a check (``runs``), and what it does (``execute``: its typed result, or
    ``None`` when it has no figures to report)."""

    name: str
    runs: Callable[[Check], bool]
    execute: Callable[[Check], Result | None]


def _always(check: Check) -> bool:
    return True


def _sweep(check: Check) -> Swept:
    """The raw calls the draws leave out (``SWEPT``), once, before the rounds; its cells
    count as the run's; a difference it finds is one of the run's."""
    check.now_in(PhaseName.SWEEP)
    run = check.run
    swept = Run(coverage=run.coverage, focus=run.focus, raw_calls=run.raw_calls)
    machine = Conformance.factory(check.target, swept, check.clock)()
    try:
        machine.raw_sweep()
    except Divergence as d:
        check.record(d, check.clock)
    finally:
        run.first_failure = run.first_failure or swept.first_failure
    return Swept(swept.steps, time.perf_counter() - swept.started)


def _search(check: Check) -> Searched:
    """Rounds of fresh seeds: the profile's examples searched past any difference found
    (the first only, without ``focus.report``); a gated profile's extra examples while a
    cell in focus is unreached, aimed at what is (COV-2)."""
    run, profile, focus = check.run, check.profile, check.focus
    run.phase = PhaseName.SEARCH
    per_round = check.examples or profile.examples
    budget = per_round + (profile.extra_examples if profile.gate else 0)
    searched = 0  # examples generated, not counting those spent shrinking
    round_no, size = 0, per_round if focus.report or not check.found else 0
    aiming = False  # COV-2: past the nominal examples a gated round aims at what is still unreached
    aims: frozenset[tuple[str, str]] = frozenset()
    aimed = {"rounds": 0, "examples": 0, "steps": 0, "calls": 0}
    shrunk: dict[str, Any] | None = None
    spent: dict[str, float] = {"steps": 0, "budget": check.shrink_steps, "cut": 0, "seconds": 0.0}
    while size > 0:
        before, run.hunting, run.shrinking, run.best, cuts_before = run.examples, None, False, None, run.cuts
        # an aimed round's calls are its phase's, not the search's mix
        run.aim = frozenset(_unreached(run, focus)) if aiming else frozenset()
        mix, steps_before = run.op_mix, run.steps
        if run.aim:
            run.op_mix, aims = Counter(), aims | run.aim
        try:
            divergence = _round(check.layout.machine(check.target, run, check.clock), check.seed + round_no, size,
                                check.steps or profile.steps, run)
        finally:
            if run.aim:
                aimed = {"rounds": aimed["rounds"] + 1, "examples": aimed["examples"] + run.examples - before,
                         "steps": aimed["steps"] + run.steps - steps_before,
                         "calls": aimed["calls"] + sum(run.op_mix.values())}
                run.op_mix, run.aim = mix, frozenset()
        if divergence is not None:
            check.record(divergence, check.clock)
            searched += max(run.hunted_at - before, 1)
            spent["steps"] += run.steps - run.shrink_from
            spent["cut"] += run.cuts - cuts_before
            if run.shrinking:  # this round's wall time from its first failure on
                spent["seconds"] += time.perf_counter() - run.shrink_started
            shrunk = {**spent, "seconds": round(float(spent["seconds"]), 3)}
            if not focus.report or run.halt:  # a hang still running, a driver dead (Run.halt)
                break
        else:
            searched += run.examples - before
        # The profile's examples are all searched (past any difference found); its
        # extra examples only while a cell in focus is unreached (a gated profile).
        left = per_round - searched
        if profile.gate and _unreached(run, focus):
            left, run.budget = budget - searched, budget
        aiming = profile.gate and searched >= per_round  # the next round's, and its size
        round_no, size = round_no + 1, min(profile.aim_examples if aiming else profile.round_examples, left)
    aim = {**aimed, "cells": " ".join(f"{op}/{outcome}" for op, outcome in sorted(aims))} if aims else None
    return Searched(shrunk, aim)


def _server_clock_runs(check: Check) -> bool:
    """A gated run on a target of our calling convention, unless it stopped at its first
    difference or halted, or already ran under the server clock."""
    return (check.raw_on and check.profile.gate and (check.focus.report or not check.found)
            and not check.run.halt and getattr(check.clock, "mode", "virtual") != "server")


def _server_clock(check: Check) -> ServerClocked:
    """``SERVER_CLOCK``'s examples on the server's clock, the run's known differences
    ending its examples quietly; a new one is one of the run's."""
    check.now_in(PhaseName.SERVER_CLOCK)
    run, target = check.run, check.target
    assert target.conn is not None  # raw calls run over it (Capabilities.raw)
    clock = ServerClock.over(target.conn.redis)
    phase = Run(coverage=Coverage(run.coverage.total), raw_calls=check.raw_on, focus=check.focus, known=run.known,
                shrink_budget=check.shrink_steps)
    divergence = _round(check.layout.machine(target, phase, clock), check.seed, SERVER_CLOCK.examples,
                        SERVER_CLOCK.steps, phase)
    done = ServerClocked(phase.examples, phase.steps, time.perf_counter() - phase.started)
    if divergence is not None:
        run.met.update(phase.met)
        run.seen_at = {**phase.seen_at, **run.seen_at}
        check.record(divergence, clock)
        if run.first_failure is None:
            run.first_failure = phase.first_failure
    return done


def _found_any(check: Check) -> bool:
    return bool(check.found)


def _minimize(check: Check) -> Minimized:
    """Each difference kept made 1-minimal by the kit's own minimizer."""
    started, replayed, cuts = time.perf_counter(), 0, 0
    for d in check.found:
        d.met = check.run.met[d.signature]
    for d in check.kept:  # replaying a counterexample drops its orphans again: still quiet
        check.run.current = list(d.divergence.steps)  # what an interrupt keeps: the difference, not minimal yet
        check.now_in(PhaseName.MINIMIZE)
        made = minimize(d.divergence, d.signature, check.target, check.layout.replay, d.clock,
                        settings=check.layout.settings)
        d.divergence, d.shrunk = made.divergence, list(made.divergence.steps)
        replayed, cuts = replayed + made.replayed, cuts + made.cut
    return Minimized(replayed, cuts, time.perf_counter() - started)


def _kept_any(check: Check) -> bool:
    return bool(check.kept)


def _reproduce(check: Check) -> Reproduced:
    """Replay each difference kept on the reset target, on its clock (``reproduce``):
    those a replay shows stay the run's differences (their divergence, steps and class
    that replay's), those none does are ``unreproduced``."""
    check.now_in(PhaseName.REPRODUCE)
    started, replays = time.perf_counter(), 0
    kept = check.kept
    shown: list[Difference] = []
    for d in kept:
        check.run.current = list(d.shrunk)  # what an interrupt keeps: the difference, minimal now
        made = reproduce(d.shrunk, d.signature, check.target, check.layout.replay, d.clock)
        replays += made.replays
        d.replays, d.reproduced, d.seen, d.replayed = made.replays, made.reproduced, made.seen, made.replayed
        if d.again is not None and made.reproduced:  # the search saw the same draws do otherwise (DET-1)
            d.reproduced, d.seen = False, [*made.seen, SHOWN]
        if d.reproduced:
            d.names, d.klass = made.names, made.replayed.klass
            d.divergence, d.shrunk = made.replayed.divergence, list(made.replayed.steps)
        (shown if d.reproduced else check.unreproduced).append(d)
    check.found = shown + [d for d in check.found if all(d is not k for k in kept)]
    return Reproduced(replays, len(shown), len(check.unreproduced), time.perf_counter() - started)


def _fence(check: Check) -> None:
    """DP-9d: a target whose fence disagrees, known at init, before any example."""
    fenced = fence_divergence(check.target)
    if fenced is not None:
        check.found.append(Difference(FENCE, fenced, [], 0.0, klass=effect.SURFACE))


PHASES: tuple[Phase, ...] = (
    Phase("sweep", lambda check: check.sweeps, _sweep),
    Phase("search", _always, _search),
    Phase("server_clock", _server_clock_runs, _server_clock),
    Phase("minimize", _found_any, _minimize),
    Phase("reproduce", _kept_any, _reproduce),
    Phase("fence", _always, _fence),
)
"""A check's phases, in the order they run."""


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
    focus: Focus | None = None,
    shrink_steps: int = SHRINK_STEPS,
) -> Report:
    """Run the ``layout``'s machine (the default layout's when None) on ``target`` under
    ``clock`` (virtual by default) and ``focus`` (every op, hostile calls mixed in, every
    difference reported: the default) and judge it, phase by phase (``PHASES``). On a
    target that takes raw calls (``Target.raw``; ``raw_calls`` False, ``--hostile off``
    or a focus without ``raw``: none), a profile with ``sweep`` first sweeps the raw calls
    the draws leave out, and a gated one ends with the server-clock phase
    (``SERVER_CLOCK``); a difference either finds is one of the run's. ``shrink_steps``:
    the checked steps Hypothesis's shrinker may run for each difference, after which the
    shortest divergence so far goes to the minimizer (``phases["shrink"]``: steps spent,
    budget, rounds it cut, seconds). Exceptions that are not divergences (a server that
    went away, a bug in the kit) propagate."""
    seed = random.randrange(2**32) if seed is None else seed
    layout = layout or layout_named()
    focus = focus or Focus()
    raw_on = bool(raw_calls and focus.hostile != "off" and focus.allows("raw") and target.capabilities.raw)
    if isinstance(shrink_steps, bool) or not isinstance(shrink_steps, int) or shrink_steps < 0:
        raise BadArgument(f"shrink_steps must be an integer >= 0, not {shrink_steps!r}")
    run = Run(progress=progress, coverage=Coverage(layout.cells()), focus=focus, raw_calls=raw_on,
              shrink_budget=shrink_steps, budget=examples or profile.examples)
    check = Check(target, profile, layout, focus, clock, seed, examples, steps, shrink_steps, run, raw_on)
    if raw_on:
        run.coverage.total = [*run.coverage.total, *raw_cells(sweep=check.sweeps)]
    quiet = logging.getLogger("emq_live")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # dropped-orphan warnings are expected here
    try:
        with collector.spaced():
            for phase in PHASES:
                if phase.runs(check):
                    result = phase.execute(check)
                    if result is not None:
                        check.phases.update(result.figures())
    finally:
        quiet.setLevel(level)
    return _report(check)


def _report(check: Check) -> Report:
    """The report of a check whose phases all ran: its differences lifecycle first, each
    class in the order found, and the verdict."""
    run, focus, profile = check.run, check.focus, check.profile
    found = [d for k in effect.CLASSES for d in check.found if d.klass == k]
    unreproduced, unreached = check.unreproduced, _unreached(run, focus)
    divergence = found[0].divergence if found else None
    reached, total = run.cells()
    detail = ("counterexample" if found else "nondeterministic" if any(d.again for d in unreproduced)
               else "unreproduced" if unreproduced
               else "uncovered" if profile.gate and unreached else "conforms" if profile.gate else "no-divergence")
    return Report(
        detail=detail,
        profile=profile.name,
        seed=check.seed,
        target=check.target.describe(),
        examples=run.examples,
        steps=run.steps,
        checks=run.checks,
        seconds=time.perf_counter() - check.started,
        reached=reached,
        total=total,
        unreached=unreached,
        hits={f"{op}/{outcome}": n for (op, outcome), n in run.coverage.hits.items()},
        divergence=divergence,
        shrunk=list(divergence.steps) if divergence else [],
        first_failure=run.first_failure,
        phases={**(run.deep.figures() if focus.depth else {}), **check.phases},
        differences=found,
        unreproduced=unreproduced,
        causes=causes_of(found),
        not_implemented=[c for c in run.coverage.total if not focus.implements(c)] + _uncallable(check),
        out_of_focus=[c for c in run.coverage.total if focus.implements(c) and not focus.reaches(c)],
        op_mix=dict(run.op_mix.most_common()),
        focus=focus,
        gate=profile.gate,
    )


def _record(run: Run, found: list[Difference], divergence: Divergence, started: float,
            clock: Clock | None) -> Signature:
    """Make ``divergence``, found under ``clock``, one of the run's differences (known
    from now on): its signature."""
    sig = signature(divergence)
    run.known.add(sig)
    run.met[sig] = max(run.met[sig], 1)
    found.append(Difference(sig, divergence, list(divergence.steps), run.seen_at.get(sig, time.perf_counter()) - started,
                            clock=clock, again=divergence.again, first=divergence))
    return sig


def search_settings(examples: int, steps: int) -> settings:
    """Hypothesis's settings for one round of ``examples`` examples of up to ``steps``
    steps (bench's ``hypothesis.floor`` runs an empty machine under the same)."""
    return settings(
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
        verbosity=Verbosity.normal,
        print_blob=False,
        # The explain phase re-runs the failing example many times to annotate
        # which draws matter; our trace says that better, at a fraction of the cost.
        phases=[p for p in HypothesisPhase if p is not HypothesisPhase.explain],
        # One difference a round: the run finds the others in rounds of its own (and
        # Hypothesis would go on generating for up to 10 s of wall time after a failure,
        # so what it shrank would depend on the machine's load).
        report_multiple_bugs=False,
    )


def _round(machine: Callable[[], Any], seed: int, examples: int, steps: int, run: Run) -> Divergence | None:
    """One round of a machine (a zero-argument factory) on ``run``: ``examples`` examples
    of up to ``steps`` steps from ``seed`` (windows of steps, emq_kit/check/window.py);
    the divergence it found, if any. An error that ends the run (``run.fatal``) and a kit
    bug are raised as themselves, a failed search as ``SearchFailed``."""
    factory = hseed(seed)(machine)
    config = search_settings(examples, steps)
    try:
        with with_reporter(lambda _: None), seed_alone():  # the report and the trace say it better
            run_machine(factory, config)
    except BaseException as exc:  # noqa: BLE001 - Hypothesis may group failures
        if run.fatal is not None:  # whatever Hypothesis made of it (a flaky test, a group)
            raise run.fatal from None
        if first_of(exc, ShrinkCut) is not None and run.best is not None:
            run.cuts += 1
            return run.best  # the budget ended the shrinking: the shortest divergence so far
        divergence = first_divergence(exc)
        bug = first_of(exc, KitBug)
        if divergence is None and bug is not None:
            raise bug from None
        flaky = first_of(exc, Flaky)
        if flaky is not None:  # the same draws ran twice and the target did otherwise (DET-1)
            return _unsteady(divergence or run.best, run, flaky, getattr(machine, "clock", None))
        if divergence is None and isinstance(exc, HypothesisException):
            raise SearchFailed(f"the search failed: {type(exc).__name__}: "
                               f"{str(exc).splitlines()[0] if str(exc) else ''}") from None
        if divergence is None:
            raise
        return divergence
    return None


def _unsteady(found: Divergence | None, run: Run, flaky: BaseException, clock: Clock | None) -> Divergence:
    """Hypothesis ran an example's draws again and the target did otherwise (``flaky``: it
    passed, failed elsewhere, or its answers led the machine to other draws): the first
    run's divergence (``found``; without one, the latest example's last step, under
    DET-1), with ``again`` the run that disagreed — under the virtual clock, where a
    target's answers are a function of its calls (DET-1); under the server clock a
    deadline may fall otherwise, and its replays decide (TR-7)."""
    again = list(run.current)
    if getattr(clock, "mode", "virtual") != "virtual" and found is not None:
        return found
    if found is None:
        last = again[-1] if again else Step("", "init", {}, index=0)
        found = Divergence("answer", DET_RULE, last, [
            f"Hypothesis ran the same draws twice and the target's answers led the machine to other calls "
            f"({type(flaky).__name__})"], again)
    if again and again is not found.steps:
        found.again = again
    return found


def _uncallable(check: Check) -> list[tuple[str, str]]:
    """The raw calls' cells of a target that does not declare the raw capability: never
    tried, so not implemented rather than unreached (CMP-8); a target that has it
    counts them in its coverage."""
    return [] if check.target.capabilities.raw else raw_cells(sweep=check.profile.sweep)


def _unreached(run: Run, focus: Focus) -> list[tuple[str, str]]:
    """Cells in focus no call reached."""
    return [c for c in run.coverage.unreached() if focus.reaches(c)]

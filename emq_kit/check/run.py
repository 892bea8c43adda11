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
"""

from __future__ import annotations

import logging
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from hypothesis import HealthCheck, Phase, Verbosity, settings
from hypothesis import seed as hseed
from hypothesis.errors import Flaky, HypothesisException
from hypothesis.reporting import with_reporter

from emq_kit._signals import ShrinkCut
from emq_kit.check import effect
from emq_kit.check.causes import Cause, causes_of
from emq_kit.check.clock import Clock, ServerClock
from emq_kit.check.coverage import Coverage
from emq_kit.check.fence import SIGNATURE as FENCE
from emq_kit.check.fence import fence_divergence
from emq_kit.check.focus import Focus
from emq_kit.check.machine import Conformance
from emq_kit.check.minimize import STEPS_MAX, minimize
from emq_kit.check.raw.rule import raw_cells
from emq_kit.check.reproduce import SHOWN, reproduce
from emq_kit.check.seeded import seed_alone
from emq_kit.check.signature import Signature, signature
from emq_kit.check.step import Divergence, Step
from emq_kit.check.tally import SHRINK_STEPS, Run
from emq_kit.check.window import run_machine
from emq_kit.errors import EXIT_FAIL, EXIT_OK, BadArgument, KitBug, SearchFailed
from emq_kit.layouts import Layout
from emq_kit.layouts import layout as layout_named
from emq_kit.targets.protocol import Target
from emq_model import errors

DET_RULE = "DET-1"
"""The rule a target breaks when the same calls from a reset keyspace give other answers
(specs/lifecycle.md DET-1)."""

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
    sweep: bool = False  # the once-per-run raw sweep (raw.rule.RawCalls.raw_sweep) on a target that takes raw calls


SERVER_CLOCK = Profile("server-clock", examples=20, steps=25, gate=False)
"""The server-clock phase of a gated run on a target of our calling convention: its
calls carry no ``now``, so every clock script takes its ``TIME`` branch (CLK-1), and the
model runs inside the server's ``TIME`` window (``ServerClock``, as ``--clock server``)."""

PROFILES = {
    "dev": Profile("dev", examples=30, steps=30, gate=False),
    "ci": Profile("ci", examples=200, steps=50, gate=True, extra_examples=800, round_examples=25, sweep=True),
    "thorough": Profile("thorough", examples=2000, steps=100, gate=True, extra_examples=4000, round_examples=500,
                        sweep=True),
}


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
    """What a run found. ``verdict`` is ``conforms`` (a gated profile, every cell in
    focus reached, no difference), ``no-divergence`` (dev: not a conformance verdict),
    ``counterexample`` or ``uncovered``."""

    verdict: str
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
    ``server_clock`` (its own examples and steps)."""
    differences: list[Difference] = field(default_factory=list)  # lifecycle first, then surface
    unreproduced: list[Difference] = field(default_factory=list)  # met, but no replay of its steps showed it
    causes: list[Cause] = field(default_factory=list)  # the differences grouped, lifecycle first
    not_implemented: list[tuple[str, str]] = field(default_factory=list)  # cells of ops not sent
    out_of_focus: list[tuple[str, str]] = field(default_factory=list)  # cells --hostile or --depth leaves out
    op_mix: dict[str, int] = field(default_factory=dict)
    focus: Focus = field(default_factory=Focus)
    fixed: list[tuple[Signature, str]] = field(default_factory=list)  # expected, not met
    expect_file: str | None = None
    rerun: str = ""  # the command that repeats the run (``emq_kit.check`` fills it in)
    gate: bool = False  # whether the profile gates on coverage
    strict: bool = False  # an expected difference not met (``fixed``) fails the run (``--strict``)
    trace_error: str | None = None  # why a difference's trace could not be written (the report still has it)
    corpus: list[Any] = field(default_factory=list)  # the traces directory replayed first (check/corpus.py Known)

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
        return self.verdict in ("conforms", "no-divergence") or (
            self.verdict in ("counterexample", "unreproduced", "nondeterministic") and not self.new
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
    difference reported: the default) and judge it. On a target that takes raw calls
    (``Target.raw``; ``raw_calls`` False, ``--hostile off`` or a focus without ``raw``:
    none), a profile with ``sweep`` first sweeps the raw calls the draws leave out, and a
    gated one ends with the server-clock phase (``SERVER_CLOCK``); a difference either
    finds is one of the run's. ``shrink_steps``: the checked steps Hypothesis's shrinker
    may run for each difference, after which the shortest divergence so far goes to the
    minimizer (``phases["shrink"]``: steps spent, budget, rounds it cut, seconds).
    Exceptions that are not divergences (a server that went away, a bug in the kit)
    propagate."""
    seed = random.randrange(2**32) if seed is None else seed
    layout = layout or layout_named()
    focus = focus or Focus()
    raw_on = bool(raw_calls and focus.hostile != "off" and focus.allows("raw") and target.capabilities.raw)
    if isinstance(shrink_steps, bool) or not isinstance(shrink_steps, int) or shrink_steps < 0:
        raise BadArgument(f"shrink_steps must be an integer >= 0, not {shrink_steps!r}")
    run = Run(progress=progress, coverage=Coverage(layout.cells()), focus=focus, raw_calls=raw_on,
              shrink_budget=shrink_steps)
    once = raw_on and profile.sweep
    if raw_on:
        run.coverage.total = [*run.coverage.total, *raw_cells(sweep=once)]
    phases: dict[str, dict[str, Any]] = {}
    budget = (examples or profile.examples) + (profile.extra_examples if profile.gate else 0)
    per_round = examples or profile.examples
    found: list[Difference] = []
    searched = 0  # examples generated, not counting those spent shrinking
    started = time.perf_counter()
    quiet = logging.getLogger("emq_live")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # dropped-orphan warnings are expected here
    try:
        run.budget = per_round

        def now_in(phase: str) -> None:  # the progress line says the phase the run is in
            run.phase = phase
            if run.progress:
                run.progress(run)

        if once:
            now_in("sweeping")
            swept = _sweep(target, run, clock, phases)
            if swept is not None:
                _record(run, found, swept, started, clock)
        run.phase = "searching"
        round_no, size = 0, per_round if focus.report or not found else 0
        aims: frozenset[tuple[str, str]] = frozenset()
        aimed = {"rounds": 0, "examples": 0, "steps": 0, "calls": 0}
        shrunk: dict[str, float] = {"steps": 0, "budget": shrink_steps, "cut": 0, "seconds": 0.0}
        while size > 0:
            before, run.hunting, run.shrinking, run.best, cuts_before = run.examples, None, False, None, run.cuts
            # COV-2: past the nominal examples a gated round aims at what is still unreached;
            # its calls are its phase's, not the search's mix
            run.aim = frozenset(_unreached(run, focus)) if profile.gate and searched >= per_round else frozenset()
            mix, steps_before = run.op_mix, run.steps
            if run.aim:
                run.op_mix, aims = Counter(), aims | run.aim
            try:
                divergence = _search(layout.machine(target, run, clock), seed + round_no, size,
                                     steps or profile.steps, run)
            finally:
                if run.aim:
                    aimed = {"rounds": aimed["rounds"] + 1, "examples": aimed["examples"] + run.examples - before,
                             "steps": aimed["steps"] + run.steps - steps_before,
                             "calls": aimed["calls"] + sum(run.op_mix.values())}
                    run.op_mix, run.aim = mix, frozenset()
            if divergence is not None:
                _record(run, found, divergence, started, clock)
                searched += max(run.hunted_at - before, 1)
                shrunk["steps"] += run.steps - run.shrink_from
                shrunk["cut"] += run.cuts - cuts_before
                if run.shrinking:  # this round's wall time from its first failure on
                    shrunk["seconds"] += time.perf_counter() - run.shrink_started
                phases["shrink"] = {**shrunk, "seconds": round(float(shrunk["seconds"]), 3)}
                if not focus.report or run.halt:  # a hang still running, a driver dead (Run.halt)
                    break
            else:
                searched += run.examples - before
            # The profile's examples are all searched (past any difference found); its
            # extra examples only while a cell in focus is unreached (a gated profile).
            left = per_round - searched
            if profile.gate and _unreached(run, focus):
                left, run.budget = budget - searched, budget
            round_no, size = round_no + 1, min(profile.round_examples, left)
        if aims:
            phases["aim"] = {**aimed, "cells": " ".join(f"{op}/{outcome}" for op, outcome in sorted(aims))}
        if (raw_on and profile.gate and (focus.report or not found) and not run.halt
                and getattr(clock, "mode", "virtual") != "server"):
            now_in("checking the server clock")
            assert target.conn is not None  # raw calls run over it (Capabilities.raw)
            phase_clock = ServerClock.over(target.conn.redis)
            phase = Run(coverage=Coverage(run.coverage.total), raw_calls=raw_on, focus=focus, known=run.known,
                        shrink_budget=shrink_steps)
            divergence = _search(layout.machine(target, phase, phase_clock), seed, SERVER_CLOCK.examples,
                                 SERVER_CLOCK.steps, phase)
            phases["server_clock"] = {"examples": phase.examples, "steps": phase.steps,
                                      "seconds": round(time.perf_counter() - phase.started, 3)}
            if divergence is not None:
                run.met.update(phase.met)
                run.seen_at = {**phase.seen_at, **run.seen_at}
                _record(run, found, divergence, started, phase_clock)
                if run.first_failure is None:
                    run.first_failure = phase.first_failure
        unreached = _unreached(run, focus)
        minimized, replayed, cuts = time.perf_counter(), 0, 0
        # Run.halt: the halting difference is listed as met (a server still running its
        # hang takes no replay at all; a dead driver's death needs all it ran before)
        kept = ([] if target.stuck else found[:-1]) if run.halt else found
        for d in found:
            d.met = run.met[d.signature]
        for d in kept:  # replaying a counterexample drops its orphans again: still quiet
            run.current = list(d.divergence.steps)  # what an interrupt keeps: the difference, not minimal yet
            now_in("minimizing")  # the kit's own minimizer
            made = minimize(d.divergence, d.signature, target, layout.replay, d.clock,
                            settings=layout.settings)
            d.divergence, d.shrunk = made.divergence, list(made.divergence.steps)
            replayed, cuts = replayed + made.replayed, cuts + made.cut
        if found:
            phases["minimize"] = {"steps": replayed, "budget": STEPS_MAX, "cut": cuts,
                                  "seconds": round(time.perf_counter() - minimized, 3)}
        if kept:
            now_in("reproducing")
        shown, unreproduced = _reproduced(kept, target, layout, phases)
        found = shown + [d for d in found if all(d is not k for k in kept)]
    finally:
        quiet.setLevel(level)
    fenced = fence_divergence(target)  # DP-9d: known at init, before any example
    found += [Difference(FENCE, fenced, [], 0.0, klass=effect.SURFACE)] if fenced is not None else []
    found = [d for k in effect.CLASSES for d in found if d.klass == k]  # lifecycle first, each in the order found
    seconds = time.perf_counter() - started
    divergence = found[0].divergence if found else None
    verdict = ("counterexample" if found else "nondeterministic" if any(d.again for d in unreproduced)
               else "unreproduced" if unreproduced
               else "uncovered" if profile.gate and unreached else "conforms" if profile.gate else "no-divergence")
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
        phases=phases,
        differences=found,
        unreproduced=unreproduced,
        causes=causes_of(found),
        not_implemented=[c for c in run.coverage.total if not implemented(c, focus)],
        out_of_focus=[c for c in run.coverage.total if implemented(c, focus) and not _in_focus(c, focus)],
        op_mix=dict(run.op_mix.most_common()),
        focus=focus,
        gate=profile.gate,
    )


def _reproduced(found: list[Difference], target: Target, layout: Layout,
                phases: dict[str, dict[str, Any]]) -> tuple[list[Difference], list[Difference]]:
    """Replay each difference's steps on the reset target, on its clock (``reproduce``):
    those a replay shows (their divergence, steps and class that replay's), and those
    none does."""
    started, replays = time.perf_counter(), 0
    shown: list[Difference] = []
    unshown: list[Difference] = []
    for d in found:
        made = reproduce(d.shrunk, d.signature, target, layout.replay, d.clock)
        replays += made.replays
        d.replays, d.reproduced, d.seen, d.replayed = made.replays, made.reproduced, made.seen, made.replayed
        if d.again is not None and made.reproduced:  # the search saw the same draws do otherwise (DET-1)
            d.reproduced, d.seen = False, [*made.seen, SHOWN]
        if d.reproduced:
            d.names, d.klass = made.names, made.replayed.klass
            d.divergence, d.shrunk = made.replayed.divergence, list(made.replayed.steps)
        (shown if d.reproduced else unshown).append(d)
    if found:
        phases["reproduce"] = {"replays": replays, "reproduced": len(shown), "unreproduced": len(unshown),
                               "seconds": round(time.perf_counter() - started, 3)}
    return shown, unshown


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
        phases=[p for p in Phase if p is not Phase.explain],
        # One difference a round: the run finds the others in rounds of its own (and
        # Hypothesis would go on generating for up to 10 s of wall time after a failure,
        # so what it shrank would depend on the machine's load).
        report_multiple_bugs=False,
    )


def _search(machine: Callable[[], Any], seed: int, examples: int, steps: int, run: Run) -> Divergence | None:
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


def _sweep(target: Target, run: Run, clock: Clock | None, phases: dict[str, dict[str, Any]]) -> Divergence | None:
    """The raw calls the draws leave out (``raw.SWEPT``), once, before the rounds; its
    cells count as the run's; its calls are reported apart (``phases``): how many depends
    on the server's clock (a lease of the server-clock calls may expire between them)."""
    started = time.perf_counter()
    swept = Run(coverage=run.coverage, focus=run.focus, raw_calls=run.raw_calls)
    machine = Conformance.factory(target, swept, clock)()
    try:
        machine.raw_sweep()
    except Divergence as d:
        return d
    finally:
        run.first_failure = run.first_failure or swept.first_failure
        phases["sweep"] = {"calls": swept.steps, "seconds": round(time.perf_counter() - started, 3)}
    return None


def implemented(cell: tuple[str, str], focus: Focus) -> bool:
    """Whether the target is sent calls that can reach ``cell``: its op, and for a
    wrong-typed key's refusal (CC-8) the key faults (a serverless driver may lack them)."""
    return focus.allows(cell[0]) and (cell[1] != errors.TYPE or focus.allows("spoil_key"))


def _in_focus(cell: tuple[str, str], focus: Focus) -> bool:
    """Whether the focus can reach ``cell`` at all (its op allowed, its outcome one the
    hostile setting sends calls for; raw calls are hostile)."""
    if not implemented(cell, focus) or not focus.gates(cell):
        return False
    hostile = cell[0] == "raw" or cell[1] in REFUSALS_OF_ARGUMENTS
    return {"both": True, "off": not hostile, "only": hostile}[focus.hostile]


def _unreached(run: Run, focus: Focus) -> list[tuple[str, str]]:
    """Cells in focus no call reached."""
    return [c for c in run.coverage.unreached() if _in_focus(c, focus)]

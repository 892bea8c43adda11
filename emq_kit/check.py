"""``emq check`` as a library call: run the conformance machine against a target under a
profile, and return a ``Report`` (verdict, figures, coverage, the shrunk counterexample).

The ``ci`` and ``thorough`` profiles gate on coverage: they keep running rounds of new
examples (fresh seeds) until every (op, outcome) cell of the spec table is reached, up to
a budget; a cell still unreached then fails the run, so a rule whose precondition never
holds cannot hide.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from hypothesis import HealthCheck, Phase, Verbosity, seed as hseed, settings
from hypothesis.reporting import with_reporter
from hypothesis.stateful import run_state_machine_as_test

from .machine import Conformance, Divergence, Run, Step
from .cli import EXIT_FAIL, EXIT_OK, Usage, positive
from .clock import Clock
from .targets import Target


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
    hypothesis_report: list[str] = field(default_factory=list)
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
) -> Report:
    """Run the machine on ``target`` under ``clock`` (virtual by default) and judge it.
    Exceptions that are not divergences (a server that went away, a bug in the kit)
    propagate."""
    seed = random.randrange(2**32) if seed is None else seed
    run = Run(progress=progress)
    lines: list[str] = []
    budget = (examples or profile.examples) + (profile.extra_examples if profile.gate else 0)
    per_round = examples or profile.examples
    divergence: Divergence | None = None
    started = time.perf_counter()
    quiet = logging.getLogger("emq_live")
    level, quiet.level = quiet.level, logging.ERROR  # dropped-orphan warnings are expected here
    try:
        round_no, size = 0, per_round
        while size > 0:
            factory = hseed(seed + round_no)(Conformance.factory(target, run, clock))
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
                with with_reporter(lines.append):
                    run_state_machine_as_test(factory, settings=config)
            except BaseException as exc:  # noqa: BLE001 - Hypothesis may group failures
                divergence = first_divergence(exc)
                if divergence is None:
                    raise
                break
            if not profile.gate or not run.coverage.unreached():
                break
            round_no, size = round_no + 1, min(profile.round_examples, budget - run.examples)
    finally:
        quiet.level = level
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
        shrunk=list(run.last) if divergence else [],
        hypothesis_report=lines,
        first_failure=run.first_failure,
    )


def _target(url: str | None, scripts: str | None, driver: str | None = None, clock: str = "virtual",
            timeout: float = 10.0) -> Any:
    """A live target, or the port behind ``driver`` (emq_kit/port.py), with every way
    it can fail to exist turned into ``Usage``."""
    import redis

    from emq_model.errors import EmqError

    from .port import DriverError, DriverTarget
    from .targets import LiveTarget

    if driver is not None and scripts is not None:
        raise Usage("--scripts is for the built-in client; a driver loads its own scripts")
    try:
        if driver is not None:
            return DriverTarget(driver, url, clock=clock, timeout=timeout)
        return LiveTarget(url, scripts, observe=True)
    except DriverError as exc:
        raise Usage(str(exc)) from None
    except FileNotFoundError as exc:
        raise Usage(f"scripts: {exc}") from None
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
        raise Usage(f"cannot reach {url}: {exc}") from None
    except ValueError as exc:
        raise Usage(f"bad URL {url!r}: {exc}") from None
    except EmqError as exc:
        raise Usage(f"{url}: {exc}") from None
    except redis.exceptions.ResponseError as exc:
        raise Usage(f"{url} refused to load the scripts: {exc}") from None


def _progress(profile_examples: int) -> Any:
    """A progress line on a terminal; nothing when piped."""
    if not sys.stderr.isatty():
        return None

    def show(run: Run) -> None:
        sys.stderr.write(
            f"\r  examples {run.examples}/{profile_examples}  steps {run.steps}  "
            f"cells {run.coverage.reached()}/{len(run.coverage.total)} "
        )
        sys.stderr.flush()

    return show


def format_step(step: Step) -> str:
    """One step of a counterexample: the call, then both answers when they differ."""
    same = step.model == step.target and type(step.model) is type(step.target)
    answer = f"-> {step.model!r}" if same else f"-> model {step.model!r} | target {step.target!r}"
    return f"  {step.index:>3}. {step.call()} {answer}"


def format_report(report: Report) -> str:
    """The human summary, with the counterexample when there is one."""
    t = report.target
    lines = [
        f"emq check: {report.verdict.upper()}  target {t.get('target')} ({t.get('server', '?')}), "
        f"scripts {t.get('scripts', '-')}, profile {report.profile}, seed {report.seed}",
        f"  examples {report.examples}   steps {report.steps}   invariant checks {report.checks}",
        f"  cells {report.reached}/{report.total} (op x outcome, specs/transitions.json)",
        f"  wall {report.seconds:.2f} s   {report.steps_per_second:,.0f} checked steps/s",
    ]
    if report.unreached and report.divergence is None:  # a run cut short by a failure is not judged on coverage
        lines.append("  unreached cells: " + ", ".join(f"{op}/{o}" for op, o in report.unreached))
    d = report.divergence
    if d is not None:
        lines.append("")
        if report.trace_text:
            lines.append(f"counterexample, shrunk to {len(report.shrunk)} steps (ids renamed):")
            lines.append(report.trace_text)
        else:
            lines.append(f"counterexample: the {d.kind} diverges at step {d.step.index} ({d.rule})")
            lines.extend(f"  {line}" for line in d.lines)
            lines.append(f"shrunk steps ({len(report.shrunk)}):")
            lines.extend(format_step(s) for s in report.shrunk)
        if report.trace is not None:
            lines.append(f"trace: {report.trace}")
            lines.append(f"replay it: emq replay {report.trace}")
        lines.append(f"run the search again: emq check --seed {report.seed} --profile {report.profile}")
    return "\n".join(lines)


def report_json(report: Report) -> dict[str, Any]:
    """The machine-readable summary (``--json``)."""
    d = report.divergence
    return {
        "verdict": report.verdict,
        "profile": report.profile,
        "seed": report.seed,
        "target": report.target,
        "examples": report.examples,
        "steps": report.steps,
        "invariant_checks": report.checks,
        "seconds": round(report.seconds, 3),
        "steps_per_second": round(report.steps_per_second, 1),
        "cells": {"reached": report.reached, "total": report.total,
                  "unreached": [f"{op}/{o}" for op, o in report.unreached], "hits": report.hits},
        "divergence": None if d is None else {
            "kind": d.kind, "rule": d.rule, "step": d.step.index, "evidence": d.lines,
            "steps": [format_step(s).strip() for s in report.shrunk],
            "trace": None if report.trace is None else str(report.trace),
        },
    }


def write_trace(report: Report, target: Target, directory: Path, clock: Clock | None) -> None:
    """Record the shrunk counterexample as a trace file in ``directory`` (ids renamed,
    replayed once more) and keep its path and printout on the report."""
    from .replay import explain, record, step_table, trace_path
    from .trace import TraceStep, header

    head = header(report.target, seed=report.seed, profile=report.profile,
                  clock=getattr(clock, "mode", "virtual"))
    trace, result = record([TraceStep.of(s) for s in report.shrunk], target, head, clock)
    report.trace = trace.write(trace_path(directory, trace))
    report.trace_text = step_table(result) + "\n" + explain(result)


def cmd_check(args: argparse.Namespace) -> int:
    profile = PROFILES[args.profile]
    if args.clock == "server" and args.url is None:
        raise Usage("--clock server needs a server: give --url")
    target = _target(args.url, args.scripts, args.driver, args.clock, args.timeout)
    import redis

    from .clock import ServerClock
    from .port import DriverError

    try:
        clock = ServerClock.for_url(args.url) if args.clock == "server" else None
        report = run_check(target, profile, examples=args.examples, steps=args.steps, seed=args.seed,
                           progress=_progress(args.examples or profile.examples), clock=clock)
        if report.divergence is not None:
            write_trace(report, target, Path(args.traces), clock)
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
        raise Usage(f"lost the server {args.url}: {exc}") from None
    except DriverError as exc:  # outside a step: starting it again, or a serverless snapshot
        raise Usage(f"driver {args.driver}: {exc}") from None
    finally:
        target.close()
    if sys.stderr.isatty():
        sys.stderr.write("\n")
    if args.json:
        print(json.dumps(report_json(report), indent=2))
    else:
        print(format_report(report))
    return EXIT_OK if report.ok else EXIT_FAIL


def register(sub: Any) -> None:
    """Add ``emq check`` to the command line."""
    c = sub.add_parser("check", help="run the conformance machine: model vs an implementation")
    c.add_argument("--url", help="a server (redis://, valkey://, unix://); default: embedded fakeredis")
    c.add_argument("--scripts", metavar="DIR", help="a script directory with the same calling convention")
    c.add_argument("--driver", metavar="CMD", help="check a port through its driver program "
                   "(specs/driver-protocol.md); CMD is split like a shell would, and run without one")
    c.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS",
                   help="with --driver: how long one request may take (default 10)")
    c.add_argument("--clock", choices=["virtual", "server"], default="virtual",
                   help="pass the model's clock on every call (virtual), or none, judging scores "
                   "within the server's TIME window around each call (server; needs --url)")
    c.add_argument("--examples", type=positive, help="examples per round (default: the profile's)")
    c.add_argument("--steps", type=positive, help="steps per example (default: the profile's)")
    c.add_argument("--seed", type=int, help="the run's seed (default: random, printed)")
    c.add_argument("--profile", choices=sorted(PROFILES), default="ci")
    c.add_argument("--json", action="store_true", help="print the summary as JSON")
    c.add_argument("--traces", metavar="DIR", default=".emq/traces",
                   help="where counterexample traces are written (default .emq/traces)")
    c.set_defaults(func=cmd_check)

"""``emq check``: its arguments, its progress line, and the report printed as text or
JSON (the run itself is ``emq_kit.check.run.run_check``)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import redis

from emq_kit.check.clock import ServerClock
from emq_kit.check.machine import Run, Step
from emq_kit.check.run import PROFILES, Report, run_check
from emq_kit.cli.common import EXIT_FAIL, EXIT_OK, Usage, positive
from emq_kit.layouts import NAMES, layout
from emq_kit.ports.driver_client import DriverError
from emq_kit.trace.replay import write_trace


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
        f"  cells {report.reached}/{report.total} (op x outcome, {t.get('contract', 'specs/transitions.json')})",
        f"  wall {report.seconds:.2f} s   {report.steps_per_second:,.0f} checked steps/s",
    ]
    lines += [f"  {name.replace('_', '-')} phase: " + ", ".join(f"{k} {v}" for k, v in figures.items())
              for name, figures in report.phases.items()]
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
        "phases": report.phases,
        "cells": {"reached": report.reached, "total": report.total,
                  "unreached": [f"{op}/{o}" for op, o in report.unreached], "hits": report.hits},
        "divergence": None if d is None else {
            "kind": d.kind, "rule": d.rule, "step": d.step.index, "evidence": d.lines,
            "steps": [format_step(s).strip() for s in report.shrunk],
            "trace": None if report.trace is None else str(report.trace),
        },
    }


def cmd_check(args: argparse.Namespace) -> int:
    profile = PROFILES[args.profile]
    if args.clock == "server" and args.url is None:
        raise Usage("--clock server needs a server: give --url")
    chosen = layout(args.layout)
    target = chosen.open_target(args.url, args.scripts, args.driver, clock=args.clock, timeout=args.timeout)
    clock: ServerClock | None = None
    try:
        clock = ServerClock.for_url(args.url) if args.clock == "server" else None
        report = run_check(target, profile, examples=args.examples, steps=args.steps, seed=args.seed,
                           progress=_progress(args.examples or profile.examples), clock=clock, layout=chosen)
        if report.divergence is not None:
            write_trace(report, target, Path(args.traces), report.clock or clock, chosen.replay)
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
        raise Usage(f"lost the server {args.url}: {exc}") from None
    except DriverError as exc:  # outside a step: starting it again, or a serverless snapshot
        raise Usage(f"driver {args.driver}: {exc}") from None
    finally:
        target.close()
        if clock is not None:
            clock.close()
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
    c.add_argument("--layout", choices=NAMES, default="echomq",
                   help="the keyspace layout: echomq (the four sets, default) or bullmq (BullMQ's own "
                   "scripts from the pinned bullmq package; needs --url, specs/layouts/bullmq.md)")
    c.add_argument("--examples", type=positive, help="examples per round (default: the profile's)")
    c.add_argument("--steps", type=positive, help="steps per example (default: the profile's)")
    c.add_argument("--seed", type=int, help="the run's seed (default: random, printed)")
    c.add_argument("--profile", choices=sorted(PROFILES), default="ci")
    c.add_argument("--json", action="store_true", help="print the summary as JSON")
    c.add_argument("--traces", metavar="DIR", default=".emq/traces",
                   help="where counterexample traces are written (default .emq/traces)")
    c.set_defaults(func=cmd_check)

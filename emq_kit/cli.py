"""The ``emq`` command. Exit codes: 0 conforms, 1 counterexample (or an unreached cell
under a gating profile), 2 usage or environment error (one line, no traceback)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Sequence

from .check import PROFILES, Report, run_check
from .machine import Run, Step

EXIT_OK, EXIT_FAIL, EXIT_ENV = 0, 1, 2


class Usage(Exception):
    """A usage or environment problem: printed as one line, exit 2."""


def _target(url: str | None, scripts: str | None) -> Any:
    """A live target, with every way it can fail to exist turned into ``Usage``."""
    import redis

    from emq_model.errors import EmqError

    from .targets import LiveTarget

    try:
        return LiveTarget(url, scripts)
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
    if report.unreached:
        lines.append("  unreached cells: " + ", ".join(f"{op}/{o}" for op, o in report.unreached))
    d = report.divergence
    if d is not None:
        lines.append("")
        lines.append(f"counterexample: the {d.kind} diverges at step {d.step.index} ({d.rule})")
        lines.extend(f"  {line}" for line in d.lines)
        lines.append("")
        lines.append(f"shrunk steps ({len(report.shrunk)}):")
        lines.extend(format_step(s) for s in report.shrunk)
        lines.append(f"replay the search with: emq check --seed {report.seed} --profile {report.profile}")
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
        },
    }


def cmd_check(args: argparse.Namespace) -> int:
    profile = PROFILES[args.profile]
    target = _target(args.url, args.scripts)
    import redis

    try:
        report = run_check(target, profile, examples=args.examples, steps=args.steps, seed=args.seed,
                           progress=_progress(args.examples or profile.examples))
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
        raise Usage(f"lost the server {args.url}: {exc}") from None
    finally:
        target.close()
    if sys.stderr.isatty():
        sys.stderr.write("\n")
    if args.json:
        print(json.dumps(report_json(report), indent=2))
    else:
        print(format_report(report))
    return EXIT_OK if report.ok else EXIT_FAIL


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="emq", description="EchoMQ conformance kit")
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("check", help="run the conformance machine: model vs an implementation")
    c.add_argument("--url", help="a server (redis://, valkey://, unix://); default: embedded fakeredis")
    c.add_argument("--scripts", metavar="DIR", help="a script directory with the same calling convention")
    c.add_argument("--examples", type=_positive, help="examples per round (default: the profile's)")
    c.add_argument("--steps", type=_positive, help="steps per example (default: the profile's)")
    c.add_argument("--seed", type=int, help="the run's seed (default: random, printed)")
    c.add_argument("--profile", choices=sorted(PROFILES), default="ci")
    c.add_argument("--json", action="store_true", help="print the summary as JSON")
    c.set_defaults(func=cmd_check)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except Usage as exc:
        print(f"emq {args.command}: {exc}", file=sys.stderr)
        return EXIT_ENV
    except KeyboardInterrupt:
        print(f"emq {args.command}: interrupted", file=sys.stderr)
        return EXIT_ENV


if __name__ == "__main__":
    sys.exit(main())

"""``emq soak``: its arguments and its summary table (the run is ``emq_kit.soak.workload``)."""

from __future__ import annotations

import shlex
import sys
from dataclasses import fields
from typing import Any

from emq_kit import interrupts
from emq_kit.claim import LOST
from emq_kit.cli.common import EXIT_FAIL, EXIT_OK, Outputs, Usage, add_number, add_outputs, claimed
from emq_kit.report.document import soak_document
from emq_kit.report.verdicts import headline, words
from emq_kit.soak.workload import DEFAULTS, QUEUE, SoakConfig, SoakReport, refuse_cluster, run_soak

_TABLE = (
    ("jobs", "jobs"), ("workers", "workers"), ("producers", "producers"), ("restarts", "worker restarts"),
    ("completed", "completed once"), ("dead", "dead-lettered"), ("lost", "lost"), ("duplicated", "duplicated"),
    ("unsettled", "unsettled"), ("violations", "violations"), ("snapshots", "snapshots checked"),
    ("history", "history (ops)"), ("stale", "stale answers"), ("linearizability", "linearizability"),
    ("partitions", "partitions"), ("illegal", "illegal partitions"), ("unknown", "unknown partitions"),
    ("claim_order", "claim order violations"), ("check_seconds", "check time (s)"), ("run_seconds", "run time (s)"),
)


def format_report(report: SoakReport) -> str:
    """The summary table, then what failed."""
    fig = report.figures()
    lines = [f"{headline('soak', report.detail)} on {fig['server']} (queue {fig['queue']}, seed {fig['seed']})"]
    lines += [f"  {label:<24} {fig[key]}" for key, label in _TABLE]
    if fig["lanes"]:
        lines.append(f"  {'lane':<12} {'jobs':>6} {'served':>7} {'share':>7} {'longest wait (ms)':>18}")
        lines += [f"  {s['group']:<12} {s['jobs']:>6} {s['served']:>7} {s['share']:>7.1%} {s['longest_wait_ms']:>18,.1f}"
                  for s in fig["lanes"]]
    if fig["problems"]:
        lines.append("problems:")
        lines += [f"  {p}" for p in fig["problems"]]
    return "\n".join(lines)


def rerun(args: Any, config: SoakConfig) -> str:
    """The command that runs the soak again: its server, its seed and every knob it was given."""
    given = [("--url", args.url), ("--seed", config.seed)] + [
        (f"--{f.name.replace('_', '-')}", getattr(args, f.name, None)) for f in fields(SoakConfig) if f.name != "seed"]
    return shlex.join(["emq", "soak", *[str(part) for flag, value in given if value is not None
                                        for part in (flag, value)]])


def cmd_soak(args: Any) -> int:
    import redis

    out = Outputs(args)
    knobs = {f.name for f in fields(SoakConfig)}
    try:
        config = SoakConfig(**{k: v for k, v in vars(args).items() if k in knobs and v is not None})
    except ValueError as exc:
        raise Usage(str(exc)) from None

    def running(queue: str) -> None:  # on stderr: the seed is known before any Ctrl-C
        print(f"emq soak: {config.workers} workers and {config.producers} producers on queue {queue} of "
              f"{args.url or 'a throwaway valkey-server'}, seed {config.seed}", file=sys.stderr, flush=True)

    report: SoakReport | None = None
    try:
        refuse_cluster(args.url)  # before the run's claim is written there
        with claimed(args.url, (QUEUE,), command="emq soak") as names:
            report = run_soak(args.url, config, names, running)
        interrupts.decided()  # the run's end, its cleanup done, before its verdict (INT-2, INT-3)
    except KeyboardInterrupt:  # the run's processes are stopped and its keys deleted by now (INT-2)
        interrupts.handled()
        # past the run's judgement, before its verdict: what it kept is said, never left unsaid
        kept = f"; its history is kept in {report.history_dir}" if report and report.history_dir else ""
        print(f"emq soak: interrupted; seed {config.seed} (run it again: {rerun(args, config)}){kept}",
              file=sys.stderr)
        raise interrupts.Interrupted(said=True) from None
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
        raise Usage(f"lost the server {args.url or '(throwaway)'}: {exc}; {LOST}") from None
    out.say(format_report(report))
    if report.history_dir is not None:
        out.say(f"history kept in {report.history_dir}")
    code = EXIT_OK if report.ok else EXIT_FAIL
    out.emit(lambda started, finished: soak_document(report, report.history_dir, target=args.url or report.server,
                                                     exit=code, started=started, finished=finished))

    def page() -> str:
        from emq_kit.report.html import soak_page  # the pages' module only for --html

        return soak_page(report.events, report.checked, title=f"emq soak: {words('soak', report.detail)}",
                         problems=report.problems())

    out.page(page)
    return code


def register(sub: Any) -> None:
    """Add ``emq soak`` to the command line."""
    c = sub.add_parser("soak", help="concurrent workers on a real server; accounting, invariants, linearizability")
    c.add_argument("--url", help="a server (redis://, valkey://); default: a throwaway valkey-server")
    d = DEFAULTS

    def number(flag: str, text: str) -> None:
        add_number(c, "soak", flag, text)

    number("--workers", f"worker processes (default {d['workers']})")
    number("--jobs", f"jobs to create (default {d['jobs']})")
    number("--seconds", f"the run's time cap; jobs not settled by then fail it (default {d['seconds']})")
    number("--producers", f"producer processes (default {d['producers']})")
    number("--lanes", f"groups: put every job not scheduled on a lane, claim with lane_claim, report each "
                      f"group's share of service and longest wait (default {d['lanes']}: none)")
    number("--busy", f"with --lanes: the share of jobs put on the busy group g0 (default {d['busy']})")
    number("--seed", f"seed of the workers' dice (default {d['seed']})")
    number("--check-seconds", f"time budget of the linearizability check; past it the verdict is unknown "
                              f"(default {d['check_seconds']})")
    add_outputs(c, html="the history as a timeline (the failing partition highlighted), throughput and latency")
    c.set_defaults(func=cmd_soak)

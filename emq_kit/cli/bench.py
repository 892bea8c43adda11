"""``emq bench``: its arguments and its table (the measuring is ``emq_kit.bench``, loaded
once the arguments are good; the figures and parameters are ``emq_kit.figures``)."""

from __future__ import annotations

import argparse
from typing import Any

from emq_kit import interrupts
from emq_kit.claim import LOST
from emq_kit.cli.common import EXIT_OK, Outputs, Usage, add_number, add_outputs, bounded, claimed, sizes
from emq_kit.cli.progress import Meter
from emq_kit.figures import AT_MOST, QUEUE, Bench, Params
from emq_kit.layouts import layout
from emq_kit.report.document import MEASURED, bench_document
from emq_kit.report.verdicts import headline


def number(value: float | None, unit: str = "") -> str:
    if value is None:
        return "-"
    if unit in ("x", "ratio"):
        return f"{value:.2f}"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.1f}"


def format_bench(bench: Bench) -> str:
    """The table: figure, value, ceiling, ratio, goal; then how the ceilings were got."""
    m, v = bench.machine, bench.versions
    lines = [
        f"{headline('bench', MEASURED)}  {m['nproc']} x {m['cpu']}, {m['memory_gib']} GiB, load {number(m['load_before'], 'x')} "
        "before the run",
        "  " + ", ".join(f"{k} {val}" for k, val in v.items()),
        "",
        f"  {'figure':<34} {'value':>12} {'unit':<13} {'ceiling':>12} {'ratio':>6} {'goal':>8} {'met':<3}  note",
    ]
    for f in bench.figures:
        ratio = f"{f.ratio:.2f}" if f.ratio is not None else "-"
        note = "; ".join(x for x in (f.note, f"ceiling: {f.ceiling_by}" if f.ceiling_by else "") if x)
        goal = f"x{f.goal_ratio:.2f}" if f.goal_ratio is not None else number(f.goal)
        goal = ("<=" if f.key in AT_MOST else "") + goal if goal != "-" else goal
        met = {True: "yes", False: "NO", None: "-"}[f.met]
        lines.append(f"  {f.key:<34} {number(f.value, f.unit):>12} {f.unit:<13} {number(f.ceiling):>12} "
                     f"{ratio:>6} {goal:>8} {met:<3}  {note}")
    return "\n".join(lines)


def cmd_bench(args: argparse.Namespace) -> int:
    import redis

    from emq_kit.bench import run_bench
    from emq_kit.server import ServerProcess
    from emq_live.urls import redact

    out = Outputs(args)
    given = {k: v for k, v in vars(args).items() if k in Params.__dataclass_fields__ and v is not None}
    params = Params(**given)
    if args.million:
        params.sizes = tuple(sorted({*params.sizes, 1_000_000}))
        params.audit_jobs = max(params.audit_jobs, 1_000_000)
    meter = Meter("bench")
    say = meter.show  # each section of the bench, a phase
    server = None
    try:
        url = args.url
        if url is None:
            server = ServerProcess("valkey-server").start()
            url = server.url
        with claimed(args.url, (*layout().logical(), QUEUE), command="emq bench") as names:
            bench = run_bench(url, params, say, names)
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
        raise Usage(f"lost the server {redact(args.url) if args.url else '(throwaway)'}: {exc}; {LOST}") from None
    finally:
        meter.end()
        if server is not None:
            server.stop()
    interrupts.decided()  # the last stopping point: from here the verdict stands (INT-3)
    out.say(format_bench(bench))
    out.emit(lambda started, finished: bench_document(bench, target=args.url or "valkey-server (throwaway)",
                                                      exit=EXIT_OK, started=started, finished=finished))
    return EXIT_OK


def register(sub: Any) -> None:
    """Add ``emq bench`` to the command line."""
    d = Params()
    b = sub.add_parser("bench", help="measure the model, the kit and the live queue next to the machine's ceilings")
    b.add_argument("--url", help="a Valkey server (redis://, valkey://, unix://); default: a throwaway valkey-server")
    add_outputs(b, json_file=True)

    def number(flag: str, text: str, kind: Any = bounded) -> None:
        add_number(b, "bench", flag, text, kind)

    number("--examples", f"conformance examples per target (default {d.examples})")
    number("--steps", f"steps per example (default {d.steps})")
    number("--depth", f"background jobs in each queue of the deep conformance run on Valkey, held against "
                      f"depth 10 (default {d.depth:,})")
    number("--depth-examples", f"examples of each of the two deep-run figures' runs (default {d.depth_examples})")
    number("--jobs", f"jobs of the batched lifecycle on Valkey (default {d.jobs:,}; fakeredis a tenth, the model a fifth)")
    number("--single-jobs", f"jobs of the one-call-per-op lifecycle on Valkey (default {d.single_jobs:,})")
    number("--batch", f"jobs per batch call, at most limit_max (default {d.batch})")
    number("--sizes", "pending jobs of the scale runs on Valkey (default 1000,100000)", sizes)
    number("--lanes", "lanes on the ring of the grouped-claim runs on Valkey (default 10,1000,100000)", sizes)
    number("--fakeredis-sizes", "pending jobs of the scale runs on fakeredis (default 1000,100000)", sizes)
    number("--audit-jobs", f"pending jobs of the audited queue on Valkey (default {d.audit_jobs:,})")
    b.add_argument("--million", action="store_true",
                   help="add 1,000,000 pending jobs to the Valkey scale runs, and audit a queue of 1,000,000")
    number("--probes", f"timed claims and completes per size (default {d.probes})")
    number("--repeat", f"runs of each round-trip, lifecycle and ceiling figure; the best is kept (default {d.repeat})")
    number("--shrink-mutants", f"selftest mutants whose shrinking is timed on fakeredis, evenly spaced "
                               f"(default {d.shrink_mutants})")
    number("--shrink-budget", f"seconds each of them may search before it counts as not killed "
                              f"(default {d.shrink_budget:g})")
    number("--coverage-seeds", f"seeds (1..N) of the ci profile's examples-to-every-cell figure on fakeredis; "
                               f"0 leaves it out (default {d.coverage_seeds})")
    b.set_defaults(func=cmd_bench)

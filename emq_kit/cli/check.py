"""``emq check``: its arguments, its progress line, and the report printed as text or
JSON (the check itself is ``emq_kit.check``: ``emq_kit/api.py``)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from emq_kit import interrupts
from emq_kit.api import check
from emq_kit.check import expect
from emq_kit.check.focus import HOSTILE
from emq_kit.check.options import CheckOptions
from emq_kit.check.pools import QUEUES
from emq_kit.check.profiles import PROFILES
from emq_kit.check.tally import SHRINK_STEPS
from emq_kit.cli.common import DRIVER_TIMEOUT, Outputs, Usage, add_number, add_outputs, bounded, within, writable_path
from emq_kit.cli.progress import CheckProgress
from emq_kit.layouts import NAMES
from emq_kit.redaction import write_text
from emq_kit.report.document import check_document


def options_of(args: argparse.Namespace) -> CheckOptions:
    """The check the command line asks for (``BadArgument`` for options that do not go
    together, before any work)."""
    return CheckOptions(
        url=args.url, scripts=args.scripts, driver=args.driver, timeout=args.timeout, clock=args.clock,
        layout=args.layout, profile=args.profile, examples=args.examples, steps=args.steps, depth=args.depth,
        seed=args.seed, shrink_steps=args.shrink_steps, wipe=args.wipe, refence=args.refence, queues=tuple(args.queue),
        traces=args.traces, first=args.first, ops=_names(args.ops), skip_ops=_names(args.skip_ops),
        hostile=args.hostile, expect=args.expect, strict=args.strict, corpus=not args.no_corpus)


def _names(text: str | None) -> tuple[str, ...]:
    """``--ops A,B``'s names."""
    return tuple(o for o in (text or "").split(",") if o)


def cmd_check(args: argparse.Namespace) -> int:
    """``emq check``: the report as text (or ``--json``), ``--report``, ``--html`` and
    ``--write-expect`` and ``--summary``. Every argument and output path is checked before anything is
    written (OUT-1)."""
    options = options_of(args)
    if args.write_expect is not None:  # before the run, not after it
        writable_path(args.write_expect, "the expectations")
    if args.summary is not None:
        writable_path(args.summary, "the summary")
    # the printers load the engine (a trace's step table): once the arguments are known good
    from emq_kit.report.markdown import check_summary
    from emq_kit.report.text import format_report

    out = Outputs(args)
    progress = CheckProgress(args.examples or PROFILES[args.profile].examples)

    def say(line: str) -> None:
        progress.end()  # a live progress line ends first
        print(f"emq check: {line}", file=sys.stderr)

    try:
        report = check(options, progress=progress, say=say)
    finally:
        progress.end()
    interrupts.decided()  # the last stopping point: from here the verdict stands (INT-3)
    if args.write_expect:
        expect.write(args.write_expect, report)
    out.say(format_report(report))
    if args.write_expect:
        out.say(f"wrote {len(report.differences)} differences to {args.write_expect}")
    code = report.exit_code
    out.emit(lambda started, finished: check_document(report, exit=code, started=started, finished=finished,
                                                      rerun=report.rerun))
    def page() -> str:
        from emq_kit.report.html import check_html  # the pages' module (the soak's history too) only for --html

        return check_html(report)

    out.page(page)
    if args.summary:
        write_text(args.summary, check_summary(report))
    if report.trace_error is not None:
        raise Usage(report.trace_error)
    return code


def register(sub: Any) -> None:
    """Add ``emq check`` to the command line."""
    c = sub.add_parser("check", help="run the conformance machine: model vs an implementation")
    c.add_argument("--url", help="a server (redis://, valkey://, unix://); default: embedded fakeredis")
    c.add_argument("--scripts", metavar="DIR", help="a script directory with the same calling convention")
    c.add_argument("--driver", metavar="CMD", help="check a port through its driver program "
                   "(specs/driver-protocol.md); CMD is split like a shell would, and run without one")
    add_number(c, "check", "--timeout", DRIVER_TIMEOUT, metavar="SECONDS")
    c.add_argument("--clock", choices=["virtual", "server"], default="virtual",
                   help="pass the model's clock on every call (virtual), or none, judging scores "
                   "within the server's TIME window around each call (server; needs --url)")
    c.add_argument("--layout", choices=NAMES, default="echomq",
                   help="the keyspace layout: echomq (the four sets, default) or bullmq (BullMQ's own "
                   "scripts from the pinned bullmq package; needs --url, specs/layouts/bullmq.md)")
    c.add_argument("--examples", type=bounded("check --examples"),
                   help=f"examples per round (default: the profile's; {within('check --examples')})")
    c.add_argument("--steps", type=bounded("check --steps"),
                   help=f"steps per example (default: the profile's; {within('check --steps')})")
    c.add_argument("--depth", type=bounded("check --depth"), default=0, metavar="N",
                   help="fill each queue with N background jobs before every example, through the target's own "
                        f"ops, so it is checked as deep as it runs (default 0; {within('check --depth')})")
    c.add_argument("--seed", type=bounded("check --seed"),
                   help=f"the run's seed (default: random, printed; {within('check --seed')})")
    c.add_argument("--shrink-steps", type=bounded("check --shrink-steps"), default=SHRINK_STEPS, metavar="N",
                   help="checked steps Hypothesis's shrinker may run for each difference before the kit's "
                        f"own minimizing takes the shortest so far (0: none; default {SHRINK_STEPS}; "
                        f"{within('check --shrink-steps')})")
    c.add_argument("--profile", choices=sorted(PROFILES), default="ci")
    c.add_argument("--wipe", action="store_true",
                   help="with --url: allow deleting keys the server already holds under a queue name the run "
                        "writes (the --queue names; refused otherwise)")
    c.add_argument("--refence", action="store_true",
                   help="with --url: a server fenced under another wire version ({emq}:version) runs under "
                   "the contract's for the run and gets its value back after (KS-6; its own port's "
                   "scripts refuse meanwhile)")
    c.add_argument("--queue", action="append", default=[], metavar="NAME",
                   help=f"with --url: the run's queue names on the server, once per queue ({len(QUEUES)} times); "
                   "default: the machine's names with a per-run suffix, printed and kept in the trace")
    add_outputs(c, html="every difference (steps, keyspaces, the broken rule, replay commands) and the coverage "
                        "matrix, or the summary and the coverage")
    c.add_argument("--traces", metavar="DIR", default=".emq/traces",
                   help="where counterexample traces are written (default .emq/traces)")
    c.add_argument("--first", action="store_true",
                   help="stop at the first difference (default: report every distinct difference)")
    c.add_argument("--ops", metavar="A,B", help="send only these ops (and the core)")
    c.add_argument("--skip-ops", metavar="A,B", help="never send these ops; their cells are not implemented")
    c.add_argument("--hostile", choices=list(HOSTILE), default="both",
                   help="spoiled arguments, bad ids and bad queue names: mixed in (both), left out (off), "
                   "on every call (only)")
    c.add_argument("--expect", metavar="FILE", help="known differences (TOML, specs/schemas/expect.json): "
                   "the run fails only on differences FILE does not list")
    c.add_argument("--strict", action="store_true", help="with --expect: an expected difference not met fails the run")
    c.add_argument("--write-expect", metavar="FILE", help="write the differences found as an expectations file")
    c.add_argument("--no-corpus", action="store_true", help="do not replay the traces already in --traces "
                   "before the search (default: replay them and report which still fail)")
    c.add_argument("--summary", metavar="FILE", help="write a Markdown summary (every difference, its replay "
                   "command; for $GITHUB_STEP_SUMMARY)")
    c.set_defaults(func=cmd_check)

"""``emq selftest``: its arguments and its markdown table (the mutants and their judging
are ``emq_kit.selftest.mutation``)."""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import TYPE_CHECKING, Any

from emq_kit import interrupts
from emq_kit.cli.campaign import add_cluster
from emq_kit.cli.common import EXIT_FAIL, EXIT_OK, Outputs, Usage, add_outputs, bounded, claimed, within
from emq_kit.cli.progress import Meter
from emq_kit.layouts import NAMES, layout
from emq_kit.report.document import selftest_detail, selftest_document
from emq_kit.report.verdicts import headline

if TYPE_CHECKING:  # the engine loads once the arguments are good: a usage error is told without it
    from emq_kit.selftest.mutation import Mutant, MutantVerdict


def row(v: MutantVerdict) -> str:
    m = v.mutant
    where = f"{m.script}.lua:{m.line}"
    detail = (f"{v.rule}; {v.reason}" if v.reason else v.rule) if v.status == "killed" else v.reason
    shrunk = str(v.shrunk) if v.shrunk else "-"
    return f"| {m.operator} | {where} | `{m.before.strip()}` | {v.status} | {v.seconds:.2f} | {shrunk} | {detail} |"


HEADER = "| operator | where | original line | verdict | s to kill | shrunk steps | rule / reason |\n|---|---|---|---|---|---|---|"


def cmd_selftest(args: argparse.Namespace) -> int:
    """``emq selftest``; Ctrl-C stops it at the mutant it is on (its child process and a
    script of its still running go), says which and the command that runs it again."""
    if args.wipe and args.url is None:
        from emq_kit.check.options import WIPE_NEEDS_URL

        raise Usage(WIPE_NEEDS_URL)
    at: list[str] = []  # the mutant being judged, once one is
    try:
        return _bullmq(args, at) if args.layout == "bullmq" else _echomq(args, at)
    except KeyboardInterrupt:
        interrupts.handled()
        again = ["emq", "selftest", "--seed", str(args.seed), "--budget", f"{args.budget:g}"]
        again += [part for flag in ("url", "only", "layout", "sample") if getattr(args, flag, None) not in (None, "echomq")
                  for part in (f"--{flag}", str(getattr(args, flag)))]
        if args.cluster is not None:  # where the mutants are judged: the run again is the same run
            again += ["--cluster", args.cluster.text]
        print(f"emq selftest: interrupted{' at ' + at[-1] if at else ''}; seed {args.seed} "
              f"(run it again: {shlex.join(again)})", file=sys.stderr)
        raise interrupts.Interrupted(said=True) from None


def _echomq(args: argparse.Namespace, at: list[str]) -> int:
    from emq_kit.selftest.mutation import all_mutants, run_selftest

    if args.list:
        for m in all_mutants(observer=True):  # snapshot.lua's: on a server only
            print(f"{m.key}\n    {m.script}.lua:{m.line}: {m.before.strip()}  ->  {m.after.strip() or '(deleted)'}")
        return EXIT_OK
    out = Outputs(args)
    meter = Meter("selftest")

    def started(k: int, n: int, mutant: Mutant) -> None:
        if k == 1:  # the table starts once the server and --only are known good: no header before an error
            if args.url is None:
                print("  snapshot.lua is not mutated on the embedded fakeredis (the kit reads the snapshot from "
                      "memory there, so it never runs); give --url to mutate it too", file=sys.stderr)
            out.say(HEADER)
        meter.show("judging mutants", k - 1, n, f"mutant {k} of {n}: {mutant.key}")  # stderr: the table is stdout's
        at.append(f"mutant {k} of {n} ({mutant.key})")

    def judged(v: MutantVerdict) -> None:
        meter.end()  # a live line ends before the table's row
        out.say(row(v), flush=True)

    if args.cluster is not None:
        return _summarize(args, out, _on_cluster(args, out))
    try:
        with claimed(args.url, layout().logical(), command="emq selftest", wipe=args.wipe) as names:
            verdicts = run_selftest(args.url, args.budget, args.seed, args.only, report=judged, started=started,
                                    names=names, sample=args.sample)
    finally:
        meter.end()
    return _summarize(args, out, verdicts)


def _on_cluster(args: argparse.Namespace, out: Outputs) -> list[MutantVerdict]:
    """The mutants judged on the Dask cluster ``--cluster`` names, each row printed as
    it ends (in the order they end; the report lists them in the mutants' order)."""
    from emq_kit.campaign.selftest import run_selftest_on

    def done(k: int, n: int, v: MutantVerdict) -> None:
        if k == 1:
            out.say(HEADER)
        print(f"  mutant {k} of {n} judged: {v.mutant.key}", file=sys.stderr, flush=True)
        out.say(row(v), flush=True)

    return run_selftest_on(args.cluster, args.url, args.budget, args.seed, args.only, wipe=args.wipe,
                           layout_name=args.layout, sample=args.sample, report=done)


def _bullmq(args: argparse.Namespace, at: list[str]) -> int:
    """The mutants of BullMQ's scripts, judged by the bullmq layout's machine."""
    from emq_kit.selftest import bullmq
    from emq_live.layouts.bullmq import bullmq_version

    if args.list:
        for m in bullmq.all_mutants():
            print(f"{m.key}\n    {m.script}.lua:{m.line} in {bullmq.where(m)}(): {m.before.strip()}  ->  "
                  f"{m.after.strip() or '(deleted)'}")
        return EXIT_OK
    out = Outputs(args)
    chosen = layout("bullmq")
    if args.url is None:
        chosen.open_target(None)  # no server: one line, before any mutant
    with claimed(args.url, chosen.logical(), command="emq selftest", wipe=args.wipe) as names:
        chosen.open_target(args.url, names=names).close()  # no cmsgpack: one line, before any mutant
        out.say(f"BullMQ {bullmq_version()} scripts, budget {args.budget:g} s per mutant, seed {args.seed}"
                + (f", a sample of {args.sample}" if args.sample else ""))
        if args.cluster is None:
            out.say(HEADER)
            return _summarize(args, out, bullmq.run_selftest(args.url, args.budget, args.seed, args.sample, args.only,
                                                             report=lambda v: out.say(row(v), flush=True), names=names))
    return _summarize(args, out, _on_cluster(args, out))  # each mutant under a claim of its worker's


def _summarize(args: argparse.Namespace, out: Outputs, verdicts: list[MutantVerdict]) -> int:
    from emq_kit.selftest.mutation import summary

    interrupts.decided()  # the run's end, its cleanup done, before its verdict (INT-2, INT-3)
    s = summary(verdicts, len(_every_mutant(args)), _part(args))
    judged = f"{s['mutants']} of {s['of']}" + (f" ({s['part']})" if s["part"] else "")
    detail = selftest_detail(s)
    out.say()
    out.say(f"{headline('selftest', detail)}  mutants {judged}: killed {s['killed']}, "
            f"equivalent {s['equivalent']}, survived {s['survived']}"
            + (f", unjudged {s['unjudged']} (the budget ran no whole example against them)" if s["unjudged"] else "")
            + f"; median time-to-kill {_figure(s['median_seconds_to_kill'], 's')}; "
            f"median shrunk trace {_figure(s['median_shrunk_steps'], 'steps')}; "
            f"shrinking median {_figure(s['median_shrink_seconds'], 's')}, max {_figure(s['max_shrink_seconds'], 's')}")
    code = EXIT_FAIL if detail in ("survivors", "unjudged") else EXIT_OK
    out.emit(lambda started, finished: selftest_document(verdicts, s, target=args.url, seed=args.seed, exit=code,
                                                         started=started, finished=finished))
    return code


def _figure(value: float | None, unit: str) -> str:
    """A summary figure with its unit; ``-`` where there is none (nothing killed, or
    nothing shrunk)."""
    return "-" if value is None else f"{value} {unit}"


def _every_mutant(args: argparse.Namespace) -> list[Mutant]:
    """Every mutant of the layout's scripts the run could judge, of which it chose its
    part (snapshot.lua's on a server only)."""
    if args.layout == "bullmq":
        from emq_kit.selftest import bullmq

        return bullmq.all_mutants()
    from emq_kit.selftest.mutation import all_mutants

    return all_mutants(observer=args.url is not None)


def _part(args: argparse.Namespace) -> str:
    """Why a run judges a part of the mutants: ``--only '|enqueue|', a sample of 2, seed 1``."""
    return ", ".join(([f"--only {shlex.quote(args.only)}"] if args.only else [])
                     + ([f"a sample of {args.sample}, seed {args.seed}"] if args.sample is not None else []))


def register(sub: Any) -> None:
    """Add ``emq selftest`` to the command line."""
    t = sub.add_parser("selftest", help="mutate our own scripts and prove the machine kills every mutant")
    t.add_argument("--url", help="a server to run the mutants on (default: embedded fakeredis)")
    t.add_argument("--budget", type=bounded("selftest --budget"), default=60.0, metavar="SECONDS",
                   help=f"search time per mutant (default 60; {within('selftest --budget')})")
    t.add_argument("--seed", type=bounded("selftest --seed"), default=0,
                   help=f"the seed of every mutant's run (default 0; {within('selftest --seed')})")
    t.add_argument("--only", metavar="TEXT", help="only the mutants whose key contains TEXT")
    t.add_argument("--layout", choices=NAMES, default="echomq",
                   help="whose scripts to mutate: ours (echomq) or BullMQ's (bullmq; needs --url)")
    t.add_argument("--sample", type=bounded("selftest --sample"), metavar="N",
                   help=f"judge a sample of N mutants, drawn with --seed (bullmq: its scripts have hundreds; "
                        f"{within('selftest --sample')})")
    t.add_argument("--list", action="store_true", help="list the mutants and exit")
    t.add_argument("--wipe", action="store_true",
                   help="with --url: allow deleting keys the server already holds under a queue name the run "
                        "writes (the empty name's, which no suffix can mark; refused otherwise)")
    add_cluster(t, None)
    add_outputs(t, json_file=True)
    t.set_defaults(func=cmd_selftest)

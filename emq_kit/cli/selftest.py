"""``emq selftest``: its arguments and its markdown table (the mutants and their judging
are ``emq_kit.selftest.mutation``)."""

from __future__ import annotations

import argparse
from typing import Any

from emq_kit.cli.common import EXIT_FAIL, EXIT_OK, Outputs, Usage, add_outputs
from emq_kit.report.document import selftest_document
from emq_kit.selftest.mutation import MutantVerdict, all_mutants, run_selftest, summary


def row(v: MutantVerdict) -> str:
    m = v.mutant
    where = f"{m.script}.lua:{m.line}"
    detail = v.rule if v.status == "killed" else v.reason
    shrunk = str(v.shrunk) if v.shrunk else "-"
    return f"| {m.operator} | {where} | `{m.before.strip()}` | {v.status} | {v.seconds:.2f} | {shrunk} | {detail} |"


HEADER = "| operator | where | original line | verdict | s to kill | shrunk steps | rule / reason |\n|---|---|---|---|---|---|---|"


def cmd_selftest(args: argparse.Namespace) -> int:
    if args.list:
        for m in all_mutants():
            print(f"{m.key}\n    {m.script}.lua:{m.line}: {m.before.strip()}  ->  {m.after.strip() or '(deleted)'}")
        return EXIT_OK
    out = Outputs(args)
    out.say(HEADER)
    try:
        verdicts = run_selftest(args.url, args.budget, args.seed, args.only,
                                report=lambda v: out.say(row(v), flush=True))
    except Exception as exc:  # noqa: BLE001 - the environment, not a mutant: one line
        raise Usage(f"selftest could not run: {exc}") from None
    s = summary(verdicts)
    out.say()
    out.say(f"mutants {s['mutants']}: killed {s['killed']}, equivalent {s['equivalent']}, survived {s['survived']}; "
          f"median time-to-kill {s['median_seconds_to_kill']} s; median shrunk trace {s['median_shrunk_steps']} steps")
    code = EXIT_FAIL if s["survived"] else EXIT_OK
    out.emit(lambda started, finished: selftest_document(verdicts, s, target=args.url, seed=args.seed, exit=code,
                                                         started=started, finished=finished))
    return code


def register(sub: Any) -> None:
    """Add ``emq selftest`` to the command line."""
    t = sub.add_parser("selftest", help="mutate our own scripts and prove the machine kills every mutant")
    t.add_argument("--url", help="a server to run the mutants on (default: embedded fakeredis)")
    t.add_argument("--budget", type=float, default=60.0, metavar="SECONDS", help="search time per mutant (default 60)")
    t.add_argument("--seed", type=int, default=0, help="the seed of every mutant's run (default 0)")
    t.add_argument("--only", metavar="TEXT", help="only the mutants whose key contains TEXT")
    t.add_argument("--list", action="store_true", help="list the mutants and exit")
    add_outputs(t, json_file=True)
    t.set_defaults(func=cmd_selftest)

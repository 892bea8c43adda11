"""``emq replay``: its arguments and its printout (the replay itself is
``emq_kit.replay``: ``emq_kit/api.py``; the regression test it writes,
``emq_kit.trace.export``)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from emq_kit import interrupts
from emq_kit.api import load_trace, replay
from emq_kit.cli.common import DRIVER_TIMEOUT, Outputs, Usage, add_number, add_outputs, writable_file
from emq_kit.redaction import write_text
from emq_kit.report.document import replay_document
from emq_kit.trace.export import pytest_source


def cmd_replay(args: argparse.Namespace) -> int:
    out = Outputs(args)
    if args.pytest == "-" and out.json:
        raise Usage("--pytest - and --json both print on stdout: give --pytest a FILE")
    trace = load_trace(args.trace)
    from emq_kit.report.text import format_replay  # loads the engine: once the trace is read

    if args.pytest == "-":  # stdout (writable_file's "-"), then the replay's printout
        sys.stdout.write(pytest_source(trace, args.trace))
    elif args.pytest:
        write_text(args.pytest, pytest_source(trace, args.trace))
        out.say(f"wrote {args.pytest}")
    replayed = replay(args.trace, url=args.url or None, scripts=args.scripts, driver=args.driver, clock=args.clock,
                      timeout=args.timeout, wipe=args.wipe, say=lambda line: print(f"emq replay: {line}", file=sys.stderr))
    interrupts.decided()  # the last stopping point: from here the verdict stands (INT-3)
    out.say(format_replay(replayed))
    code = replayed.exit_code
    out.emit(lambda started, finished: replay_document(args.trace, replayed.result, replayed.target, exit=code,
                                                       started=started, finished=finished, seed=replayed.seed))
    def page() -> str:
        from emq_kit.report.html import counterexample_page  # the pages' module (the soak's history too) only for --html

        return counterexample_page(trace, source=args.trace, replayed=replayed.detail)

    out.page(page)
    return code


def register(sub: Any) -> None:
    """Add ``emq replay`` to the command line."""
    r = sub.add_parser("replay", help="re-run a trace on the model and a target, step by step")
    r.add_argument("trace", help="a trace file written by emq check")
    r.add_argument("--url", help="replay on this server (default: the trace's server); with --driver, "
                   "the server the driver uses")
    r.add_argument("--scripts", metavar="DIR", help="replay with these scripts (on the trace's server, or --url); "
                   "a trace's own script directory is never loaded from it")
    r.add_argument("--driver", metavar="CMD", help="replay through a port's driver; a trace's own driver command "
                   "is never run from it (it says which to give)")
    add_number(r, "replay", "--timeout", DRIVER_TIMEOUT, metavar="SECONDS")
    r.add_argument("--clock", choices=["virtual", "server"],
                   help="the clock mode (default: the trace's; server needs a server)")
    r.add_argument("--pytest", metavar="FILE", type=writable_file,
                   help="also write a standalone regression test (-: on stdout, before the replay's printout)")
    r.add_argument("--wipe", action="store_true",
                   help="on a server: allow deleting keys it already holds under a queue name the replay writes "
                        "(the empty name's, which no suffix can mark; refused otherwise)")
    add_outputs(r, html="the trace's counterexample (steps, keyspaces, the broken rule)")
    r.set_defaults(func=cmd_replay)


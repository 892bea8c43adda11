"""``emq replay``: its arguments and its printout (the replay itself is
``emq_kit.trace.replay``; the regression test it writes, ``emq_kit.trace.export``)."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from emq_kit.cli.common import EXIT_FAIL, EXIT_OK, Outputs, Usage, add_outputs, claimed, writable_file
from emq_kit.layouts import of_trace
from emq_kit.redaction import write_text
from emq_kit.report.document import replay_document
from emq_kit.report.html import counterexample_page
from emq_kit.trace.export import pytest_source
from emq_kit.trace.format import Trace
from emq_kit.trace.replay import explain, source_of, step_table, target_for


def cmd_replay(args: argparse.Namespace) -> int:
    logging.getLogger("emq_live").setLevel(logging.ERROR)  # dropped orphans are the trace's business
    out = Outputs(args)
    if args.pytest == "-" and out.json:
        raise Usage("--pytest - and --json both print on stdout: give --pytest a FILE")
    try:
        trace = Trace.load(args.trace)
    except (OSError, ValueError, KeyError) as exc:
        raise Usage(f"cannot read trace {args.trace}: {exc}") from None
    if args.pytest == "-":  # stdout (writable_file's "-"), then the replay's printout
        sys.stdout.write(pytest_source(trace, args.trace))
    elif args.pytest:
        write_text(args.pytest, pytest_source(trace, args.trace))
        out.say(f"wrote {args.pytest}")
    chosen = of_trace(trace.header)
    if chosen.name == "echomq":  # the trace's driver, scripts, server and clock, each unless a flag says otherwise
        url = source_of(trace.header, url=args.url or None, scripts=args.scripts, driver=args.driver)[0]
    else:  # a layout's target is its own: the trace's server unless --url says otherwise
        url = args.url or trace.header.get("target", {}).get("target")
    with claimed(url, chosen.logical(), command="emq replay", wipe=args.wipe) as names:
        clock = None
        if chosen.name == "echomq":
            target, clock = target_for(trace.header, url=args.url or None, scripts=args.scripts, driver=args.driver,
                                       clock=args.clock, names=names)
        else:
            target = chosen.open_target(url, args.scripts, args.driver,
                                        clock=args.clock or trace.header.get("clock") or "virtual", names=names)
        for note in getattr(target, "notes", ()):  # what the kit did on its own at start (DP-9)
            print(f"emq replay: {note}", file=sys.stderr)
        try:
            result = chosen.replay(trace.steps, target, clock)
            described = target.describe()
        finally:
            target.close()
            if clock is not None:
                clock.close()
    out.say(f"replaying {args.trace} ({len(trace.steps)} steps) on {described.get('target')} "
            f"({described.get('server', '?')}), scripts {described.get('scripts', '-')}, "
            f"{getattr(clock, 'mode', 'virtual')} clock")
    out.say(step_table(result))
    out.say(explain(result))
    code = EXIT_OK if result.conforms else EXIT_FAIL
    out.emit(lambda started, finished: replay_document(args.trace, result, described, exit=code, started=started,
                                                       finished=finished, seed=trace.header.get("seed")))
    out.page(lambda: counterexample_page(trace, source=args.trace))
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
    r.add_argument("--clock", choices=["virtual", "server"],
                   help="the clock mode (default: the trace's; server needs a server)")
    r.add_argument("--pytest", metavar="FILE", type=writable_file,
                   help="also write a standalone regression test (-: on stdout, before the replay's printout)")
    r.add_argument("--wipe", action="store_true",
                   help="on a server: allow deleting keys it already holds under a queue name the replay writes "
                        "(the empty name's, which no suffix can mark; refused otherwise)")
    add_outputs(r, html="the trace's counterexample (steps, keyspaces, the broken rule)")
    r.set_defaults(func=cmd_replay)


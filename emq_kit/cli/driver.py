"""``emq driver``: run a reference driver on stdin/stdout (emq_kit.ports.reference_driver)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from emq_kit import redaction
from emq_kit.ports.reference_driver import Driver


def cmd_driver(args: argparse.Namespace) -> int:
    if args.model:  # the oracle a port's run starts: no client imported (no redis-py)
        from emq_kit.check.target import open_target

        driver = Driver("emq-model", lambda url: open_target(model=True), serverless=True, faults=True)
    else:
        from emq_live.client import connect

        # the client's own connection, not a target: the driver protocol is the client's
        # API behind a pipe (the kit's target of it is the DriverTarget on the other end)
        driver = Driver("emq-python", lambda url: connect(args.url or url, scripts=args.scripts), serverless=False)
    driver.serve(sys.stdin, redaction.channel(sys.stdout))
    return 0


def register(sub: Any) -> None:
    """Add ``emq driver`` to the command line."""
    d = sub.add_parser("driver", help="a reference driver: speak the driver protocol on stdin/stdout")
    which = d.add_mutually_exclusive_group(required=True)
    which.add_argument("--model", action="store_true", help="the model (serverless)")
    which.add_argument("--live", action="store_true", help="the Python client, on the server init names")
    which.add_argument("--url", help="the Python client, on URL instead of the server init names")
    d.add_argument("--scripts", metavar="DIR", help="with --live/--url: a script directory")
    d.set_defaults(func=cmd_driver)

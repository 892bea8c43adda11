"""``emq clean --url URL``: remove the leftovers of dead runs of the kit from a server
(``emq_kit.claim.clean``; specs/ownership.md OWN-6), and say in one line what."""

from __future__ import annotations

import argparse
from typing import Any

from emq_kit.cli.common import EXIT_OK


def cmd_clean(args: argparse.Namespace) -> int:
    from emq_kit.claim import clean, records_refused
    from emq_live.client import _client, handshake
    from emq_live.urls import redact

    with records_refused(args.url):  # the claim's lines for a server that refuses or is not there
        client = _client(args.url)  # a URL the client cannot read: its own line, nothing connected
        try:
            handshake(args.url, client)
            removed = clean(client)
        finally:
            client.close()
    print(f"emq clean: {removed.line(redact(args.url))}")
    return EXIT_OK


def register(sub: Any) -> None:
    """Add ``emq clean`` to the command line."""
    c = sub.add_parser("clean", help="remove what dead runs of the kit left on a server (a run killed with SIGKILL)")
    c.add_argument("--url", required=True, help="the server (redis://, valkey://, unix://, redis+cluster:// ...)")
    c.set_defaults(func=cmd_clean)

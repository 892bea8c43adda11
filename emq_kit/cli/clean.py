"""``emq clean --url URL``: remove the leftovers of dead runs of the kit from a server
(``emq_kit.claim.clean``; specs/ownership.md OWN-6), and say in one line what."""

from __future__ import annotations

import argparse
from typing import Any

from emq_kit.cli.common import EXIT_OK
from emq_kit.errors import ServerUnreachable


def cmd_clean(args: argparse.Namespace) -> int:
    import redis
    from redis.exceptions import RedisClusterException

    from emq_kit.claim import clean
    from emq_live.client import _client
    from emq_live.urls import check_url, redact

    client = _client(check_url(args.url))
    try:
        removed = clean(client)
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, RedisClusterException,
            redis.exceptions.InvalidResponse) as exc:  # InvalidResponse: a port that does not speak RESP
        raise ServerUnreachable(f"cannot reach {redact(args.url)}: {exc}") from None
    finally:
        client.close()
    print(f"emq clean: {removed.line(redact(args.url))}")
    return EXIT_OK


def register(sub: Any) -> None:
    """Add ``emq clean`` to the command line."""
    c = sub.add_parser("clean", help="remove what dead runs of the kit left on a server (a run killed with SIGKILL)")
    c.add_argument("--url", required=True, help="the server (redis://, valkey://, unix://, redis+cluster:// ...)")
    c.set_defaults(func=cmd_clean)

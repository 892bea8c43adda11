"""The ``emq`` command. Exit codes: 0 conforms, 1 counterexample (or an unreached cell
under a gating profile), 2 usage or environment error (one line, no traceback).

Each command lives in its own module here, which adds its subparser with
``register(sub)`` and sets ``func`` to a function of the parsed arguments returning the
exit code. The library never imports this package: it raises ``emq_kit.errors.KitError``
and ``main`` prints it.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

from emq_kit import redaction
from emq_kit.cli import audit, bench, bundle, check, clean, driver, replay, selftest, soak
from emq_kit.cli.common import EXIT_ENV, EXIT_FAIL, EXIT_OK, Parser, Usage
from emq_kit.errors import KitBug, KitError
from emq_live.urls import ConnectError

__all__ = ["EXIT_ENV", "EXIT_FAIL", "EXIT_OK", "Usage", "main", "parser"]

COMMANDS = (check, replay, selftest, driver, bundle, soak, bench, audit, clean)


def parser() -> argparse.ArgumentParser:
    p = Parser(prog="emq", description="EchoMQ conformance kit")
    sub = p.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.register(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; every line it prints passes the redaction (SEC-1)."""
    given = list(sys.argv[1:] if argv is None else argv)
    with redaction.shown(given):
        return _main(given)


def _main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    try:
        return int(args.func(args))
    except (Usage, KitError, ConnectError) as exc:  # ConnectError: the client could not reach a server
        print(f"emq {args.command}: {exc}", file=sys.stderr)
        return EXIT_ENV
    except BrokenPipeError:  # `emq check | head`: the reader left; not an error of ours
        sys.stderr.close()
        return EXIT_OK
    except KeyboardInterrupt:
        print(f"emq {args.command}: interrupted", file=sys.stderr)
        return EXIT_ENV
    except Exception as exc:  # noqa: BLE001 - ours: one line saying what to report
        if os.environ.get("EMQ_DEBUG"):
            raise
        print(f"emq {args.command}: {KitBug(exc)}", file=sys.stderr)
        return EXIT_ENV


if __name__ == "__main__":
    sys.exit(main())

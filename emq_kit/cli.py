"""The ``emq`` command. Exit codes: 0 conforms, 1 counterexample (or an unreached cell
under a gating profile), 2 usage or environment error (one line, no traceback)."""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Sequence

EXIT_OK, EXIT_FAIL, EXIT_ENV = 0, 1, 2


class Usage(Exception):
    """A usage or environment problem: printed as one line, exit 2."""


def positive(text: str) -> int:
    """An argparse type: an integer of at least 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


# Each command lives in its own module, which adds its subparser with ``register(sub)``
# and sets ``func`` to a function of the parsed arguments returning the exit code.
COMMANDS = ("check", "replay", "selftest", "driver", "scripts", "soak", "bench", "audit")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="emq", description="EchoMQ conformance kit")
    sub = p.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        importlib.import_module(f"emq_kit.{name}").register(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except Usage as exc:
        print(f"emq {args.command}: {exc}", file=sys.stderr)
        return EXIT_ENV
    except BrokenPipeError:  # `emq check | head`: the reader left; not an error of ours
        sys.stderr.close()
        return EXIT_OK
    except KeyboardInterrupt:
        print(f"emq {args.command}: interrupted", file=sys.stderr)
        return EXIT_ENV


if __name__ == "__main__":
    sys.exit(main())

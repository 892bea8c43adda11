"""The ``emq`` command. Exit codes: 0 conforms, 1 counterexample (or an unreached cell
under a gating profile), 2 usage or environment error (one line, no traceback), 130
interrupted (Ctrl-C: the seed and what the run had, its keys cleaned; INT-1).

Each command lives in its own module here, which adds its subparser with
``register(sub)`` and sets ``func`` to a function of the parsed arguments returning the
exit code. ``main`` imports the module of the command it runs and no other (a command's
module imports what it runs: ``emq driver --model`` needs neither Hypothesis, fakeredis
nor redis-py); ``emq --help`` and a command line naming no command read them all
(``emq --version`` first reads none). The library never imports this package: it
raises an error of ``emq_kit.errors``, and ``main`` shows it as its class says.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import sys
from typing import Any, NoReturn, Sequence

from emq_kit import interrupts, redaction
from emq_kit.cli.common import EXIT_ENV, EXIT_FAIL, EXIT_INTERRUPTED, EXIT_OK, Parser, Usage
from emq_kit.errors import Interrupted, KitBug, kit_error

__all__ = ["EXIT_ENV", "EXIT_FAIL", "EXIT_INTERRUPTED", "EXIT_OK", "Usage", "main", "parser"]

COMMANDS = ("check", "replay", "selftest", "campaign", "matrix", "driver", "scripts", "soak", "bench", "audit",
            "clean")
"""Each command, in the order ``emq --help`` lists them; ``emq NAME`` lives in this
package's module ``NAME``."""


class _Version(argparse.Action):
    """``emq --version``: the kit's version and the contract's (spec and wire) it checks,
    read when asked for, not each time the parser is built."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="show the kit's and the contract's versions and exit")

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> NoReturn:
        from emq_kit.report.document import kit_version
        from emq_model import spec

        print(f"emq {kit_version()} (spec {spec.SPEC_VERSION}, wire {spec.WIRE_VERSION})")  # on stdout, as argparse's
        parser.exit()


def parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command line: every command, or ``command``'s alone when it is one of them
    (what ``main`` parses a command line with; the subcommand's own parser is the same).
    ``--version`` first: no command at all (the versions are printed as the option is
    met, before any command would be read)."""
    p = Parser(prog="emq", description="EchoMQ conformance kit")
    p.add_argument("--version", action=_Version)
    if command == "--version":
        return p
    sub = p.add_subparsers(dest="command", required=True)
    for name in [command] if command in COMMANDS else COMMANDS:
        importlib.import_module(f"{__name__}.{name}").register(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; every line it prints passes the redaction (SEC-1)."""
    if argv is None:  # the process itself: noted, not raised, until the command's start (INT-1)
        interrupts.early()
    given = list(sys.argv[1:] if argv is None else argv)
    with redaction.shown(given):
        code = _main(given, program=argv is None)
    if argv is None:
        # The process ends here: its last collection would walk every object the run
        # left (about a second after a long check) for memory the exit frees anyway.
        gc.freeze()
    return code


def _main(argv: list[str], program: bool = False) -> int:
    """The command of ``argv``; ``program``: run as the process itself (``emq ...``),
    which exits with its code, not called by code that goes on."""
    args = parser(argv[0] if argv else None).parse_args(argv)
    try:
        # Ctrl-C stops a command where it can (INT-1); run as a program, the process
        # then exits with the command's code, whatever comes late (INT-3)
        with interrupts.stopping(last=program) as ran, interrupts.blamed():
            code = int(args.func(args))
        if ran is not None and ran.late:  # past its verdict: said, the verdict's code kept (INT-3)
            print(f"emq {args.command}: interrupted after its verdict: the run had ended, its verdict and "
                  f"outputs stand (exit {code})", file=sys.stderr)
        return code
    except BrokenPipeError:  # `emq check | head`: the reader left; not an error of ours
        sys.stderr.close()
        return EXIT_OK
    except KeyboardInterrupt as exc:  # Interrupted, or a plain one (a second Ctrl-C)
        stop = exc if isinstance(exc, Interrupted) else Interrupted()
        if not stop.said:
            print(stop.show(args.command), file=sys.stderr)
        return stop.exit_code
    except Exception as exc:  # noqa: BLE001 - every error, shown as its class says (emq_kit.errors)
        error = kit_error(exc)
        if error is not exc and isinstance(error, KitBug) and os.environ.get("EMQ_DEBUG"):
            raise
        print(error.show(args.command), file=sys.stderr)
        return error.exit_code


if __name__ == "__main__":
    sys.exit(main())

"""What every command shares: the exit codes, ``Usage``, the parser, and the report
outputs (``--report``, ``--json``, ``--html``)."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from typing import Any, Callable, NoReturn

from emq_kit.bounds import bounded, sizes, within
from emq_kit.claim import claimed
from emq_kit.errors import EXIT_ENV, EXIT_FAIL, EXIT_INTERRUPTED, EXIT_OK, BadArgument, Usage
from emq_kit.outputs import distinct, writable_dir, writable_path
from emq_kit.redaction import write_text

__all__ = ["DRIVER_TIMEOUT", "EXIT_ENV", "EXIT_FAIL", "EXIT_INTERRUPTED", "EXIT_OK", "Outputs", "Parser", "Usage",
           "add_number",
           "add_outputs", "bounded", "claimed", "sizes", "within", "writable_dir", "writable_file", "writable_path"]


DRIVER_TIMEOUT = ("with --driver: how long one request may take, init included (default 10, and 30 for init: "
                  "a runtime may be starting)")
"""The help of ``--timeout``, check's and replay's (DP-14)."""


def add_number(p: argparse.ArgumentParser, command: str, flag: str, text: str,
               kind: Callable[[str], Callable[[str], Any]] = bounded, **more: Any) -> None:
    """Add the numeric option ``flag`` of ``command`` to ``p``: its type is ``kind`` of
    its range (``bounded``, or ``sizes`` for a list), its help ``text`` and the range."""
    option = f"{command} {flag}"
    p.add_argument(flag, type=kind(option), help=f"{text}; {within(option)}", **more)


class Parser(argparse.ArgumentParser):
    """The command line's parser: a usage error is one line on stderr, exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_ENV, f"{self.prog}: {message} (see {self.prog} --help)\n")


def writable_file(text: str) -> str:
    """An argparse type: a file the command can write its output to, checked before any
    work (``--pytest FILE``): ``writable_path``'s probe; ``-`` is stdout."""
    if text == "-":
        return text
    try:
        writable_path(text)
    except BadArgument as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def add_outputs(p: argparse.ArgumentParser, *, html: str | None = None, json_file: bool = False) -> None:
    """Add ``--report FILE`` and ``--json`` (and ``--html FILE`` when ``html`` says what
    the page shows) to a command: every command's one report (specs/schemas/report.json).
    ``json_file``: the command once took ``--json FILE``; that form is refused with the
    flag that writes a file (``--json`` has one meaning everywhere: print the report)."""
    p.add_argument("--report", metavar="FILE", help="write the run's versioned JSON report "
                   "(specs/schemas/report.json) to FILE")
    if json_file:
        p.add_argument("--json", nargs="?", const=True, default=False, metavar="FILE",
                       help="print the report on stdout instead of the text (to write it to a file: "
                            "--report FILE)")
    else:
        p.add_argument("--json", action="store_true", help="print the report on stdout instead of the text")
    if html is not None:
        p.add_argument("--html", metavar="FILE", help=f"write a self-contained HTML page: {html}")


class Outputs:
    """A command's report outputs, from the arguments ``add_outputs`` added: the paths
    checked before the run, the start time taken, and at the end the document written
    and/or printed."""

    def __init__(self, args: argparse.Namespace) -> None:
        report, self.json = args.report, args.json
        if isinstance(self.json, str):  # the old --json FILE: one meaning now, said before any work
            raise Usage(f"argument --json: takes no FILE, it prints the report on stdout; write the report to "
                        f"{self.json} with --report {self.json}")
        distinct(vars(args), json=bool(self.json))
        self.report = None if report is None else writable_path(report, "the report")
        html = getattr(args, "html", None)
        self.html = None if html is None else writable_path(html, "the HTML page")
        self.started = dt.datetime.now(dt.timezone.utc)

    def say(self, text: str = "", **kw: Any) -> None:
        """Print the human text, unless stdout carries the JSON document."""
        if not self.json:
            print(text, **kw)

    def emit(self, build: Callable[[dt.datetime, dt.datetime], dict[str, Any]]) -> dict[str, Any]:
        """Build the document (from the start time and now), write it to ``--report``
        and print it with ``--json``; the document."""
        document = build(self.started, dt.datetime.now(dt.timezone.utc))
        text = json.dumps(document, indent=2) + "\n"
        if self.report is not None:
            try:
                write_text(self.report, text)
            except OSError as exc:  # checked before the run; the disk may have filled since
                raise Usage(f"cannot write the report {self.report}: {exc.strerror or exc}") from None
        if self.json:
            sys.stdout.write(text)
        return document

    def page(self, render: Callable[[], str]) -> None:
        """Write the ``--html`` page, if asked for."""
        if self.html is not None:
            from emq_kit.report.html import write

            write(self.html, render())

"""What every command shares: the exit codes, ``Usage``, argparse types, and the report
outputs (``--report``, ``--json``, ``--html``)."""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, ContextManager, Iterable, Mapping, NoReturn

from emq_kit import bounds
from emq_kit.check.names import Names
from emq_kit.claim import Claim
from emq_kit.errors import EXIT_ENV, EXIT_FAIL, EXIT_INTERRUPTED, EXIT_OK, Usage
from emq_kit.redaction import write_text

__all__ = ["EXIT_ENV", "EXIT_FAIL", "EXIT_INTERRUPTED", "EXIT_OK", "Outputs", "Parser", "Usage", "add_number",
           "add_outputs", "bounded", "claimed", "sizes", "within", "writable_dir", "writable_file", "writable_path"]


def bounded(option: str) -> Callable[[str], Any]:
    """An argparse type: a number in the range ``emq_kit.bounds`` gives ``option``
    (``"check --examples"``); out of range, one line naming the bound (BD-1)."""
    rng = bounds.bound(option)

    def parse(text: str) -> int | float:
        try:
            value: int | float = int(text) if rng.kind == "integer" else float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"not {'an integer' if rng.kind == 'integer' else 'a number'}: {text!r}") from None
        why = rng.refusal(value)
        if why is not None:
            raise argparse.ArgumentTypeError(why)
        return value

    return parse


def within(option: str) -> str:
    """``option``'s range as its ``--help`` ends: ``range 1 to 1,000,000``."""
    return f"range {bounds.bound(option).text()}"


def sizes(option: str) -> Callable[[str], tuple[int, ...]]:
    """An argparse type: comma-separated integers in ``option``'s range, ascending."""
    one = bounded(option)

    def parse(text: str) -> tuple[int, ...]:
        out = tuple(sorted(int(one(x.strip())) for x in text.split(",") if x.strip()))
        if not out:
            raise argparse.ArgumentTypeError(f"not a list of integers: {text!r}")
        return out

    return parse


def add_number(p: argparse.ArgumentParser, command: str, flag: str, text: str,
               kind: Callable[[str], Callable[[str], Any]] = bounded, **more: Any) -> None:
    """Add the numeric option ``flag`` of ``command`` to ``p``: its type is ``kind`` of
    its range (``bounded``, or ``sizes`` for a list), its help ``text`` and the range."""
    option = f"{command} {flag}"
    p.add_argument(flag, type=kind(option), help=f"{text}; {within(option)}", **more)


def claimed(url: str | None, logical: Iterable[str], *, command: str, wipe: bool = False,
            given: Mapping[str, str] | None = None) -> ContextManager[Names | None]:
    """The run's claim on the server ``url`` (``emq_kit.claim``: the run's names, its
    record, nothing left after it), or None without a server: the embedded fakeredis
    and a serverless driver hold nobody else's data."""
    if url is None:
        return contextlib.nullcontext(None)
    return Claim(url, logical, given=given, wipe=wipe, command=command)


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
    except Usage as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def writable_path(path: str | Path, what: str = "output") -> Path:
    """``path`` if a file can be written there, else ``Usage``: checked before a run
    starts, so an hour's soak does not end on a typo (OUT-1). The directory must exist
    (a mistyped one is refused, not made). The check is a probe (open the file for
    appending, or a temporary file beside it), not ``os.access``, which a root user and
    a read-only mount both fool; an existing file's content is left as it is."""
    out = Path(path)
    if out.is_dir():
        raise Usage(f"cannot write {what} {out}: it is a directory")
    parent = out.parent
    if not parent.is_dir():
        raise Usage(f"cannot write {what} {out}: no directory {parent}")
    try:
        if out.exists():
            with open(out, "a"):
                pass
        else:
            with tempfile.TemporaryFile(dir=parent):
                pass
    except OSError as exc:
        raise Usage(f"cannot write {what} {out}: {exc.strerror or exc}") from None
    return out


def writable_dir(path: str | Path, what: str) -> Path:
    """``path`` if files can be written into it (it is a directory, or one that can be
    created there), else ``Usage`` (OUT-1: ``--traces DIR``, checked before any work;
    the directory itself is created only when a file goes into it)."""
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise Usage(f"cannot write {what} into {out}: it is not a directory")
    _creatable(out, what, out)
    return out


def _creatable(directory: Path, what: str, shown: Path) -> None:
    """``Usage`` unless the nearest of ``directory`` and its parents that exists is a
    directory a file can be created in (probed with a temporary file)."""
    existing = directory.absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise Usage(f"cannot write {what} {shown}: {existing} is not a directory")
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as exc:
        raise Usage(f"cannot write {what} {shown}: no file can be created in {existing} "
                    f"({exc.strerror or exc})") from None


def add_outputs(p: argparse.ArgumentParser, *, html: str | None = None, json_file: bool = False) -> None:
    """Add ``--report FILE`` and ``--json`` (and ``--html FILE`` when ``html`` says what
    the page shows) to a command: every command's one report (specs/schemas/report.json).
    ``json_file``: the command once took ``--json FILE``; that form still writes the
    report to FILE, deprecated."""
    p.add_argument("--report", metavar="FILE", help="write the run's versioned JSON report "
                   "(specs/schemas/report.json) to FILE")
    if json_file:
        p.add_argument("--json", nargs="?", const=True, default=False, metavar="FILE",
                       help="print the report on stdout instead of the text (--json FILE: deprecated, "
                            "the same as --report FILE)")
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
        if isinstance(self.json, str):  # the deprecated --json FILE
            print(f"emq {args.command}: --json FILE is deprecated; use --report FILE", file=sys.stderr)
            report, self.json = report or self.json, False
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

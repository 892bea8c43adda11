"""``emq matrix``: check and campaign reports drawn as one conformance matrix, as text,
JSON (``--report``, ``--json``) and a self-contained HTML page (``--html``;
emq_kit/campaign/matrix.py, specs/campaign.md CMP-8)."""

from __future__ import annotations

import argparse
from typing import Any

from emq_kit import interrupts
from emq_kit.campaign.matrix import DIFFERS, load, matrix, verdict
from emq_kit.cli.common import EXIT_FAIL, EXIT_OK, Outputs, add_outputs
from emq_kit.errors import inert
from emq_kit.report.document import envelope
from emq_kit.report.verdicts import headline


def text(body: dict[str, Any]) -> list[str]:
    """The matrix as ``emq matrix`` prints it: each column's counts, then the rows that
    are not the same in every column, or differ somewhere."""
    # names and words come from the reports read: shown inert (a foreign CI artifact);
    # two columns of one name (two checks of one target) are told apart by their report
    names = [c["name"] for c in body["columns"]]
    lines = [inert(f"{c['name']} ({c['profile']}, {c['clock']})"
                   + (f" from {c['source']}" if names.count(c["name"]) > 1 else "")) + ": "
             + ", ".join(f"{n} {s}" for s, n in c["counts"].items() if n)
             + ("" if c["earned"] else " (not earned: a report or run it draws did not conform)")
             for c in body["columns"]]
    for row in body["rows"]:
        states = [x["state"] for x in row["cells"]]
        if len(set(states)) > 1 or DIFFERS in states:
            lines.append(f"  {inert(row['name'])}: " + "  ".join(states))
    return lines


def cmd_matrix(args: argparse.Namespace) -> int:
    """``emq matrix``: every report read (and its version checked) and every output
    probed before anything is written (OUT-1)."""
    reports = [(path, load(path)) for path in args.reports]
    out = Outputs(args)
    body = matrix(reports)
    word = verdict(body)
    code = EXIT_FAIL if word == DIFFERS else EXIT_OK
    interrupts.decided()  # the last stopping point: from here the verdict stands (INT-3)
    out.say("\n".join([f"{headline('matrix', word)}  {len(body['columns'])} columns, {len(body['rows'])} rows",
                        *text(body)]))
    out.emit(lambda started, finished: envelope(
        "matrix", word, code, body, target=None, seed=None,
        figures={"columns": len(body["columns"]), "rows": len(body["rows"])}, started=started, finished=finished))

    def page() -> str:
        from emq_kit.report.matrix_page import matrix_page  # the pages' module only for --html

        return matrix_page(body)

    out.page(page)
    return code


def register(sub: Any) -> None:
    """Add ``emq matrix`` to the command line."""
    m = sub.add_parser("matrix", help="draw check and campaign reports as one conformance matrix (cells x targets)")
    m.add_argument("reports", nargs="+", metavar="REPORT", help="a check's or a campaign's --report file")
    add_outputs(m, html="the matrix: a row per op x outcome cell and per cause, a column per target")
    m.set_defaults(func=cmd_matrix)

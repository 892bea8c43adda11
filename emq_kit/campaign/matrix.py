"""The conformance matrix (specs/campaign.md CMP-8): check and campaign reports in,
columns the targets, rows the contract's op x outcome cells the reports name and then
the causes found; each cell ``conforms``, ``differs`` (with its trace),
``not-implemented`` or ``unreached``. Pure: documents in, the matrix out."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from emq_kit.errors import BadArgument
from emq_kit.inputs import read_text
from emq_kit.report.document import FORMAT, VERSION
from emq_kit.report.verdicts import upgrade

CONFORMS, DIFFERS, NOT_IMPLEMENTED, UNREACHED = "conforms", "differs", "not-implemented", "unreached"
STATES = (CONFORMS, DIFFERS, NOT_IMPLEMENTED, UNREACHED)
UNEARNED = "unearned"
"""The matrix's word when no column differs yet one did not earn conformance."""
MARKERS = re.compile(r"(<!-- matrix: made by scripts/matrix.py -->\n)(.*?)(<!-- /matrix -->)", re.S)
"""Where the README keeps its summary of the matrix (``summary``)."""


def load(path: str | Path) -> dict[str, Any]:
    """The report at ``path``: a check's or a campaign's, of this report version or the
    one before, read as this one (else one ``BadArgument`` naming the file)."""
    try:
        document = json.loads(read_text(path, holds="a report holds"))
    except OSError as exc:
        raise BadArgument(f"cannot read the report {path}: {exc.strerror or exc}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadArgument(f"the report {path} is not JSON: {exc}") from None
    except RecursionError:
        raise BadArgument(f"the report {path} is nested deeper than JSON is read here") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise BadArgument(f"{path} is not an emq report (no \"format\": \"{FORMAT}\")")
    if document.get("version") not in (VERSION - 1, VERSION):
        raise BadArgument(f"the report {path} is of version {document.get('version')!r}; this kit reads "
                          f"{VERSION - 1} and {VERSION}")
    if document.get("command") not in ("check", "campaign"):
        raise BadArgument(f"the report {path} is of emq {document.get('command')}: the matrix reads check and "
                          "campaign reports")
    # the version before has this version's bodies; its verdict word is mapped (TR-18)
    document = upgrade(document, str(path)) if document["version"] == VERSION - 1 else document
    _shaped(document, path)
    return document


def _shaped(document: dict[str, Any], path: str | Path) -> None:
    """``BadArgument`` naming where ``document`` is not a report of its schema
    (specs/schemas/report.json): a body the matrix would misread is refused, not drawn
    (CMP-8)."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import best_match

    from emq_kit.ports.protocol import said
    from emq_kit.report.document import schema

    problem = best_match(Draft202012Validator(schema()).iter_errors(document))
    if problem is not None:
        where = "/".join(str(p) for p in problem.absolute_path) or "(top)"
        raise BadArgument(f"the report {path} is no report of specs/schemas/report.json at {said(where, 200)}: "
                          f"{said(problem.message, 200)}")


def columns(document: dict[str, Any], source: str) -> list[dict[str, Any]]:
    """The columns one report gives: a check's one (its target, profile and clock), a
    campaign's one per target (its runs' union)."""
    if document["command"] == "check":
        body = document["check"]
        described = body["target"]
        clock = "server" if "--clock server" in body["rerun"] else "virtual"  # the rerun line repeats a non-default clock
        name = f"{document['target']} {body['profile']}"
        return [_column(name, described, source, body["cells"], body["differences"], body["causes"],
                        profile=body["profile"], clock=clock, judged=[document["verdict"]])]
    body = document["campaign"]
    out = []
    for target in body["plan"]["targets"]:
        cells = body["coverage"].get(target["name"])
        if cells is None:  # no run of it gave a verdict
            continue
        runs = {r["id"] for r in body["runs"] if r["target"] == target["name"]}
        found = [{**d, "runs": [r for r in d["runs"] if r in runs]} for d in body["differences"]]
        causes = [c for c in body["causes"] if runs & set(c["runs"])]
        described = {k: v for k, v in target.items() if v is not None}
        out.append(_column(target["name"], described, source, cells, [d for d in found if d["runs"]], causes,
                           profile=",".join(body["plan"]["profiles"]), clock=",".join(body["plan"]["clocks"]),
                           judged=[r.get("verdict") for r in body["runs"] if r["target"] == target["name"]]))
    return out


def _column(name: str, described: dict[str, Any], source: str, cells: dict[str, Any], found: list[dict[str, Any]],
            causes: list[dict[str, Any]], *, profile: str, clock: str, judged: list[Any]) -> dict[str, Any]:
    """One column; ``judged``, the verdicts of the reports (or runs) it draws: it earned
    conformance only when each of them is ``conforms``."""
    states: dict[str, dict[str, Any]] = {}
    for cell in cells["hits"]:
        states[cell] = {"state": CONFORMS, "hits": cells["hits"][cell]}
    for cell in cells["unreached"]:
        states[cell] = {"state": UNREACHED}
    for cell in cells["not_implemented"]:
        states[cell] = {"state": NOT_IMPLEMENTED, "why": why_not(cell)}
    for d in found:
        cell = d["signature"]["cell"]
        if cell is not None and states.get(cell, {}).get("state") != DIFFERS:
            states[cell] = {"state": DIFFERS, "rule": d["signature"]["rule"], "trace": d["trace"],
                            "replay": d["replay"]}
    earned = bool(judged) and all(word == CONFORMS for word in judged)
    return {"name": name, "target": described, "profile": profile, "clock": clock, "source": source,
            "earned": earned, "cells": states, "causes": {c["title"]: c["class"] for c in causes}}


def why_not(cell: str) -> str:
    """Why a target was sent no call that could reach ``cell`` (its check's
    ``not_implemented``): raw calls need the raw capability, a wrong-typed key's refusal
    the key faults (DP-9e), any other cell its op (DP-9a)."""
    op, _, outcome = cell.partition("/")
    if op == "raw":
        return "the target does not declare the raw capability"
    if outcome == "EMQTYPE":
        return f"no key faults (or {op} not offered)"
    return f"the target does not offer {op}"


def _order(cell: str) -> tuple[int, str, str]:
    """Rows in the contract's op order (specs/transitions.json), then by outcome."""
    from emq_model import spec

    op, _, outcome = cell.partition("/")
    ops = [*spec.OPS, *spec.LANE_OPS]
    return (ops.index(op) if op in ops else len(ops), op, outcome)


def matrix(reports: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """The matrix of ``reports`` (source, document), in the given order: its columns
    and rows (``{"kind": "cell" | "cause", "name", "class"?, "cells": [state per
    column]}``) and each column's count of each state."""
    cols = [c for source, document in reports for c in columns(document, source)]
    names = sorted({cell for c in cols for cell in c["cells"]}, key=_order)
    rows: list[dict[str, Any]] = []
    for cell in names:
        rows.append({"kind": "cell", "name": cell,
                     "cells": [c["cells"].get(cell, {"state": UNREACHED}) for c in cols]})
    titles: dict[str, str] = {}
    for c in cols:
        titles.update(c["causes"])
    for title in sorted(titles, key=lambda t: (titles[t] != "lifecycle", t)):
        rows.append({"kind": "cause", "name": title, "class": titles[title],
                     "cells": [{"state": DIFFERS if title in c["causes"] else CONFORMS} for c in cols]})
    counts = [{state: sum(r["cells"][i]["state"] == state for r in rows if r["kind"] == "cell") for state in STATES}
              for i in range(len(cols))]
    return {"columns": [{k: v for k, v in c.items() if k not in ("cells", "causes")} | {"counts": n}
                        for c, n in zip(cols, counts)], "rows": rows}


def verdict(body: dict[str, Any]) -> str:
    """``differs`` when any column differs somewhere; else ``conforms`` when every column
    earned it (each report or run it draws conforms), and ``unearned`` when one did not
    (a dev run, a gated run that left cells unreached: CMP-8)."""
    if any(c["counts"][DIFFERS] for c in body["columns"]) or any(r["kind"] == "cause" for r in body["rows"]):
        return DIFFERS
    return CONFORMS if all(c["earned"] for c in body["columns"]) else UNEARNED


def summary(body: dict[str, Any], seed: int) -> str:
    """The README's picture of a matrix of ``dev`` runs at ``seed`` (scripts/matrix.py): a
    row per target, its cells counted by state, then the causes found."""
    lines = ["| target | " + " | ".join(STATES) + " |", "|---|" + "---|" * len(STATES)]
    for c in body["columns"]:
        lines.append(f"| {c['name']} | " + " | ".join(str(c["counts"].get(s, 0)) for s in STATES) + " |")
    causes = [r["name"] for r in body["rows"] if r["kind"] == "cause"]
    lines.append("")
    lines.append(f"`dev` profile, seed {seed}, virtual clock; causes found: {', '.join(causes) or 'none'}. "
                 "Every cell: [docs/matrix.html](docs/matrix.html).")
    return "\n".join(lines) + "\n"


def with_summary(readme: str, table: str) -> str:
    """``readme`` with ``table`` between its matrix markers (else one ``BadArgument``)."""
    if not MARKERS.search(readme):
        raise BadArgument("README.md has no matrix markers")
    return MARKERS.sub(lambda m: m.group(1) + table + m.group(3), readme)

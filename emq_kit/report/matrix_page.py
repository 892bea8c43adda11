"""The conformance matrix as one self-contained HTML page (specs/campaign.md CMP-8):
inline CSS, no script, no network; a row per op x outcome cell and per cause, a column
per target, each cell coloured by its state and a difference's trace named in it."""

from __future__ import annotations

from typing import Any

from emq_kit.report.html import _e, _page

CSS = """
table.matrix td.conforms{background:#d7f5dd}table.matrix td.differs{background:#ffb3b3}
table.matrix td.not-implemented{background:#eee;color:#777}table.matrix td.unreached{background:#fff6d5}
table.matrix td{font-size:12.5px}table.matrix th.row{font-family:ui-monospace,monospace;font-weight:normal}
table.matrix tr.cause th.row{font-family:inherit;font-style:italic}
"""

MARK = {"conforms": "&#10003;", "differs": "&#10007;", "not-implemented": "n/i", "unreached": "&middot;"}


def _cell(cell: dict[str, Any]) -> str:
    state = cell["state"]
    inner = MARK[state]
    if state == "differs" and cell.get("rule"):
        inner += f" {_e(cell['rule'])}"
        if cell.get("trace"):
            inner += f"<br><code>{_e(cell['trace'])}</code>"
    title = f"{state}: {cell['why']}" if cell.get("why") else state
    return f'<td class="{state}" title="{_e(title)}">{inner}</td>'


def matrix_page(body: dict[str, Any], title: str = "emq conformance matrix") -> str:
    """The page of a matrix (``emq_kit.campaign.matrix.matrix``'s body)."""
    head = "".join(f"<th>{_e(c['name'])}<br><small>{_e(c['profile'])} / {_e(c['clock'])}</small></th>"
                   for c in body["columns"])
    counts = "".join("<td>" + ", ".join(f"{n} {s}" for s, n in c["counts"].items() if n) + "</td>"
                     for c in body["columns"])
    rows = "".join(f'<tr class="{r["kind"]}"><th class="row">{_e(r["name"])}</th>'
                   + "".join(_cell(x) for x in r["cells"]) + "</tr>" for r in body["rows"])
    legend = " ".join(f'<span class="klass">{MARK[s]} {s}</span>' for s in MARK)
    html = (f"<h1>{_e(title)}</h1><p>{legend}</p>"
            f'<table class="matrix"><thead><tr><th>cell / cause</th>{head}</tr>'
            f"<tr><th>cells</th>{counts}</tr></thead><tbody>{rows}</tbody></table>")
    return _page(title, f"<style>{CSS}</style>{html}")

"""The transitions table of specs/lifecycle.md, generated from specs/transitions.json so
the prose can never disagree with the table the code reads.

``python -m emq_model.spec_table specs/lifecycle.md`` rewrites the section between the
markers; a test fails when the file and the table differ.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from .spec import LANE_OPS, OPS, TYPES, bound

BEGIN = "<!-- BEGIN GENERATED TABLE (emq_model.spec_table; do not edit by hand) -->"
END = "<!-- END GENERATED TABLE -->"
BEGIN_LANES = "<!-- BEGIN GENERATED LANE TABLE (emq_model.spec_table; do not edit by hand) -->"
END_LANES = "<!-- END GENERATED LANE TABLE -->"


def _arg(arg: dict) -> str:
    t = TYPES[arg["type"]]
    if "alphabet" in t:
        kind = f"{arg['type']} ({t['min_bytes']} to {bound(t['max_bytes'])} of 0-9 A-Z a-z _ . -)"
    elif "min" in t:
        kind = f"{arg['type']} [{bound(t['min'])}, {bound(t['max'])}]"
    elif "values" in t:
        kind = "|".join(t["values"])
    elif "max_bytes" in t:
        kind = f"{arg['type']} (<= {bound(t['max_bytes'])} bytes)"
    else:
        kind = arg["type"]
    return f"`{arg['name']}`{'?' if arg.get('optional') else ''}: {kind}"


def table(ops: dict[str, Any] = OPS) -> str:
    """The markdown table of every op (of ``ops``): arguments, moves, writes, answers,
    refusals, cells."""
    rows = ["| op | rule | arguments | from → to | row writes | answers | refusals | outcome cells |",
            "|---|---|---|---|---|---|---|---|"]
    for op, d in ops.items():
        args = "<br>".join(_arg(a) for a in d["args"]) + ("<br>`now`?: time" if d["clock"] else "")
        move = f"{', '.join(d['from'])} → {', '.join(d['to'])}" if "from" in d else "(read)"
        rows.append(f"| {op} | `{d['rule']}` | {args or '–'} | {move} | {d.get('writes', '–')} | "
                    f"{', '.join(d['answers'])} | {', '.join(d['refusals']) or '–'} | "
                    f"{', '.join(d['outcomes']) or '–'} |")
    return "\n".join(rows)


def render(document: str) -> str:
    """``document`` with the generated sections replaced by the current tables (the core
    ops, then the lane ops)."""
    for begin, end, ops in ((BEGIN, END, OPS), (BEGIN_LANES, END_LANES, LANE_OPS)):
        head, rest = document.split(begin, 1)
        _, tail = rest.split(end, 1)
        document = f"{head}{begin}\n{table(ops)}\n{end}{tail}"
    return document


if __name__ == "__main__":
    path = Path(sys.argv[1] if len(sys.argv) > 1 else "specs/lifecycle.md")
    path.write_text(render(path.read_text("utf-8")), "utf-8")

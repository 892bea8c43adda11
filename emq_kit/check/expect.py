"""Expectations: a port's known differences, pinned by signature in a TOML file
(``specs/schemas/expect.json`` is its schema), so its CI fails only on new ones.

    [[difference]]
    signature = "complete/EMQSTALE T-complete"
    reason = "we delete the row on every complete, by design"

A run whose differences are all listed passes; a difference not listed fails it; a
listed one the run did not meet although it reached its cell is reported *fixed* (it
fails the run only when ``strict``); one whose cell the run never reached (a short run,
its op left out by ``--skip-ops``, a cell no call of the run has) was not looked for:
it is reported *not checked*, never fixed (specs/trace.md TR-17a).
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from emq_kit.check.fence import SIGNATURE as FENCE
from emq_kit.check.signature import Signature, parse
from emq_kit.errors import BadArgument
from emq_kit.inputs import read_text


def load(path: str | Path) -> dict[Signature, str]:
    """The expected differences of ``path``, signature to reason (``BadArgument`` for a
    file that is not one)."""
    try:
        data = tomllib.loads(read_text(path, holds="an expectations file holds"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise BadArgument(f"cannot read expectations {path}: {exc}") from None
    entries = data.get("difference", [])
    if set(data) - {"difference"} or not isinstance(entries, list):
        raise BadArgument(f"{path}: expected only [[difference]] tables")
    out: dict[Signature, str] = {}
    for n, entry in enumerate(entries, 1):
        if not isinstance(entry, dict) or set(entry) != {"signature", "reason"} or not all(
                isinstance(v, str) and v.strip() for v in entry.values()):
            raise BadArgument(f"{path}: difference {n} needs exactly a signature and a reason (non-empty strings)")
        try:
            out[parse(entry["signature"])] = entry["reason"]
        except ValueError as exc:
            raise BadArgument(f"{path}: difference {n}: {exc}") from None
    return out


def apply(report: Any, expected: dict[Signature, str], path: str | Path) -> None:
    """Mark the report's differences ``expected`` lists; of the listed ones it did not
    meet, note as fixed those whose cell it reached (``report.hits``), as not checked
    the others."""
    met = set()
    for d in [*report.differences, *getattr(report, "unreproduced", [])]:
        d.expected = expected.get(d.signature)
        met.add(d.signature)
    report.fixed, report.unchecked = [], []
    for s, r in expected.items():
        if s not in met:
            (report.fixed if looked_for(report, s) else report.unchecked).append((s, r))
    report.expect_file = str(path)


def looked_for(report: Any, sig: Signature) -> bool:
    """Whether the run could have met ``sig`` (TR-17a): its cell of the coverage table was
    reached; a cell beyond the table (``forget_row/ok``, ``queue/EMQARG``) had its op
    called by the search; the fence's is judged at every run."""
    if sig == FENCE or report.hits.get(sig.cell):
        return True
    table = {f"{op}/{outcome}" for op, outcome in (*report.unreached, *report.not_implemented, *report.out_of_focus)}
    return sig.cell not in table and report.op_mix.get(sig.cell.partition("/")[0], 0) > 0


def write(path: str | Path, report: Any) -> Path:
    """A starting expectations file listing the report's differences (each reason a
    placeholder naming where it was first seen, for the author to replace)."""
    import tomli_w  # a maintained TOML writer: every control character escaped as TOML demands

    from emq_kit.redaction import write_text

    listed = [{"signature": str(d.signature),
               "reason": d.expected or f"{d.klass} difference first met at step {d.divergence.step.index}: explain it"}
              for d in report.differences]
    head = "# Known differences of this port (emq check --expect FILE): a signature and its reason each.\n\n"
    return write_text(path, head + tomli_w.dumps({"difference": listed} if listed else {}))

"""The verdict vocabulary (specs/trace.md TR-18), read from ``specs/verdicts.json``: a
command's detail word to its verdict (``conforms``, ``differs``, ``inconclusive``), the
text headline that says both, and a version 2 report's old word mapped to them."""

from __future__ import annotations

import json
from typing import Any

from emq_kit.errors import BadArgument
from emq_model import spec

TABLE: dict[str, Any] = json.loads(spec.text("verdicts.json"))
VERDICTS: tuple[str, ...] = tuple(TABLE["verdicts"])
CONFORMS, DIFFERS, INCONCLUSIVE = VERDICTS
DETAILS: dict[str, dict[str, dict[str, str]]] = TABLE["details"]


def verdict(command: str, detail: str) -> str:
    """The verdict of ``command``'s ``detail`` word (a ``KeyError`` for a word the table
    does not give that command: the kit's own mistake)."""
    return DETAILS[command][detail]["verdict"]


def words(command: str, detail: str, *, loud: bool = False) -> str:
    """The verdict and the detail as a page or a summary says them, ``differs
    (counterexample)`` (``loud``: the verdict in capitals); the detail left out where it
    is the verdict's own word."""
    word = verdict(command, detail)
    return (word.upper() if loud else word) + ("" if detail == word else f" ({detail})")


def headline(command: str, detail: str) -> str:
    """The first words of a command's text: ``emq check: DIFFERS (counterexample)``."""
    return f"emq {command}: {words(command, detail, loud=True)}"


def upgrade(document: dict[str, Any], source: str) -> dict[str, Any]:
    """A version 2 report as version 3 reads it (TR-18): its old verdict word becomes
    the detail (the table's ``was`` where a word was renamed) and the verdict is the
    table's, a campaign's runs' alike; a word the table does not know for its command is
    one ``BadArgument``."""
    command = str(document.get("command"))
    out = {**document, "version": 3, **_mapped(command, document.get("verdict"), source)}
    if command == "campaign" and isinstance(document.get("campaign"), dict):
        runs = [{**run, **({"detail": None} if run.get("verdict") is None else _mapped("check", run["verdict"], source))}
                for run in document["campaign"].get("runs", [])]
        out["campaign"] = {**document["campaign"], "runs": runs}
    return out


def _mapped(command: str, old: Any, source: str) -> dict[str, str]:
    """The verdict and detail of ``command``'s version 2 word ``old``."""
    detail = next((d for d, row in DETAILS.get(command, {}).items() if row.get("was", d) == old), None)
    if detail is None:
        raise BadArgument(f"the report {source} (version 2) has the verdict {old!r}, which emq {command} never gave")
    return {"verdict": verdict(command, detail), "detail": detail}

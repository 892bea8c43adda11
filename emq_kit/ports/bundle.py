"""The script bundle a port loads (``emq scripts --out DIR``), written out. Every script assembled
exactly as ``emq_live`` loads it (generated prelude + ``lib.lua`` + ``<op>.lua``), as
``DIR/<name>.lua``, plus the transition table ``DIR/transitions.json`` the scripts were
assembled from (a port checks its arguments against it). A port reads these files and
does no assembly of its own (specs/driver-protocol.md, "Scripts for ports").
"""

from __future__ import annotations

from pathlib import Path

from emq_live.scripts import ScriptSet
from emq_model import spec


def write(out: str | Path) -> list[Path]:
    """Write the bundle into ``out`` (created if missing); the paths written."""
    directory = Path(out)
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, script in ScriptSet().scripts.items():
        path = directory / f"{name}.lua"
        path.write_bytes(script.source.encode("utf-8"))
        written.append(path)
    table = directory / "transitions.json"
    table.write_text(spec.text("transitions.json"), "utf-8")
    return written + [table]

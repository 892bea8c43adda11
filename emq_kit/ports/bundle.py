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
    """Write the bundle into ``out`` (created if missing); the paths written. Every
    file is probed first (OUT-1, ``BadArgument``), so a bundle is never left half old,
    half new by one file that cannot be written."""
    from emq_kit.outputs import writable_dir, writable_path

    directory = writable_dir(out, "the scripts")
    files = {directory / f"{name}.lua": script.source for name, script in ScriptSet().scripts.items()}
    files[directory / "transitions.json"] = spec.text("transitions.json")
    if directory.is_dir():
        for path in files:
            writable_path(path, "the scripts")
    directory.mkdir(parents=True, exist_ok=True)
    for path, text in files.items():
        path.write_bytes(text.encode("utf-8"))
    return list(files)

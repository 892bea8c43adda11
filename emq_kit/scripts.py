"""``emq scripts --out DIR``: what a port loads, written out. Every script assembled
exactly as ``emq_live`` loads it (generated prelude + ``lib.lua`` + ``<op>.lua``), as
``DIR/<name>.lua``, plus the transition table ``DIR/transitions.json`` the scripts were
assembled from (a port checks its arguments against it). A port reads these files and
does no assembly of its own (specs/driver-protocol.md, "Scripts for ports").
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from emq_live.scripts import ScriptSet
from emq_model import spec

from .cli import EXIT_OK, Usage


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


def cmd_scripts(args: argparse.Namespace) -> int:
    try:
        written = write(args.out)
    except OSError as exc:
        raise Usage(f"cannot write {args.out}: {exc}") from None
    print(f"emq scripts: wrote {len(written)} files to {args.out}")
    return EXIT_OK


def register(sub: Any) -> None:
    """Add ``emq scripts`` to the command line."""
    s = sub.add_parser("scripts", help="write the assembled Lua scripts and the table, for a port")
    s.add_argument("--out", required=True, metavar="DIR", help="the directory to write into")
    s.set_defaults(func=cmd_scripts)

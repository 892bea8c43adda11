"""``emq scripts --out DIR``: write the script bundle a port loads (emq_kit.ports.bundle)."""

from __future__ import annotations

import argparse
from typing import Any

from emq_kit.cli.common import EXIT_OK, Usage
from emq_kit.ports.bundle import write


def cmd_scripts(args: argparse.Namespace) -> int:
    try:
        written = write(args.out)  # every file probed first: one line, nothing written
    except OSError as exc:
        raise Usage(f"cannot write {args.out}: {exc}") from None
    print(f"emq scripts: wrote {len(written)} files to {args.out}")
    return EXIT_OK


def register(sub: Any) -> None:
    """Add ``emq scripts`` to the command line."""
    s = sub.add_parser("scripts", help="write the assembled Lua scripts and the table, for a port")
    s.add_argument("--out", required=True, metavar="DIR", help="the directory to write into")
    s.set_defaults(func=cmd_scripts)

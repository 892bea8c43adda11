"""What every command shares: the exit codes, ``Usage`` and argparse types."""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path
from typing import Callable

EXIT_OK, EXIT_FAIL, EXIT_ENV = 0, 1, 2


class Usage(Exception):
    """A usage problem the command line itself finds: printed as one line, exit 2."""


def positive(text: str) -> int:
    """An argparse type: an integer of at least 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def seconds(text: str) -> float:
    """An argparse type: a finite number of seconds above 0 (``--timeout``, ``--budget``)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds above 0, got {text}")
    return value


def at_most(limit: int, why: str) -> Callable[[str], int]:
    """An argparse type: an integer from 1 to ``limit`` (``why`` names the limit)."""

    def parse(text: str) -> int:
        value = positive(text)
        if value > limit:
            raise argparse.ArgumentTypeError(f"must be at most {limit} ({why}), got {value}")
        return value

    return parse


def writable_file(text: str) -> str:
    """An argparse type: a file the command can write its output to, checked before any
    work (``--json FILE``, ``--report FILE``, ``--html FILE``, ``--pytest FILE``): its
    directory exists and is writable, and it is not a directory. ``-`` is stdout."""
    if text == "-":
        return text
    path = Path(text)
    folder = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a directory")
    if not folder.is_dir():
        raise argparse.ArgumentTypeError(f"cannot write {text}: no directory {folder}")
    if path.exists() and not os.access(path, os.W_OK) or not path.exists() and not os.access(folder, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"cannot write {text}: permission denied")
    return text

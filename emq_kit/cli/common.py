"""What every command shares: the exit codes, ``Usage`` and argparse types."""

from __future__ import annotations

import argparse

EXIT_OK, EXIT_FAIL, EXIT_ENV = 0, 1, 2


class Usage(Exception):
    """A usage problem the command line itself finds: printed as one line, exit 2."""


def positive(text: str) -> int:
    """An argparse type: an integer of at least 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value

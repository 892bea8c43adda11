"""Names of a user's input (a trace, an expectations file, a plan, a report) that are no
regular file: the kit refuses each in one line before it reads a byte (specs/trace.md
TR-9c) — a FIFO would hold it at ``open`` until a writer came, ``/dev/zero`` would be
read until the memory ran out. ``KINDS``: the marker a parametrized table uses, and the
words its refusal says."""

from __future__ import annotations

import os
from pathlib import Path

KINDS = {"<fifo>": "a FIFO, not a regular file", "<zero>": "a character device, not a regular file",
         "<directory>": "a directory, not a regular file"}


def make(path: Path, kind: str) -> Path:
    """``path`` made the ``kind`` of ``KINDS`` (``<zero>``: a symlink to ``/dev/zero``)."""
    if kind == "<fifo>":
        os.mkfifo(path)
    elif kind == "<zero>":
        path.symlink_to("/dev/zero")
    else:
        path.mkdir()
    return path


def write(path: Path, text: str) -> Path:
    """``path`` holding ``text``, or made the kind ``text`` names when it is one of ``KINDS``."""
    if text in KINDS:
        return make(path, text)
    path.write_text(text)
    return path

"""Every file a user hands the kit is read through ``read_input`` (specs/trace.md TR-9c):
a trace, an expectations file, a campaign plan, a report read back. Only a regular file
(after following symlinks) is read, and never more than its bound and one byte: a FIFO
would hold the command at its ``open`` until some writer came, a device (``/dev/zero``)
or an endless file would be read until the memory ran out, so both are refused in one
line before a byte is read, whatever size ``stat`` gives."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from emq_kit.errors import InputRefused

MAX_BYTES = 64 * 1024 * 1024
"""The bound of a file whose caller names none (a trace's is ``emq_kit.trace.validate``'s)."""

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def kind(mode: int) -> str | None:
    """What a file of ``mode`` is, when it is not a regular file (``a FIFO``); else None."""
    if stat.S_ISREG(mode):
        return None
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def read_input(path: str | Path, limit: int = MAX_BYTES, holds: str = "the kit reads") -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them, else
    ``InputRefused`` (``holds`` says whose bound: ``more than a trace holds``). The kind
    and size are checked before the file is opened, the kind again on what was opened
    (without blocking: a FIFO put there meanwhile is refused, not waited on); then at
    most ``limit + 1`` bytes are read, so a file that is longer than its size said (one being
    written, a ``/proc`` file) is refused by the same bound."""
    found = os.stat(path)  # follows a symlink, as open would
    what = kind(found.st_mode)
    if what is not None:
        raise InputRefused(f"{what}, not a regular file")
    if found.st_size > limit:  # not even read
        raise InputRefused(f"{found.st_size:,} bytes, more than {holds} ({limit:,})")
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as f:
        what = kind(os.fstat(fd).st_mode)
        if what is not None:
            raise InputRefused(f"{what}, not a regular file")
        data = f.read(limit + 1)
    if len(data) > limit:
        raise InputRefused(f"{limit + 1:,} bytes read and more to come, more than {holds} ({limit:,})")
    return data


def read_text(path: str | Path, limit: int = MAX_BYTES, holds: str = "the kit reads") -> str:
    """``read_input`` decoded as UTF-8 (``UnicodeDecodeError`` for bytes that are not)."""
    return read_input(path, limit, holds).decode("utf-8")

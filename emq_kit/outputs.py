"""Every output path probed before any work (specs/ownership.md OUT-1): a file a command
will write, and a directory it will write files into, are checked before a run starts,
so an hour's soak does not end on a typo."""

from __future__ import annotations

import tempfile
from pathlib import Path

from emq_kit.errors import BadArgument


def writable_path(path: str | Path, what: str = "output") -> Path:
    """``path`` if a file can be written there, else ``BadArgument``: checked before a run
    starts, so an hour's soak does not end on a typo (OUT-1). The directory must exist
    (a mistyped one is refused, not made). The check is a probe (open the file for
    appending, or a temporary file beside it), not ``os.access``, which a root user and
    a read-only mount both fool; an existing file's content is left as it is."""
    out = Path(path)
    if out.is_dir():
        raise BadArgument(f"cannot write {what} {out}: it is a directory")
    parent = out.parent
    if not parent.is_dir():
        raise BadArgument(f"cannot write {what} {out}: no directory {parent}")
    try:
        if out.exists():
            with open(out, "a"):
                pass
        else:
            with tempfile.TemporaryFile(dir=parent):
                pass
    except OSError as exc:
        raise BadArgument(f"cannot write {what} {out}: {exc.strerror or exc}") from None
    return out


def writable_dir(path: str | Path, what: str) -> Path:
    """``path`` if files can be written into it (it is a directory, or one that can be
    created there), else ``BadArgument`` (OUT-1: ``--traces DIR``, checked before any work;
    the directory itself is created only when a file goes into it)."""
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise BadArgument(f"cannot write {what} into {out}: it is not a directory")
    _creatable(out, what, out)
    return out


def _creatable(directory: Path, what: str, shown: Path) -> None:
    """``BadArgument`` unless the nearest of ``directory`` and its parents that exists is a
    directory a file can be created in (probed with a temporary file)."""
    existing = directory.absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise BadArgument(f"cannot write {what} {shown}: {existing} is not a directory")
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as exc:
        raise BadArgument(f"cannot write {what} {shown}: no file can be created in {existing} "
                    f"({exc.strerror or exc})") from None

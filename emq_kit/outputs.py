"""Every output path probed before any work (specs/ownership.md OUT-1): a file a command
will write, and a directory it will write files into, are checked before a run starts,
so an hour's soak does not end on a typo."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Any, Mapping

from emq_kit.errors import BadArgument


def writable_path(path: str | Path, what: str = "output") -> Path:
    """``path`` if a file can be written there, else ``BadArgument``: checked before a run
    starts, so an hour's soak does not end on a typo (OUT-1). The directory must exist
    (a mistyped one is refused, not made). The check is a probe (open the file for
    appending, or a temporary file beside it), not ``os.access``, which a root user and
    a read-only mount both fool; an existing file's content is left as it is."""
    out = _named(path, what)
    real = _followed(out, what)  # a symbolic link is written through: the file it names is probed
    shown = f"{out} (a symbolic link to {real})" if real is not out else str(out)
    if real.is_dir():
        raise BadArgument(f"cannot write {what} {shown}: it is a directory")
    parent = real.parent
    if not parent.is_dir():
        raise BadArgument(f"cannot write {what} {shown}: no directory {parent}")
    try:
        if real.exists():
            with open(real, "a"):
                pass
        else:
            with tempfile.TemporaryFile(dir=parent):
                pass
    except OSError as exc:
        raise BadArgument(f"cannot write {what} {shown}: {exc.strerror or exc}") from None
    return out


def writable_dir(path: str | Path, what: str) -> Path:
    """``path`` if files can be written into it (it is a directory, or one that can be
    created there), else ``BadArgument`` (OUT-1: ``--traces DIR``, checked before any work;
    the directory itself is created only when a file goes into it)."""
    out = _named(path, what)
    if out.is_symlink() and not out.exists():  # a dangling link: no directory can be made in its place
        raise BadArgument(f"cannot write {what} into {out}: it is a symbolic link to {os.readlink(out)}, "
                          "which does not exist")
    if out.exists() and not out.is_dir():
        raise BadArgument(f"cannot write {what} into {out}: it is not a directory")
    _creatable(out, what, out)
    return out


def _named(path: str | Path, what: str) -> Path:
    """``path`` as a ``Path``; ``BadArgument`` for an empty one, which ``Path`` would read
    as the current directory (``--traces ''`` wrote there)."""
    if isinstance(path, str) and not path.strip():
        raise BadArgument(f"cannot write {what}: the path is empty")
    return Path(path)


def _followed(out: Path, what: str) -> Path:
    """Where a write to ``out`` lands: ``out``, or the path its symbolic links lead to
    (``BadArgument`` when they loop)."""
    if not out.is_symlink():
        return out
    real = Path(os.path.realpath(out))
    if real.is_symlink():  # realpath stops inside a loop of links
        raise BadArgument(f"cannot write {what} {out}: its symbolic links loop")
    return real


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


OUTPUT_FLAGS = ("report", "html", "summary", "write_expect", "pytest")
"""The arguments that name a file a command writes (``--write-expect`` as ``write_expect``)."""
INPUT_FLAGS = ("expect",)
"""The arguments that name a file a command reads and may not overwrite."""


def distinct(given: Mapping[str, Any], *, json: bool = False, prefix: str = "") -> None:
    """``BadArgument`` when two outputs of ``given`` (an argument's name to its path)
    name one file, one names a file an input of it reads (``--write-expect`` over the
    ``--expect`` it reads), or, with ``json`` (the report on stdout), one is stdout: the
    last write would win and the others be lost (OUT-1). ``-`` is stdout already;
    ``prefix``: the options' own (``emq-`` for the pytest plugin's ``--emq-report``)."""
    seen: dict[Any, str] = {}
    if json:
        with contextlib.suppress(OSError):
            seen[_identity_of(os.fstat(1))] = "stdout, where --json prints the report"
    for name in INPUT_FLAGS:
        path = given.get(name)
        if path:
            seen.setdefault(_identity(Path(path)), f"the file {_flag(prefix + name)} reads")
    for name in OUTPUT_FLAGS:
        path = given.get(name)
        if not path or path == "-":
            continue
        key = _identity(Path(path))
        if key in seen:
            raise BadArgument(f"{_flag(prefix + name)} {path} is {seen[key]}: one file, one output")
        seen[key] = f"the file {_flag(prefix + name)} writes"


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _identity(path: Path) -> Any:
    """What makes two paths one file: the file itself when it exists (a link, a hard
    link, ``/dev/stdout`` alike), else where the path leads."""
    try:
        return _identity_of(path.stat())
    except OSError:
        return os.path.realpath(path)


def _identity_of(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino

"""The library's checks of its arguments, one argument each, shared by ``CheckOptions``
and ``emq_kit.replay``: a refusal is ``BadArgument`` worded as the command line's parser
words a bad argument (``argument --FLAG: WHY``), a numeric range is ``emq_kit.bounds``'
(BD-1). Each runs before anything is opened or written."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

from emq_kit import bounds
from emq_kit.errors import BadArgument


def refused(flag: str, why: str) -> BadArgument:
    """``argument FLAG: WHY``, as the command line's parser words a bad argument."""
    return BadArgument(f"argument {flag}: {why}")


def number(option: str, value: object, *, optional: bool = True) -> None:
    """``value`` is a number in the range of ``option`` (``"check --timeout"``): an
    integer where the range counts, any real number where it is seconds; ``None`` only
    when ``optional`` (the option not given)."""
    flag = option.split(" ", 1)[1]
    if value is None and optional:
        return
    rng = bounds.bound(option)
    kinds = int if rng.kind == "integer" else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds):
        raise refused(flag, f"not {'an integer' if rng.kind == 'integer' else 'a number'}: {value!r}")
    why = rng.refusal(value)
    if why is not None:
        raise refused(flag, why)


def text(flag: str, value: object, *, optional: bool = True) -> None:
    """``value`` is a ``str`` (or ``None`` when ``optional``)."""
    if not (isinstance(value, str) or (value is None and optional)):
        raise refused(flag, f"not a string: {value!r}")


def switch(flag: str, value: object) -> None:
    """``value`` is ``True`` or ``False``."""
    if not isinstance(value, bool):
        raise refused(flag, f"not True or False: {value!r}")


def choice(flag: str, value: object, choices: Sequence[str], *, optional: bool = False) -> None:
    """``value`` is one of ``choices`` (or ``None`` when ``optional``)."""
    if not (value in choices and isinstance(value, str) or (value is None and optional)):
        raise refused(flag, f"invalid choice: {value!r} (choose from {', '.join(map(repr, choices))})")


def names(flag: str, value: object) -> tuple[str, ...]:
    """``value`` as a tuple of names: a list or tuple of ``str`` (one ``str`` is no list)."""
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise refused(flag, f"not a sequence of names: {value!r}")
    return tuple(value)


def url(value: object) -> None:
    """``value`` is ``None`` or a server URL the client can read (``emq_live.urls.check_url``:
    nothing is connected; a URL is never shown but redacted, one of another type not at all)."""
    from emq_live.urls import UrlError, check_url

    if value is not None:
        try:
            check_url(value)
        except UrlError as exc:  # worded as every command words a URL it cannot read: the URL first
            raise BadArgument(str(exc)) from None


def callback(name: str, value: object) -> None:
    """``value`` is ``None`` or something the run can call (``progress``, ``say``)."""
    if value is not None and not callable(value):
        raise BadArgument(f"{name} is called by the run: a function, got {value!r}")


def path(name: str, value: object) -> str | Path:
    """``value`` as a file's path: a ``str`` or an ``os.PathLike`` of one."""
    if isinstance(value, str):
        return value
    if isinstance(value, os.PathLike) and isinstance(os.fspath(value), str):
        return Path(value)
    raise BadArgument(f"{name} is a file's path (a str or a Path), got {type(value).__name__}: {value!r}")


def given(fields: Any, known: Sequence[str], what: str) -> None:
    """Each of ``fields``' names is one of ``known`` (``what`` names the set)."""
    unknown = sorted(set(fields) - set(known))
    if unknown:
        raise BadArgument(f"unknown {what} {', '.join(map(repr, unknown))}; they are {', '.join(known)}")

"""The run's queue names on a server (issue 14, item 7; specs/trace.md "Queue names").

The machine, its draws, the model and the trace's steps speak of the machine's own queue
names (``machine.QUEUES``). On a server those names could be a user's, so a run on
``--url`` sends them with a per-run suffix (``alpha`` -> ``alpha-1f3a9c02``) unless the
user names the queues (``--queue NAME``, once per queue). ``Renamed`` is the target seen
through that mapping: the one place a logical name becomes a server name. The mapping is
part of the target's ``describe()``, so it is printed and stored in the trace header,
and ``emq replay`` sends the same names again.
"""

from __future__ import annotations

import dataclasses
import secrets
from typing import Any, Callable, Iterable, Mapping, Sequence

from emq_kit.errors import BadArgument
from emq_model import errors, keyspace
from emq_model.snapshot import Snapshot

SUFFIX_BYTES = 4
"""Random bytes of a run's suffix (8 hex digits): two runs on one server never meet."""


def suffixed(logical: Iterable[str], suffix: str | None = None) -> dict[str, str]:
    """Each logical name with ``-<suffix>`` appended (a random suffix when None)."""
    suffix = suffix if suffix is not None else secrets.token_hex(SUFFIX_BYTES)
    return {name: f"{name}-{suffix}" for name in logical}


def named(logical: Iterable[str], given: list[str]) -> dict[str, str]:
    """The user's names (``--queue``), one per logical queue in order: ``BadArgument``
    when the count is not the machine's, a name is given twice, or KS-3 refuses one."""
    logical = list(logical)
    if len(given) != len(logical):
        raise BadArgument(f"the run uses {len(logical)} queues: give --queue {len(logical)} times "
                          f"(got {len(given)})")
    if len(set(given)) != len(given):
        raise BadArgument(f"--queue names must differ, got {given!r}")
    for name in given:
        try:
            keyspace.check_queue(name)
        except errors.EmqError as exc:
            raise BadArgument(f"--queue {name!r}: {exc}") from None
    return dict(zip(logical, given))


class Renamed:
    """A target whose queues are asked for by logical name and live on the server under
    ``names[logical]``. A name outside the mapping (the hostile names of KS-3) passes
    unchanged. Everything else is the wrapped target's."""

    def __init__(self, target: Any, names: Mapping[str, str]) -> None:
        self.inner, self.names = target, dict(names)
        # Raw calls (emq_kit/check/raw.py) compose their KEYS from the machine's own names
        # and judge the server's keys directly, past this mapping: under other names they
        # would write a user's queue and judge the wrong keys. Only names left as they are
        # (--queue alpha --queue 'β*[x]') keep them.
        self.raw = bool(getattr(target, "raw", False)) and all(k == v for k, v in self.names.items())

    def _on_server(self, name: Any) -> Any:
        return self.names.get(name, name) if isinstance(name, str) else name

    def queue(self, name: str) -> Any:
        return self.inner.queue(self._on_server(name))

    def call(self, name: str, op: str, args: dict[str, Any], meanwhile: Callable[[], None] | None = None) -> Any:
        return self.inner.call(self._on_server(name), op, args, meanwhile)

    def dropped(self, name: str) -> tuple[str, ...]:
        return self.inner.dropped(self._on_server(name))

    def snapshot(self, name: str) -> Any:
        """The server's snapshot, told in the logical name (``told``)."""
        return self.told(name, self.inner.snapshot(self._on_server(name)))

    def batch(self, calls: Sequence[tuple[str, str, dict[str, Any]]], snapshots: bool = True) -> list[Any]:
        """A window's calls (emq_kit/check/window.py) on the server's names, each reply's
        snapshot told in the logical name."""
        replies = self.inner.batch([(op, self._on_server(q), args) for op, q, args in calls], snapshots=snapshots)
        return [r._replace(snapshot=None if r.snapshot is None else self.told(q, r.snapshot))
                for (_, q, _), r in zip(calls, replies)]

    def told(self, name: str, snap: Any) -> Any:
        """A snapshot of the server's queue for ``name`` as the model tells it: its
        ``queue`` and the stray keys under its prefix in the logical name (a window's
        snapshot that could not be read, a ``BadReply``, as it is)."""
        if name not in self.names or not isinstance(snap, Snapshot):
            return snap
        theirs, mine = keyspace.prefix(self.names[name]), keyspace.prefix(name)
        stray = tuple(mine + k[len(theirs):] if k.startswith(theirs) else k for k in snap.stray)
        return dataclasses.replace(snap, queue=name, stray=stray)

    def forget_row(self, name: str, job_id: str) -> None:
        self.inner.forget_row(self._on_server(name), job_id)

    def spoil_key(self, name: str, key: str, kind: str, id: str | None = None, group: str | None = None) -> None:
        self.inner.spoil_key(self._on_server(name), key, kind, id, group)

    def mend_key(self, name: str, key: str, id: str | None = None, group: str | None = None) -> None:
        self.inner.mend_key(self._on_server(name), key, id, group)

    def stray_key(self, name: str, key: str, kind: str) -> None:
        self.inner.stray_key(self._on_server(name), key, kind)

    def drop_key(self, name: str, key: str) -> None:
        self.inner.drop_key(self._on_server(name), key)

    def held(self, names: Iterable[str]) -> int:
        return int(self.inner.held([self._on_server(n) for n in names]))

    def describe(self) -> dict[str, Any]:
        return {**self.inner.describe(), "queues": dict(self.names)}

    def __getattr__(self, attr: str) -> Any:  # batches, lanes, reset, close, offered, inspector ...
        return getattr(self.inner, attr)


def with_names(target: Any, names: Mapping[str, str] | None) -> Any:
    """``target`` seen through ``names`` (itself when there is no mapping)."""
    return Renamed(target, names) if names else target

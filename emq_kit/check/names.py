"""The run's names on a server (specs/ownership.md OWN-2; specs/trace.md TR-1a).

The machine, its draws, its raw and hostile calls, the model and the trace's steps speak
of *logical* queue names: the machine's two queues (``machine.QUEUES``), the raw calls'
own (``raw.QUEUE``, ``raw.OTHER``, the edge and bad names of CC-1) and the hostile
names of KS-3 (``machine.BAD_QUEUES``). On a server any of them could be a user's, so a
run sends every one under a name of its own: ``Names`` maps each logical name to its
name on the server, keeping what the name tests (OWN-2):

- a name with room for it gets the run's suffix: ``alpha`` -> ``alpha-1f3a9c02``;
- a name at or past the byte limit keeps its byte length and its last character, the
  suffix just before it (a 128-byte name stays 128 bytes, a 129-byte one 129);
- a one-byte name (the 1-byte edge, ``z``) becomes the run's own one-byte name, one no
  user key and no other live run holds (chosen by ``emq_kit.claim``);
- the empty name stays empty: nothing can mark it, and every check refuses it (only a
  broken implementation writes under it, and the run owns those keys too);
- the machine's queues may instead be named by the user (``--queue``, once per queue).

Whether a name is accepted or refused (KS-3) never changes. ``Renamed`` is a target seen
through the mapping: the one place a logical name becomes a server name, and a server's
snapshot is told back in logical names. Raw calls map their KEYS through ``Names.key``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import secrets
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Iterable, Iterator, Mapping, Sequence, cast

from emq_kit.errors import BadArgument, KitBug
from emq_kit.targets.protocol import Ahead, BatchReply, Capabilities, Target
from emq_model import errors, keyspace
from emq_model.change import Change
from emq_model.snapshot import Snapshot

if TYPE_CHECKING:
    from emq_live.client import Connection

SUFFIX_BYTES = 4
"""Random bytes of a run's suffix (8 hex digits): two runs on one server never meet."""

HEAD = b"emq:{"


def new_suffix() -> str:
    """A fresh run suffix: 8 hex digits."""
    return secrets.token_hex(SUFFIX_BYTES)


def accepted(name: Any) -> bool:
    """Whether KS-3 (and so CC-1) accepts ``name``."""
    try:
        keyspace.check_queue(name)
    except errors.EmqError:
        return False
    return True


def vocabulary() -> tuple[str, ...]:
    """Every queue name a run of the conformance machine may send (logical): the
    machine's queues and hostile names, and the raw calls' queues, edge and bad names."""
    from emq_kit.check.pools import BAD_QUEUES, QUEUES
    from emq_kit.check.raw import contract, variants

    names = (*QUEUES, *BAD_QUEUES, contract.QUEUE, contract.OTHER, *variants.EDGE_QUEUES, *variants.BAD_QUEUES)
    return tuple(dict.fromkeys(n for n in names if isinstance(n, str)))


def _name_in(key: bytes) -> bytes | None:
    """The queue name a key is under (``emq:{name}:…``), as the key holds it, or None:
    no name holds ``}:``, so the first one ends it."""
    end = key.find(b"}:", len(HEAD))
    return key[len(HEAD):end] if key.startswith(HEAD) and end >= 0 else None


def queue_of_key(key: bytes, logical: Iterable[str]) -> str | None:
    """The name of ``logical`` that ``key`` is under (``emq:{name}:…``), or ``None``: a
    key of no queue among them."""
    name = _name_in(key)
    return None if name is None else next((n for n in logical if n.encode("utf-8", "surrogatepass") == name), None)


def one_byte_needed(logical: Iterable[str]) -> bool:
    """Whether ``logical`` holds a one-byte name (the run must pick one of its own)."""
    return any(len(n.encode("utf-8", "surrogatepass")) == 1 for n in logical)


class Names:
    """The run's names: each logical queue name's name on the server (OWN-2), the keys
    the run owns (``owns``) and the globs that find them (``patterns``).

    ``suffix``: the run's suffix; ``given``: logical names the user named (``--queue``);
    ``one_byte``: the run's one-byte name; ``logical``: the names the run may send (each
    mapped at once, so a record of the run lists them all)."""

    def __init__(self, suffix: str, logical: Iterable[str] = (), *, given: Mapping[str, str] | None = None,
                 one_byte: str | None = None) -> None:
        self.suffix, self.given, self.one_byte = suffix, dict(given or {}), one_byte
        self._server: dict[str, str] = {}
        self._logical: dict[str, str] = {}
        self._owned: set[bytes] = set()  # the server names, as a key holds them
        for name in (*self.given, *logical):
            self.server(name)

    def server(self, name: Any) -> Any:
        """The name ``name`` has on the server (anything not a str as it is)."""
        if not isinstance(name, str):
            return name
        found = self._server.get(name)
        if found is None:
            found = self.given.get(name)
            if found is None:
                found = self._mark(name)
            if accepted(found) != accepted(name) or "}:" in found:  # it must keep what the name tests
                raise KitBug(ValueError(f"queue name {name!r} became {found!r}, which KS-3 judges otherwise"))
            self._server[name], self._logical[found] = found, name
            self._owned.add(found.encode("utf-8", "surrogatepass"))
        return found

    def _mark(self, name: str) -> str:
        size = len(name.encode("utf-8", "surrogatepass"))
        tag = "-" + self.suffix
        if size == 0:
            return name
        if size == 1:
            if self.one_byte is None:
                raise KitBug(ValueError(f"the one-byte queue name {name!r} has no name on the server"))
            return self.one_byte
        if size + len(tag) <= keyspace.QUEUE_MAX_BYTES:
            return name + tag
        last = name[-1]
        keep = size - len(last.encode("utf-8", "surrogatepass")) - len(tag)
        head = name[:-1].encode("utf-8", "surrogatepass")[:keep].decode("utf-8", "ignore")
        return head + "x" * (keep - len(head.encode("utf-8"))) + tag + last

    def logical(self, server: str) -> str:
        """The logical name of the server name ``server`` (itself when it is none)."""
        return self._logical.get(server, server)

    @property
    def queues(self) -> dict[str, str]:
        """Every logical name mapped so far -> its server name."""
        return dict(self._server)

    def key(self, key: bytes) -> bytes:
        """A raw call's key (``emq:{q}:rest`` under a logical name) under the server's
        name of ``q``. A key under no name of the run is never sent (OWN-1): a script
        under check may write any key it is given, and a trace's were checked (TR-9a)."""
        name = queue_of_key(key, self._server)
        if name is None:
            raise KitBug(ValueError(f"a raw call's key {key!r:.80} is under no queue name of the run"))
        rest = key[len(HEAD) + len(name.encode("utf-8", "surrogatepass")):]  # "}:" and what follows
        return HEAD + self._server[name].encode("utf-8", "surrogatepass") + rest

    def owns(self, key: bytes | str) -> bool:
        """Whether ``key`` is a key of one of the run's server names (``emq:{name}:…``)."""
        name = _name_in(key.encode("utf-8", "surrogatepass") if isinstance(key, str) else key)
        return name is not None and name in self._owned

    def patterns(self) -> list[str]:
        """SCAN globs that together match every key the run owns (and few others; filter
        with ``owns``): one for every suffixed name, one per name without the suffix."""
        plain = sorted({n for n in self._logical if self.suffix not in n})
        return [f"emq:{{*{keyspace.glob(self.suffix)}*}}:*", *(f"emq:{{{keyspace.glob(n)}}}:*" for n in plain)]

    def scan(self, client: Any) -> Iterator[bytes]:
        """Every key the run owns on ``client``'s server (every primary of a cluster)."""
        seen: set[bytes] = set()
        for match in self.patterns():
            for key in client.scan_iter(match=match, count=1000):
                key = key if isinstance(key, bytes) else str(key).encode("utf-8", "surrogatepass")
                if key not in seen and self.owns(key):
                    seen.add(key)
                    yield key

    def told(self, name: str, snap: Any) -> Any:
        """A snapshot of the server's queue for ``name`` as the model tells it: its
        ``queue`` and the stray keys under its prefix in the logical name (a window's
        snapshot that could not be read, a ``BadReply``, as it is)."""
        if not isinstance(snap, Snapshot) or name not in self._server or self._server[name] == name:
            return snap
        theirs, mine = keyspace.prefix(self._server[name]), keyspace.prefix(name)
        stray = tuple(mine + k[len(theirs):] if k.startswith(theirs) else k for k in snap.stray)
        return snap.retold(name, stray)

    def to_json(self) -> dict[str, Any]:
        """What a run's record keeps (``emq_kit.claim``): enough to find its keys again."""
        return {"suffix": self.suffix, "given": self.given, "one_byte": self.one_byte,
                "logical": sorted(self._server)}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "Names":
        """The names a run's record lists. ``ValueError`` when they cannot be a run's (a
        record written by hand or by another version: not the kit's to judge, OWN-6)."""
        try:
            return cls(str(doc["suffix"]), doc.get("logical", ()), given=doc.get("given") or {},
                       one_byte=doc.get("one_byte"))
        except KitBug as exc:  # a mapping no run of the kit makes
            raise ValueError(str(exc.cause)) from None


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
    ``names.server(logical)``: every name, the hostile ones of KS-3 included. Raw calls
    (``raw.RawJudge``) map their keys through ``run_names``. It can what the wrapped
    target can (its ``capabilities``, ``conn``, ``notes``)."""

    def __init__(self, target: Target, names: Names, shown: Sequence[str]) -> None:
        self.inner, self.run_names, self.shown = target, names, tuple(shown)
        self._told: dict[str, list[tuple[Any, Any]]] = {}  # see snapshot
        self._posted: list[str] = []  # the logical queues of the calls posted, not yet collected

    @property
    def capabilities(self) -> Capabilities:
        return self.inner.capabilities

    @property
    def conn(self) -> Connection | None:
        return self.inner.conn

    @property
    def notes(self) -> Sequence[str]:
        return self.inner.notes

    @property
    def stuck(self) -> bool:
        return self.inner.stuck

    def _on_server(self, name: Any) -> Any:
        return self.run_names.server(name)

    def queue(self, name: str) -> Any:
        return self.inner.queue(self._on_server(name))

    def call(self, name: str, op: str, args: dict[str, Any], meanwhile: Callable[[], None] | None = None) -> Any:
        return self.inner.call(self._on_server(name), op, args, meanwhile)

    def dropped(self, name: str) -> tuple[str, ...]:
        return self.inner.dropped(self._on_server(name))

    def snapshot(self, name: str) -> Any:
        """The server's snapshot, told in the logical name (``Names.told``); the last two
        told of each queue are kept, so ``last_change`` names the very objects handed out."""
        got = self.inner.snapshot(self._on_server(name))
        told = self.run_names.told(name, got)
        self._told[name] = [*self._told.get(name, [])[-1:], (got, told)]
        return told

    def last_change(self, name: str) -> tuple[Snapshot, Change, Snapshot] | None:
        """The wrapped target's ``last_change`` of ``name``, told in the logical name."""
        read = getattr(self.inner, "last_change", None)
        made = read(self._on_server(name)) if read is not None else None
        if made is None:
            return None
        told = {id(got): mine for got, mine in self._told.get(name, [])}
        before, after = told.get(id(made[0])), told.get(id(made[2]))
        if before is None or after is None:
            return None
        small = {**made[1].small, "stray": after.stray}
        return before, dataclasses.replace(made[1], queue=name, small=small), after

    def batch(self, calls: Sequence[tuple[str, str, dict[str, Any]]], snapshots: bool = True) -> list[BatchReply]:
        """A window's calls (emq_kit/check/window.py) on the server's names, each reply's
        snapshot told in the logical name."""
        replies = self.inner.batch([(op, self._on_server(q), args) for op, q, args in calls], snapshots=snapshots)
        return self._tell([q for _, q, _ in calls], replies)

    def post(self, calls: Sequence[tuple[str, str, dict[str, Any]]]) -> None:
        """The wrapped target's ``post`` (an ``Ahead``'s), on the server's names."""
        try:
            cast(Ahead, self.inner).post([(op, self._on_server(q), args) for op, q, args in calls])
        except BaseException:
            self._posted.clear()  # a post that fails drops every call posted (``LiveTarget.post``)
            raise
        self._posted.extend(q for _, q, _ in calls)

    def collect(self) -> list[BatchReply]:
        names, self._posted = self._posted, []
        return self._tell(names, cast(Ahead, self.inner).collect())

    def _tell(self, names: Sequence[str], replies: Sequence[BatchReply]) -> list[BatchReply]:
        """``replies`` of calls on the queues ``names``, each snapshot told in its logical name."""
        return [r._replace(snapshot=None if r.snapshot is None else self.run_names.told(q, r.snapshot))
                for q, r in zip(names, replies)]

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

    def describe(self) -> dict[str, Any]:
        """The wrapped target's, and the server names of the queues ``shown`` (printed,
        and kept in a trace's header: TR-1a)."""
        return {**self.inner.describe(), "queues": {q: self.run_names.server(q) for q in self.shown}}

    def time_calls(self, on: bool) -> bool:
        return self.inner.time_calls(on)

    def bracket(self) -> tuple[int, int] | None:
        return self.inner.bracket()

    def read_changes(self, on: bool) -> bool:
        read = getattr(self.inner, "read_changes", None)
        return bool(read is not None and read(on))

    def read_whole(self, name: str) -> bool:
        read = getattr(self.inner, "read_whole", None)
        return bool(read is not None and read(self._on_server(name)))

    def mark(self, prefixes: Iterable[str] = ()) -> bool:
        mark = getattr(self.inner, "mark", None)
        return bool(mark is not None and mark(prefixes))

    def written(self) -> set[bytes] | None:
        read = getattr(self.inner, "written", None)
        return read() if read is not None else None

    def bounded(self, what: str) -> ContextManager[None]:
        bounded = getattr(self.inner, "bounded", None)
        return bounded(what) if bounded is not None else contextlib.nullcontext()

    def abandon(self) -> None:
        cast(Any, self.inner).abandon()  # only after its ``mark`` said yes

    def candidates(self, name: str, ids: Iterable[str]) -> None:
        name_them = getattr(self.inner, "candidates", None)
        if name_them is not None:
            name_them(self._on_server(name), ids)

    def reset(self) -> None:
        self._posted.clear()
        self.inner.reset()

    def close(self) -> None:
        self.inner.close()


def with_names(target: Target, names: Names | None, shown: Sequence[str] = ()) -> Target:
    """``target`` seen through ``names`` (itself when there are none)."""
    return Renamed(target, names, shown) if names is not None else target

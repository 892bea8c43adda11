"""The snapshot of a queue on the embedded fakeredis, read out of the server's memory.

fakeredis runs in this process and compiles a Lua script on every call (and collects
the Lua heap after it), so snapshot.lua there would be most of a checked step's cost.
The embedded server's keyspace is right here: this module builds, from its memory, the
reply snapshot.lua would give (same keys, same order, same stray rules) and
hands it to the client's one reply parser (``Queue.snapshot_answer``), so the rules of
what a keyspace means live once. On every real server the machine reads with
snapshot.lua; tests/kit/test_memory.py asserts the two readers agree on every keyspace the
tests build, hostile ones included (stray keys, wrong types, foreign counters).

It reads fakeredis's storage through its mapping interface (a database maps key bytes
to items whose ``value`` is a ``ZSet`` iterated in score order, a ``Hash``, or another
type, which makes the key stray), the same objects its commands use.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from emq_model import keyspace, spec
from emq_model.snapshot import Snapshot


def _model_type(value: Any) -> bytes:
    """fakeredis's type name of a stored value (``b"zset"``, ``b"hash"``...); a type
    fakeredis keeps as a plain Python object (a string's bytes, a list) by that name."""
    return value.model_type() if hasattr(value, "model_type") else type(value).__name__.encode()


def _zset(value: Any) -> list[Any]:
    """ZRANGE 0 -1 WITHSCORES, flat: members in Valkey order with their scores."""
    flat: list[Any] = []
    for member in value:
        flat += [member, value[member]]
    return flat


def _hash(value: Any) -> list[Any]:
    """HGETALL, flat."""
    flat: list[Any] = []
    for field, v in value.items():
        flat += [field, v]
    return flat


@lru_cache(maxsize=64)
def _layout(queue: str) -> tuple[tuple[bytes, ...], tuple[bytes, ...], bytes, dict[bytes, bytes]]:
    """The fixed keys of ``queue`` (the queue's, then the lanes'), its prefix, and the
    type each fixed key must hold: the same for every snapshot of the queue."""
    fixed = tuple(k.encode() for k in keyspace.queue_keys(queue))
    lane_fixed = tuple(k.encode() for k in keyspace.lane_keys(queue).values())
    expected = dict(zip(fixed, [b"zset"] * len(spec.LOCATIONS) + [b"hash", b"hash"]))
    expected.update(zip(lane_fixed, [b"list", b"set", b"hash", b"hash", b"hash"]))
    return fixed, lane_fixed, keyspace.prefix(queue).encode(), expected


def reply(db: Any, queue: str) -> list[Any]:
    """What snapshot.lua answers for ``queue`` on the database ``db`` (a fakeredis
    ``Database``): the four locations, the rows, the two counters, the stray keys, the
    lanes, the ring, the paused set and the three lane hashes."""
    fixed, lane_fixed, head, expected = _layout(queue)
    row_head = head + b"job:"
    values: dict[bytes, Any] = {}
    rows: list[Any] = []
    lanes: list[Any] = []
    stray: list[bytes] = []
    for key in list(db):
        if not key.startswith(head):
            continue
        try:
            value = db[key].value
        except KeyError:  # expired while we looked
            continue
        kind = _model_type(value)
        if key in expected:
            if kind == expected[key]:
                values[key] = value
            else:
                stray.append(key)
        elif key.startswith(row_head) and len(key) > len(row_head):
            if kind == b"hash":
                rows += [key[len(row_head):], _hash(value)]
            else:
                stray.append(key)
        elif (group := keyspace.group_of(queue, key.decode("utf-8", "surrogateescape"))) is not None:
            if kind == b"zset":
                lanes += [group.encode(), _zset(value)]
            else:
                stray.append(key)
        else:
            stray.append(key)
    out: list[Any] = [_zset(values[k]) if k in values else [] for k in fixed[: len(spec.LOCATIONS)]]
    out.append(rows)
    out += [_hash(values[k]) if k in values else [] for k in fixed[len(spec.LOCATIONS):]]
    out.append(stray)
    out.append(lanes)
    ring, paused, *hashes = lane_fixed
    out.append(list(values[ring]) if ring in values else [])
    out.append(list(values[paused]) if paused in values else [])
    out += [_hash(values[k]) if k in values else [] for k in hashes]
    return out


def snapshot(queue: Any, server: Any, db: int = 0) -> Snapshot:
    """The snapshot of the live ``queue`` (an ``emq_live`` queue on the in-process
    ``server``), read from memory."""
    with server.lock:
        flat = reply(server.dbs[db], queue.name)
    return queue.snapshot_answer(flat)


def fingerprint(server: Any, db: int = 0) -> dict[bytes, tuple[bytes, list[Any], Any]]:
    """Every key of the embedded server's database ``db`` with its type, its content (a
    zset's and a hash's flat pairs in their order, anything else as its repr) and its
    expiry: what DUMP and PTTL of every key tell apart, read from memory."""
    out: dict[bytes, tuple[bytes, list[Any], Any]] = {}
    with server.lock:
        for key in list(server.dbs[db]):
            try:
                item = server.dbs[db][key]
            except KeyError:  # expired while we looked
                continue
            kind, value = _model_type(item.value), item.value
            content = _zset(value) if kind == b"zset" else _hash(value) if kind == b"hash" else [repr(value)]
            out[key] = (kind, content, item.expireat)
    return out

"""Raw calls: the scripts called past the client, as a port may call them.

The Python client refuses a bad id, queue name or number before any script runs, so the
scripts' own checks (lib.lua, batch.lua: CC-1, CC-2, CC-6, B-1) are only reached by
calling the scripts directly: ``EVALSHA`` with KEYS and ARGV assembled here from the
contract (``specs/transitions.json``: each op's ``argv``, ``row_key``, ``clock``, the
types' bounds and the limits), one thing spoiled at a time.

- ``verdict(op, keys, argv)`` is the contract's oracle of a wire call: the refusal CC-6
  names for it (counts, then the id, the keys, the other arguments, the trailing ``now``)
  or, for a well-formed call, the queue and the model's keyword arguments it carries.
- ``calls(kind, op, model)`` builds the ``RawCall`` values of one spoil (or accepted
  edge) for one op, from a well-formed call that would change the model's current state;
  ``KINDS`` names them all, so a sweep enumerates every kind x op x variant and a
  Hypothesis rule draws one with ``RAW`` (a packed ``Draw``): ``drawn_op(a)`` is its op,
  ``prepare(judge, op)`` puts a job where the op would change it, ``drawn(a, model)``
  builds the call.
- ``RawJudge(conn).send(call)`` sends one call with ``EVALSHA`` through the connection's
  ``ScriptSet`` (the scripts under test) and judges it: a refused call must answer the
  verdict's code and leave every key byte for byte as it was (DUMP and PTTL; on the
  embedded fakeredis, its memory); an accepted one must answer what the model answers and leave the model's
  snapshot, and no other key changed. A clock call without ``now`` runs the model at a
  clock inside the server's ``TIME`` window (``clock.ServerClock``, as ``--clock server``).
- ``sweep(judge)`` runs every call once, deterministically; ``CHECK_EDITS`` are one-check
  edits of lib.lua and batch.lua the sweep must find (tests/test_rawcalls.py).

Batches at the item limit stay cheap: the two calls of ``limit_max`` and ``limit_max + 1``
items go only to ``complete_many``, with absent ids (one ``EXISTS`` per item, nothing
written, so no key weighs on later fingerprints), and only in the sweep (``FULL``), never
in the draws. The item count is checked by one code path for both batches with items
(batch.lua's ``emq.begin_items``); ``enqueue_many`` gets every other spoil and edge.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, Callable, Iterator, Sequence

from emq_live.client import Connection, Queue
from emq_live.scripts import ScriptSet
from emq_model import branded_id, errors, keyspace, spec
from emq_model.model import QueueModel
from emq_model.snapshot import canonical_int, diff

from . import memory
from .clock import ServerClock, _same
from .draws import Draw

QUEUE = "raw"
OTHER = "raw2"
"""The sweep's queue, and the one whose keys are sent in the wrong place."""

OPS: tuple[str, ...] = (*spec.TRANSITIONS, *spec.BATCHES, "counts", "state")
"""Every script a raw call goes to (the snapshot script is the judge's observer)."""

LIMIT_MAX: int = spec.LIMITS["limit_max"]
QUEUE_MAX: int = keyspace.QUEUE_MAX_BYTES
NOW = 1_750_000_000_000

Wire = tuple[bytes, ...]


@dataclass(frozen=True)
class RawCall:
    """One direct call: the script, KEYS and ARGV as bytes, what was spoiled (or which
    edge is taken), and the refusal code the contract names (``None``: accepted)."""

    op: str
    keys: Wire
    argv: Wire
    spoil: str
    expected: str | None

    def __str__(self) -> str:
        def short(v: bytes) -> str:
            return repr(v) if len(v) <= 40 else f"{v[:20]!r}...({len(v)} bytes)"

        keys = ", ".join(map(short, self.keys)) if len(self.keys) <= 8 else f"{len(self.keys)} keys"
        argv = ", ".join(map(short, self.argv)) if len(self.argv) <= 8 else f"{len(self.argv)} arguments"
        return f"{self.op} [{self.spoil}] KEYS [{keys}] ARGV [{argv}] -> {self.expected or 'accepted'}"


@dataclass(frozen=True)
class Decoded:
    """A well-formed call: its queue and the model's keyword arguments (``now`` when the
    call carries one)."""

    queue: str
    args: dict[str, Any]


# -- the contract's shape of each script ---------------------------------------------


@dataclass(frozen=True)
class Shape:
    """What a script takes on the wire (CC-1, CC-2, B-1)."""

    argv: tuple[dict[str, Any], ...]  # the op's argv, or one item's for a batch with items
    clock: bool
    row_key: bool
    items: bool

    @property
    def has_id(self) -> bool:
        return bool(self.argv) and self.argv[0]["type"] == "job_id"

    @property
    def nkeys(self) -> int:
        return len(keyspace.KINDS) + self.row_key


def shape(op: str) -> Shape:
    """The wire shape of ``op`` from the transition table."""
    if op in spec.BATCHES:
        b = spec.BATCHES[op]
        argv = spec.OPS[b["of"]]["argv"] if b["items"] else b["argv"]
        return Shape(tuple(argv), bool(b["clock"]), False, bool(b["items"]))
    d = spec.OPS[op]
    return Shape(tuple(d["argv"]), bool(d["clock"]), bool(d["row_key"]), False)


def _integer(t: dict[str, Any]) -> bool:
    return "min" in t


def _value(arg: dict[str, Any], v: bytes) -> Any:
    """The model's value of one wire argument, or ``ArgError`` (CC-2: an absent optional
    argument is the empty string; integers are canonical decimals in the type's range)."""
    t = spec.TYPES[arg["type"]]
    if arg.get("optional") and v == b"":
        return None
    if _integer(t):
        n = canonical_int(v)  # CC-2: ``0``, or a non-zero digit followed by digits
        if n is None:
            raise errors.ArgError(f"{arg['name']} is not a canonical decimal: {v[:40]!r}")
        return spec.check_value(arg["type"], arg["name"], n)
    if "values" in t:
        return spec.check_value(arg["type"], arg["name"], v.decode("latin-1"))
    return spec.check_value(arg["type"], arg["name"], v)


def _queue_of(pending: bytes) -> str | None:
    """The queue name inside ``emq:{q}:pending`` when CC-1 allows it (1..queue_max_bytes
    bytes, none below 0x21, no 0x7F, no brace), else ``None``. The sweep only sends names
    that are also KS-3 names, so the model can hold them."""
    head, tail = b"emq:{", b"}:" + keyspace.KINDS[0].encode()
    if not (pending.startswith(head) and pending.endswith(tail)) or len(pending) <= len(head) + len(tail):
        return None
    q = pending[len(head) : -len(tail)]
    if len(q) > QUEUE_MAX or any(b < 0x21 or b in (0x7F, 0x7B, 0x7D) for b in q):
        return None
    try:
        return keyspace.check_queue(q.decode("utf-8"))
    except (UnicodeDecodeError, errors.ArgError):
        raise ValueError(f"{q!r} passes the byte rules of CC-1 but is no KS-3 name: the contract "
                         "does not decide the call, so no raw call may carry it") from None


def _id(v: bytes) -> str:
    text = v.decode("ascii", "replace")
    if not (v.isascii() and branded_id.is_valid(text, branded_id.JOB)):
        raise errors.KindError(f"not a well-formed {branded_id.JOB} id: {v[:40]!r}")
    return text


def verdict(op: str, keys: Sequence[bytes], argv: Sequence[bytes]) -> Decoded | errors.EmqError:
    """The contract's answer to a direct call, in the check order of CC-6 (B-1 for a
    batch with items): the refusal, or the decoded well-formed call."""
    try:
        return _decode(op, shape(op), list(keys), list(argv))
    except errors.EmqError as refused:
        return refused


def _decode(op: str, s: Shape, keys: list[bytes], argv: list[bytes]) -> Decoded:
    width = len(s.argv)
    # 1. the number of KEYS and ARGV
    if len(keys) != s.nkeys:
        raise errors.ArgError(f"{op} takes {s.nkeys} keys, got {len(keys)}")
    if s.items:
        if not argv or len(argv) % width or len(argv) // width > LIMIT_MAX:
            raise errors.ArgError(f"{op} takes 1 to {LIMIT_MAX} items of {width}, got {len(argv)} arguments")
        rows = [argv[i : i + width] for i in range(0, len(argv), width)]
    else:
        if not (len(argv) == width or (s.clock and len(argv) == width + 1)):
            raise errors.ArgError(f"{op} takes {width}{' or one more' if s.clock else ''} arguments, got {len(argv)}")
        rows = [argv[:width]]
    # 2. the id (every item's, in item order)
    ids = [_id(row[0]) for row in rows] if s.has_id else []
    # 3. the keys
    queue = _queue_of(keys[0])
    if queue is None:
        raise errors.ArgError(f"KEYS[1] is not the pending key of an allowed queue name: {keys[0][:60]!r}")
    head = keys[0][: -len(keyspace.KINDS[0])]
    if keys[: len(keyspace.KINDS)] != [head + kind.encode() for kind in keyspace.KINDS]:
        raise errors.ArgError("KEYS[2..6] are not the keys of the queue of KEYS[1]")
    if s.row_key and keys[-1] != head + b"job:" + argv[0]:
        raise errors.ArgError("the row key is not emq:{q}:job:<ARGV[1]>")
    # 4. the other arguments, in table order (item by item)
    values = [{a["name"]: _value(a, v) for a, v in zip(s.argv[s.has_id :], row[s.has_id :])} for row in rows]
    for row_values, job in zip(values, ids):
        row_values[s.argv[0]["name"]] = job
    # 5. the trailing now; the values under the model's names
    args: dict[str, Any]
    if s.items:
        base = spec.OPS[spec.BATCHES[op]["of"]]["args"]
        args = {"jobs": [tuple(v[a["name"]] for a in base) for v in values]}
    else:
        args = _api(op, values[0])
        if len(argv) == width + 1:
            args["now"] = _value({"name": "now", "type": "time"}, argv[-1])
    return Decoded(queue, args)


def _api(op: str, wire: dict[str, Any]) -> dict[str, Any]:
    """The model's keyword arguments of a call's wire values: the same names, except
    schedule, whose API's run_at | delay_ms travel as mode ``at`` | ``in`` and a value
    (T-schedule-1)."""
    if op != "schedule":
        return dict(wire)
    out = {k: v for k, v in wire.items() if k not in ("mode", "value")}
    out["run_at" if wire["mode"] == "at" else "delay_ms"] = wire["value"]
    return out


# -- assembling calls -----------------------------------------------------------------


def _bytes(v: Any) -> bytes:
    if v is None:
        return b""
    if isinstance(v, bytes):
        return v
    return str(v).encode("utf-8")


def _keys(queue: bytes | str, row_of: bytes | None = None) -> list[bytes]:
    """The queue's KEYS (and the row key of ``row_of``), composed without the gates so
    forged names and ids can be sent."""
    head = b"emq:{" + _bytes(queue) + b"}:"
    return [head + kind.encode() for kind in keyspace.KINDS] + ([head + b"job:" + row_of] if row_of is not None else [])


@dataclass(frozen=True)
class Base:
    """A well-formed call before it is assembled: the queue, the wire values by argv
    name (``items`` for a batch with items: one tuple of wire values each) and ``now``
    (``None``: the call takes the server clock)."""

    op: str
    queue: str
    values: dict[str, Any]
    now: int | None = NOW

    def assemble(self) -> tuple[list[bytes], list[bytes]]:
        s = shape(self.op)
        if s.items:
            argv = [_bytes(v) for item in self.values["items"] for v in item]
            return _keys(self.queue), argv
        argv = [_bytes(self.values[a["name"]]) for a in s.argv]
        if s.clock and self.now is not None:
            argv.append(_bytes(self.now))
        return _keys(self.queue, argv[0] if s.row_key else None), argv

    def but(self, **changes: Any) -> "Base":
        fields = {"op": self.op, "queue": self.queue, "values": self.values, "now": self.now, **changes}
        return Base(**fields)

    def with_value(self, name: str, value: Any) -> "Base":
        return self.but(values={**self.values, name: value})


def raw(op: str, keys: Sequence[bytes], argv: Sequence[bytes], spoil: str) -> RawCall:
    """A ``RawCall`` with the code its verdict names."""
    v = verdict(op, keys, argv)
    return RawCall(op, tuple(keys), tuple(argv), spoil, v.code if isinstance(v, errors.EmqError) else None)


def _fresh(model: QueueModel, start: int = 1) -> str:
    """The lowest pool id (from ``start``) the model knows nothing of."""
    n = start
    while True:
        job = branded_id.encode(branded_id.JOB, n)
        if job not in model.rows and model.state(job) == "absent":
            return job
        n += 1


def _held(model: QueueModel, loc: str) -> tuple[str, int] | None:
    """The lowest id in ``loc`` with a row, and its attempts (the live token)."""
    for job in sorted(model.sets[loc]):
        if job in model.rows:
            return job, int(model.rows[job]["attempts"])
    return None


NEEDS = {"complete": "active", "retry": "active", "extend": "active", "complete_many": "active",
         "reprocess": "dead", "remove": "pending", "state": "pending"}
"""The location whose job makes the op's well-formed call change something."""


def base(op: str, model: QueueModel) -> Base:
    """A well-formed call of ``op`` on ``model``'s queue that changes its state when the
    location ``NEEDS`` names holds a job (the sweep sees to that), so a check that lets
    a spoiled call through shows in the keyspace as well as in the answer."""
    held = _held(model, NEEDS.get(op, "active"))
    job, token = held if held else (_fresh(model), 1)
    fresh = _fresh(model)
    values = {
        "enqueue": {"id": fresh, "payload": b"p"},
        "schedule": {"id": fresh, "payload": b"p", "mode": "in", "value": 5},
        "claim": {"lease_ms": 10},
        "complete": {"id": job, "token": token},
        "retry": {"id": job, "token": token, "delay_ms": 5, "max_attempts": 3, "error": b"e"},
        "extend": {"id": job, "token": token, "lease_ms": 10},
        "promote": {"limit": 10},
        "reap": {"limit": 10, "max_attempts": None},
        "reprocess": {"id": job},
        "remove": {"id": job},
        "state": {"id": job},
        "counts": {},
        "enqueue_many": {"items": [(fresh, b"p"), (_fresh(model, int(branded_id.parse(fresh)[1]) + 1), b"q")]},
        "claim_many": {"n": 2, "lease_ms": 10},
        "complete_many": {"items": [(job, token)]},
    }[op]
    return Base(op, model.queue, values)


# -- the kinds of spoils and edges ------------------------------------------------------

BAD_IDS = ("", "JOB", "job00000000001", "ORD00000000001", "JOB0000000000", "JOB000000000001",
           "JOB0000000000!", "JOB 0000000001", "JÖB0000000001")
SPOILED_DECIMALS: tuple[Callable[[bytes], bytes], ...] = (
    lambda v: b"0" + v, lambda v: b"+" + v, lambda v: v + b".0", lambda v: b" " + v, lambda v: v + b" ",
    lambda v: b"-0",
)
"""Non-canonical spellings of a canonical decimal (CC-2): a leading zero, a sign, a
fraction, spaces, minus zero."""


def _body(n: int) -> str:
    """The 11 Base62 digits of ``n``, past the range ``encode`` allows."""
    digits = []
    for _ in range(branded_id.BODY_LEN):
        n, r = divmod(n, 62)
        digits.append(branded_id.ALPHABET[r])
    return "".join(reversed(digits))


OVERFLOWING_IDS = (branded_id.JOB + _body(branded_id.MAX_VALUE + 1), branded_id.JOB + "z" * branded_id.BODY_LEN)
EDGE_IDS = (branded_id.encode(branded_id.JOB, 0), branded_id.encode(branded_id.JOB, branded_id.MAX_VALUE))


def _multibyte(char: str, size: int) -> str:
    """ASCII padding and one multibyte ``char`` ending exactly at ``size`` bytes."""
    return "a" * (size - len(char.encode("utf-8"))) + char


BAD_QUEUES: tuple[str, ...] = ("", "x" * (QUEUE_MAX + 1), _multibyte("é", QUEUE_MAX + 1), "a b", "a\x7fb",
                               "a{b", "a}b", "a\x00", "a\tb")
"""Queue names just past each edge of CC-1: empty, one byte over (ASCII and multibyte),
0x20, 0x7F, the braces, a control byte."""

EDGE_QUEUES: tuple[str, ...] = ("z", "q" * QUEUE_MAX, "!!", "~~", _multibyte("é", QUEUE_MAX),
                                _multibyte("€", QUEUE_MAX), _multibyte("😀", QUEUE_MAX))
"""Queue names at each edge, accepted: 1 and queue_max_bytes bytes, bytes 0x21 and 0x7E,
multibyte UTF-8 (2, 3 and 4 bytes) ending exactly at the byte limit. One name of one
byte: on a server it becomes the run's own one-byte name (specs/ownership.md OWN-2), and
the byte edges keep their byte under the run's suffix (``!!-1f3a9c02``)."""


def _integers(s: Shape) -> list[tuple[int, dict[str, Any]]]:
    """(position, table entry) of every integer argument, the trailing ``now`` included."""
    out = [(i, a) for i, a in enumerate(s.argv) if _integer(spec.TYPES[a["type"]])]
    return out + ([(len(s.argv), {"name": "now", "type": "time"})] if s.clock and not s.items else [])


def _bounds(arg: dict[str, Any]) -> tuple[int, int]:
    t = spec.TYPES[arg["type"]]
    return spec.bound(t["min"]), spec.bound(t["max"])


def _replace(seq: Sequence[bytes], i: int, v: bytes) -> list[bytes]:
    out = list(seq)
    out[i] = v
    return out


Variant = tuple[str, list[bytes], list[bytes]]


def _id_variants(b: Base, ids: Sequence[str], what: str) -> list[Variant]:
    """The call with its id (a batch's last item's) replaced; the row key follows it, so
    only the id is spoiled."""
    s = shape(b.op)
    if not s.has_id:
        return []
    out = []
    for job in ids:
        if s.items:
            items = list(b.values["items"])
            items[-1] = (job, *items[-1][1:])
            changed = b.with_value("items", items)
        else:
            changed = b.with_value(s.argv[0]["name"], job)
        out.append((f"{what} {job!r}", *changed.assemble()))
    return out


def _spoil_id(b: Base) -> list[Variant]:
    return _id_variants(b, BAD_IDS, "id")


def _spoil_overflow(b: Base) -> list[Variant]:
    return _id_variants(b, OVERFLOWING_IDS, "id past 2^63-1")


def _spoil_queue(b: Base) -> list[Variant]:
    return [(f"queue {q!r}", *b.but(queue=q).assemble()) for q in BAD_QUEUES]


def _spoil_keys_count(b: Base) -> list[Variant]:
    keys, argv = b.assemble()
    extra = _keys(b.queue, branded_id.encode(branded_id.JOB, 7).encode())[-1]
    return [("one key short", keys[:-1], argv), ("one key too many", keys + [extra], argv), ("no keys", [], argv)]


def _spoil_foreign_key(b: Base) -> list[Variant]:
    keys, argv = b.assemble()
    other = _keys(OTHER, argv[0] if shape(b.op).row_key else None)
    return [(f"KEYS[{i + 1}] of queue {OTHER}", _replace(keys, i, other[i]), argv) for i in range(len(keys))]


def _spoil_row_key(b: Base) -> list[Variant]:
    if not shape(b.op).row_key:
        return []
    keys, argv = b.assemble()
    n = branded_id.parse(argv[0].decode())[1]
    # The neighbouring id; below it when the job is the edge id 2^63-1 (an accepted edge
    # call may have made it the job the op would change).
    other = branded_id.encode(branded_id.JOB, n + 1 if n < branded_id.MAX_VALUE else n - 1).encode()
    return [("row key of another id", _replace(keys, len(keys) - 1, _keys(b.queue, other)[-1]), argv)]


def _spoil_decimal(b: Base) -> list[Variant]:
    s = shape(b.op)
    keys, argv = b.assemble()
    out = []
    for i, a in _integers(s):
        positions = range(i, len(argv), len(s.argv)) if s.items else [i]
        for pos in list(positions)[-1:]:  # a batch's last item
            if pos < len(argv) and argv[pos]:
                out += [(f"{a['name']} {f(argv[pos])!r}", keys, _replace(argv, pos, f(argv[pos])))
                        for f in SPOILED_DECIMALS]
    return out


def _spoil_range(b: Base) -> list[Variant]:
    """One past each bound of every integer argument; a mode not in its values; a text one
    byte over its limit."""
    s = shape(b.op)
    keys, argv = b.assemble()
    last = len(argv) - len(s.argv) if s.items else 0  # a batch's last item
    out = []
    for i, a in _integers(s):
        if i + last >= len(argv):
            continue
        lo, hi = _bounds(a)
        for bad in ([lo - 1] if lo > 0 else []) + [hi + 1]:
            out.append((f"{a['name']} {bad}", keys, _replace(argv, i + last, _bytes(bad))))
    for i, a in enumerate(s.argv):
        t = spec.TYPES[a["type"]]
        if "values" in t:
            out += [(f"{a['name']} {bad!r}", keys, _replace(argv, i + last, bad)) for bad in (b"IN", b"at ", b"on")]
        if "max_bytes" in t:
            over = b"x" * (spec.bound(t["max_bytes"]) + 1)
            out.append((f"{a['name']} of {len(over)} bytes", keys, _replace(argv, i + last, over)))
    return out


def _spoil_argv_count(b: Base) -> list[Variant]:
    """One argument short and one too many: below the op's argv, and past it plus the
    optional trailing ``now`` for a clock op. A batch with items: half an item either
    way, and no item at all."""
    s = shape(b.op)
    keys, argv = b.assemble()
    if s.items:
        return [("half an item short", keys, argv[:-1]), ("half an item over", keys, argv + argv[:1]),
                ("no items", keys, [])]
    plain = argv[: len(s.argv)]
    out = [("one argument short", keys, plain[:-1])] if plain else []
    long = plain + [_bytes(NOW)] * (2 if s.clock else 1)
    return out + [("one argument too many", keys, long)]


def _spoil_empty(b: Base) -> list[Variant]:
    """The empty string where an integer goes: refused unless the argument is optional
    (then it means absent, CC-2); for the trailing ``now`` it is refused (CC-6)."""
    s = shape(b.op)
    keys, argv = b.assemble()
    last = len(argv) - len(s.argv) if s.items else 0
    return [(f"{a['name']} ''", keys, _replace(argv, i + last, b"")) for i, a in _integers(s)
            if i + last < len(argv) and not a.get("optional")]


@cache
def _absent_ids(n: int) -> tuple[str, ...]:
    """``n`` ids past every id the sweep uses."""
    return tuple(branded_id.encode(branded_id.JOB, 10**9 + i) for i in range(n))


def _items(b: Base, n: int) -> list[tuple[Any, ...]]:
    """``n`` items like the base's first, with absent ids."""
    first = b.values["items"][0]
    return [(job, *first[1:]) for job in _absent_ids(n)]


FULL_OP = "complete_many"
"""The batch that takes the ``limit_max``-sized calls (see the module docstring)."""


def _spoil_batch(b: Base) -> list[Variant]:
    if b.op != FULL_OP:
        return []
    return [(f"{LIMIT_MAX + 1} items", *b.with_value("items", _items(b, LIMIT_MAX + 1)).assemble())]


def _edge_queue(b: Base) -> list[Variant]:
    return [(f"queue of {len(q.encode())} bytes {q[-1]!r}", *b.but(queue=q).assemble()) for q in EDGE_QUEUES]


def _edge_id(b: Base) -> list[Variant]:
    return _id_variants(b, EDGE_IDS, "edge id")


def _edge_range(b: Base) -> list[Variant]:
    """Each integer argument at both bounds of its type (the trailing ``now`` too)."""
    s = shape(b.op)
    out = []
    for i, a in _integers(s):
        for edge in _bounds(a):
            if a["name"] == "now":
                out.append((f"now {edge}", *b.but(now=edge).assemble()))
            elif s.items:
                items = [(*item[:i], edge, *item[i + 1 :]) for item in b.values["items"]]
                out.append((f"{a['name']} {edge}", *b.with_value("items", items).assemble()))
            else:
                out.append((f"{a['name']} {edge}", *b.with_value(a["name"], edge).assemble()))
    return out


def _edge_batch(b: Base) -> list[Variant]:
    if b.op != FULL_OP:
        return []
    return [(f"{LIMIT_MAX} items", *b.with_value("items", _items(b, LIMIT_MAX)).assemble())]


def _edge_server_clock(b: Base) -> list[Variant]:
    return [("no now: the server clock", *b.but(now=None).assemble())] if shape(b.op).clock else []


KINDS: dict[str, Callable[[Base], list[Variant]]] = {
    "id": _spoil_id,
    "id-overflow": _spoil_overflow,
    "queue": _spoil_queue,
    "keys-count": _spoil_keys_count,
    "foreign-key": _spoil_foreign_key,
    "row-key": _spoil_row_key,
    "decimal": _spoil_decimal,
    "range": _spoil_range,
    "argv-count": _spoil_argv_count,
    "empty-integer": _spoil_empty,
    "batch-size": _spoil_batch,
    "edge-queue": _edge_queue,
    "edge-id": _edge_id,
    "edge-range": _edge_range,
    "edge-batch": _edge_batch,
    "server-clock": _edge_server_clock,
}
"""Each kind of raw call: the spoils (refused) and the edges (accepted)."""

FULL = ("batch-size", "edge-batch")
"""Kinds whose calls carry ``limit_max`` items or more: the sweep's, not the draws'."""

SWEPT = ("server-clock", *FULL)
"""Kinds the machine sends only in its once-per-run sweep, never in its draws: the
``limit_max``-item batches (cost), and the server-clock calls, whose scores are the
server's wall clock, which would make a virtual-clock run's later steps depend on time."""

RULES: dict[str, str] = {
    "id": "ID-7", "id-overflow": "ID-2", "queue": "CC-1", "keys-count": "CC-1", "foreign-key": "CC-1",
    "row-key": "CC-1", "decimal": "CC-2", "range": "CC-2", "argv-count": "CC-2", "empty-integer": "CC-2",
    "batch-size": "B-1", "edge-queue": "CC-1", "edge-id": "ID-2", "edge-range": "CC-2", "edge-batch": "B-1",
    "server-clock": "CLK-1",
}
"""The contract's rule a raw call of each kind tests (a divergence cites it)."""


def calls(kind: str, op: str, model: QueueModel) -> list[RawCall]:
    """Every raw call of ``kind`` for ``op``, built on ``model``'s current state."""
    return [raw(op, keys, argv, f"{kind}: {what}") for what, keys, argv in KINDS[kind](base(op, model))]


DRAWN = tuple(k for k in KINDS if k not in SWEPT)
RAW = Draw("Raw", kind=DRAWN, op=OPS, variant=range(256))
"""One raw call as one packed choice: a kind, an op (the next one that takes the kind,
when the drawn one does not) and which of its variants (modulo how many there are)."""


@cache
def ops_of(kind: str) -> tuple[str, ...]:
    """The ops that take raw calls of ``kind`` (it depends on their shape only)."""
    return tuple(op for op in OPS if KINDS[kind](base(op, QueueModel(QUEUE))))


def drawn_op(a: Any) -> str:
    """The op a ``RAW`` draw selects: ``prepare`` it before building the call."""
    takers = ops_of(a.kind)
    start = OPS.index(a.op)
    return next(op for op in OPS[start:] + OPS[:start] if op in takers)


def drawn(a: Any, model: QueueModel) -> RawCall:
    """The raw call a ``RAW`` draw selects, on ``model``'s state."""
    found = calls(a.kind, drawn_op(a), model)
    return found[a.variant % len(found)]


def kind_of(call: RawCall) -> str:
    """The kind of a raw call (its spoil names it first)."""
    return call.spoil.split(":", 1)[0]


def step_args(call: RawCall) -> dict[str, Any]:
    """A raw call as a trace step's arguments (op ``raw``, specs/trace.md TR-2)."""
    return {"op": call.op, "keys": list(call.keys), "argv": list(call.argv), "spoil": call.spoil}


def call_of(args: dict[str, Any]) -> RawCall:
    """The raw call a trace step's arguments carry (``step_args`` read back)."""
    return raw(args["op"], [bytes(k) for k in args["keys"]], [bytes(v) for v in args["argv"]], args["spoil"])


def queue_of(call: RawCall) -> str | None:
    """The queue an accepted call changes (``None`` for a refused one)."""
    decoded = verdict(call.op, call.keys, call.argv)
    return None if isinstance(decoded, errors.EmqError) else decoded.queue


def queues_named(call: RawCall) -> list[str]:
    """The queues (names KS-3 accepts) the call's keys are under, ``emq:{q}:…``: those a
    script that wrongly accepts the call could change, refused or not."""
    named = set()
    for key in call.keys:
        tag = keyspace.hash_tag(key)
        if key.startswith(b"emq:{") and tag != key:
            try:
                named.add(keyspace.check_queue(tag.decode("utf-8")))
            except (UnicodeDecodeError, errors.ArgError):
                continue
    return sorted(named)


# -- judging ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Finding:
    """A raw call the scripts did not answer as the contract says."""

    call: RawCall
    what: str  # answer, keyspace or snapshot
    lines: tuple[str, ...]

    def __str__(self) -> str:
        lines = (line if len(line) <= 300 else line[:300] + "..." for line in self.lines)
        return f"{self.what} diverges: {self.call}\n  " + "\n  ".join(lines)


Fingerprint = dict[bytes, Any]


def _outcome(fn: Callable[[], Any]) -> Any:
    """A call's answer, its refusal, or whatever else it raised (never equal to an answer)."""
    try:
        return fn()
    except errors.EmqError as refused:
        return refused
    except Exception as exc:  # noqa: BLE001 - a broken script's error reply is a finding
        return exc


class RawJudge:
    """Sends raw calls over ``conn`` (a live target's connection: its client, and its
    ``ScriptSet``, the scripts under test) and judges them against the contract and the
    model of each queue (``models``: the caller's, such as a machine's, or its own).
    ``match`` limits the fingerprint (every key of the database by default: the sweep's
    database is its own). With ``names`` (a run on a server: ``emq_kit.check.names``)
    every call's keys go under the run's names, and the fingerprint is every key the
    run owns (specs/ownership.md OWN-2): calls and judgement speak logical names. The
    target's snapshot is read with our snapshot.lua, the observer, never with the
    scripts under test. Not for a cluster client (one SCAN)."""

    def __init__(self, conn: Connection, *, match: str | None = None,
                 models: dict[str, QueueModel] | None = None, names: Any = None) -> None:
        self.client, self.scripts, self.match, self.names = conn.redis, conn.scripts, match, names
        self.observer = Connection(conn.redis, ScriptSet())
        self.server = conn.server  # the embedded fakeredis: fingerprints read from its memory
        self.models: dict[str, QueueModel] = models if models is not None else {}
        self.clock = ServerClock.over(conn.redis)  # the server's TIME in ms (CLK-1)

    def model(self, queue: str) -> QueueModel:
        """The model of ``queue`` (a new, empty one the first time)."""
        if queue not in self.models:
            self.models[queue] = QueueModel(queue)
        return self.models[queue]

    def fingerprint(self) -> Fingerprint:
        """Every key (under ``match``) with its DUMP and PTTL, in one pipeline; on the
        embedded fakeredis, every key's content and expiry read from its memory."""
        if self.server is not None and self.match is None and self.names is None:
            return memory.fingerprint(self.server)
        keys = self._keys()
        pipe = self.client.pipeline(transaction=False)
        for key in keys:
            pipe.dump(key)
            pipe.pttl(key)
        flat = pipe.execute()
        return {key: (flat[2 * i], flat[2 * i + 1]) for i, key in enumerate(keys)}

    def reset(self) -> None:
        """Delete every key the fingerprint sees and forget every model: a fresh start
        (each Hypothesis example starts here, so a failure replays)."""
        keys = self._keys()
        for i in range(0, len(keys), 1000):
            self.client.delete(*keys[i : i + 1000])
        self.models.clear()

    def _keys(self) -> list[bytes]:
        """The keys the fingerprint sees: the run's own, or those ``match`` names."""
        if self.names is not None:
            return list(self.names.scan(self.client))
        return list(self.client.scan_iter(match=self.match, count=1000))

    def _server(self, queue: str) -> str:
        return queue if self.names is None else str(self.names.server(queue))

    def _told(self, queue: str, snap: Any) -> Any:
        return snap if self.names is None else self.names.told(queue, snap)

    def _run(self, call: RawCall) -> Any:
        keys = list(call.keys) if self.names is None else [self.names.key(k) for k in call.keys]
        return self.scripts.run(self.client, call.op, keys, list(call.argv))

    def send(self, call: RawCall) -> Finding | None:
        """Send ``call`` and judge it; the finding, or ``None`` when it did what the
        contract says."""
        before = self.fingerprint()
        decoded = verdict(call.op, call.keys, call.argv)
        if isinstance(decoded, errors.EmqError):
            got = _outcome(lambda: self._run(call))
            if not (isinstance(got, errors.EmqError) and got.code == decoded.code):
                return Finding(call, "answer", (f"the contract refuses with {decoded.code} ({decoded.detail})",
                                                f"the script answered {got!r}"))
            return self._unchanged(call, before, self.fingerprint())
        return self._accepted(call, decoded, before)

    def _accepted(self, call: RawCall, decoded: Decoded, before: Fingerprint) -> Finding | None:
        model = self.model(decoded.queue)
        queue = Queue(self.observer, self._server(decoded.queue))
        parse = _parser(queue, call.op)

        def observed() -> Any:
            return self._told(decoded.queue, queue.snapshot())

        def run_model(m: QueueModel, args: dict[str, Any]) -> Any:
            return _outcome(lambda: getattr(m, call.op)(**args))

        def run_target(_args: dict[str, Any], meanwhile: Any = None) -> Any:
            return _outcome(lambda: parse(self._run(call)))

        if shape(call.op).clock and "now" not in decoded.args:
            mine, theirs = self.clock.call(call.op, model, decoded.args, run_model, run_target, observed)
            lo, hi, now = self.clock.window or (0, 0, 0)
            where = f" (server clock: TIME window [{lo}, {hi}], the model at {now})"
        else:
            mine, theirs, where = run_model(model, decoded.args), run_target(decoded.args), ""
        if not _same(mine, theirs):
            return Finding(call, "answer", (f"the model answered {mine!r}{where}", f"the script answered {theirs!r}"))
        if call.op in ("claim", "claim_many") and model.last_dropped != queue.last_dropped:
            return Finding(call, "answer", (f"the model dropped {model.last_dropped}",
                                            f"the script dropped {queue.last_dropped}"))
        expected, seen = model.snapshot(), _outcome(observed)
        if expected != seen:
            lines = diff(expected, seen) if not isinstance(seen, Exception) else [f"the snapshot failed: {seen!r}"]
            return Finding(call, "snapshot", (*lines, where) if where else tuple(lines))
        head = keyspace.prefix(self._server(decoded.queue)).encode()
        return self._unchanged(call, {k: v for k, v in before.items() if not k.startswith(head)},
                               {k: v for k, v in self.fingerprint().items() if not k.startswith(head)})

    @staticmethod
    def _unchanged(call: RawCall, before: Fingerprint, after: Fingerprint) -> Finding | None:
        changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
        if not changed:
            return None
        return Finding(call, "keyspace", tuple(f"{k!r} changed" for k in changed[:10]))


def _parser(queue: Queue, op: str) -> Callable[[Any], Any]:
    """How the client reads ``op``'s reply into the model's answer."""
    return {
        "claim": queue._claim_answer,
        "claim_many": queue._claim_many_answer,
        "enqueue_many": queue._items_answer,
        "complete_many": queue._items_answer,
        "promote": int,
        "reap": int,
        "counts": lambda reply: {loc: int(n) for loc, n in zip(spec.LOCATIONS, reply)},
    }.get(op, queue._text_answer)


# -- the sweep -------------------------------------------------------------------------


def prepare(judge: RawJudge, op: str, queue: str = QUEUE,
            send: Callable[[RawCall], Finding | None] | None = None) -> list[Finding]:
    """Well-formed calls that put a job in the location ``op`` ``NEEDS`` (judged too, by
    ``send``: the judge's own by default): an enqueue, then a claim for active, then a
    retry with ``max_attempts`` 1 for dead."""
    need, model = NEEDS.get(op), judge.model(queue)
    if need is None or _held(model, need) is not None:
        return []
    steps = ["enqueue", "claim", "retry"][: {"pending": 1, "active": 2, "dead": 3}[need]]
    found = []
    for step in steps:
        b = base(step, model)
        if step == "retry":
            b = b.with_value("max_attempts", 1)
        keys, argv = b.assemble()
        finding = (send or judge.send)(raw(step, keys, argv, "prepare"))
        if finding:
            found.append(finding)
    return found


def sweep(judge: RawJudge, *, full: bool = True, kinds: Sequence[str] | None = None,
          send: Callable[[RawCall], Finding | None] | None = None) -> Iterator[tuple[RawCall, Finding | None]]:
    """Every raw call of every kind for every op, once, in a fixed order, on the queue
    ``QUEUE``: each call with its finding (``None``: as the contract says), judged by
    ``send`` (the judge's own by default). Without ``full`` the ``limit_max``-item
    batches are left out."""
    send = send or judge.send
    for kind in kinds or KINDS:
        if kind in FULL and not full:
            continue
        for op in OPS:
            for finding in prepare(judge, op, send=send):
                yield finding.call, finding
            for call in calls(kind, op, judge.model(QUEUE)):
                yield call, send(call)


# -- one-check edits the sweep must find -------------------------------------------------


@dataclass(frozen=True)
class CheckEdit:
    """One check of lib.lua or batch.lua edited: ``before``, a text found in exactly one
    line of code of the script, becomes ``after``. ``why`` says what a raw call then sees.
    ``emq_kit.selftest.check_mutants`` turns each into a mutant."""

    name: str
    script: str
    before: str
    after: str
    why: str


def _check_edits() -> tuple[CheckEdit, ...]:
    data = json.loads(resources.files("emq_kit.check").joinpath("check_edits.json").read_text("utf-8"))
    return tuple(CheckEdit(**e) for e in data["edits"])


CHECK_EDITS: tuple[CheckEdit, ...] = _check_edits()
"""The one-check edits of lib.lua and batch.lua (``emq_kit/check/check_edits.json``)."""

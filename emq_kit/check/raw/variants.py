"""The raw calls of each kind: one thing spoiled at a time (refused) or one edge taken
(accepted), assembled from the contract onto a well-formed call that would change the
model's current state.

``calls(kind, op, model)`` builds the ``RawCall`` values of one kind for one op;
``KINDS`` names them all, so a sweep enumerates every kind x op x variant and a
Hypothesis rule draws one with ``RAW`` (a packed ``Draw``): ``drawn_op(a)`` is its op,
``drawn(a, model)`` builds the call.

Batches at the item limit stay cheap: the two calls of ``limit_max`` and ``limit_max + 1``
items go only to ``complete_many``, with absent ids (one ``EXISTS`` per item, nothing
written, so no key weighs on later fingerprints), and only in the sweep (``FULL``), never
in the draws. The item count is checked by one code path for both batches with items
(batch.lua's ``emq.begin_items``); ``enqueue_many`` gets every other spoil and edge.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any, Callable, Sequence

from emq_kit.check.draws import Draw
from emq_kit.check.raw.contract import LIMIT_MAX, NOW, OPS, OTHER, QUEUE, QUEUE_MAX, RawCall, Shape, _integer, raw, shape
from emq_model import branded_id, keyspace, spec
from emq_model.model import QueueModel

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
    values: dict[str, dict[str, Any]] = {
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
    }
    return Base(op, model.queue, values[op])


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

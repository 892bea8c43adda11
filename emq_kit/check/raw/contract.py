"""A raw call (the scripts called past the client, as a port may call them) and the
contract's verdict on it.

The Python client refuses a bad id, queue name or number before any script runs, so the
scripts' own checks (lib.lua, batch.lua: CC-1, CC-2, CC-6, B-1) are only reached by
calling the scripts directly: ``EVALSHA`` with KEYS and ARGV. ``verdict(op, keys, argv)``
is the contract's oracle of such a call (``specs/transitions.json``: each op's ``argv``,
``row_key``, ``clock``, the types' bounds and the limits): the refusal CC-6 names for it
(counts, then the id, the keys, the other arguments, the trailing ``now``) or, for a
well-formed call, the queue and the model's keyword arguments it carries. ``raw`` makes a
``RawCall`` with the code its verdict names; ``step_args`` and ``call_of`` write it as a
trace step's arguments and read it back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from emq_model import branded_id, errors, keyspace, spec
from emq_model.snapshot import canonical_int

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


def raw(op: str, keys: Sequence[bytes], argv: Sequence[bytes], spoil: str) -> RawCall:
    """A ``RawCall`` with the code its verdict names."""
    v = verdict(op, keys, argv)
    return RawCall(op, tuple(keys), tuple(argv), spoil, v.code if isinstance(v, errors.EmqError) else None)



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

"""The driver protocol (specs/driver-protocol.md): how the kit talks to a port's driver
over JSON lines, and the two reference drivers behind ``emq driver``.

Both ends share this module's codec: ``encode``/``decode`` carry bytes as
``{"b64": "..."}``; ``encode_answer``/``decode_answer`` give each op's result its wire
shape. ``Driver`` is the driver loop (one request in, one reply out): ``emq driver
--model`` serves a ``ModelTarget`` (the oracle, serverless), ``emq driver --live`` the
Python client (``emq_live.connect``) on the server the kit names in ``init``. Both speak
protocol version 2 when the kit offers it (the ops list, ``fence``, ``batch``) and
version 1 to an older kit.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any, Sequence, TypeGuard

from emq_kit.errors import ProtocolError, inert
from emq_model import spec
from emq_model.lanes import LaneClaimed
from emq_model.model import Claimed
from emq_model.snapshot import LANE_HASHES, Snapshot

PROTOCOL = 2
"""The newest protocol version this module speaks (the kit offers it at ``init``)."""

PROTOCOLS = (1, 2)
"""Every version the kit and the reference drivers speak: a driver answers the highest
it shares with the kit's offer, so a v1 driver keeps working (DP-9)."""

CONTROL_OPS = ("init", "reset", "queue", "shutdown")
"""Ops about the session rather than a queue."""

QUEUE_OPS: tuple[str, ...] = tuple(spec.OPS)
"""The contract's ops (specs/transitions.json)."""

SERVERLESS_OPS = ("snapshot", "forget_row")
"""Ops only a driver without a server offers: with a server the kit reads the keyspace
and deletes rows itself."""

KEY_FAULT_OPS = ("spoil_key", "mend_key", "stray_key", "drop_key")
"""Ops a serverless driver may offer (any version) so the kit can spoil a key's type and
put it back (CC-8), and write a key outside the grammar and delete it (DP-9e); with a
server the kit does it itself. Without the first two the driver's ``EMQTYPE`` cells are
not implemented; without the last two its snapshot is never shown a stray key."""

REQUIRED_OPS = CONTROL_OPS + QUEUE_OPS
"""What a version-1 driver must offer: every op."""

LANE_OPS: tuple[str, ...] = tuple(spec.LANE_OPS)
"""The lane ops (lifecycle.md §10): optional in every version. The machine sends them to
a driver whose ``init`` lists them; a driver lacking them is a partial port whose lane
cells are not implemented."""

CORE_OPS = ("init", "reset", "shutdown", "enqueue", "claim", "complete")
"""What the machine cannot do without (DP-9b): a session, and a job that can enter,
become active and leave. A serverless driver adds ``snapshot``."""

BATCH = "batch"
"""The version-2 request that carries k calls and gets k replies (DP-20)."""

BATCH_MAX = 256
"""Calls per batch when the driver names no ``batch_max`` at ``init``."""

PROTO = "EPROTO"
"""Error code: the request breaks the protocol (not JSON, unknown op, bad framing)."""
DRIVER = "EDRIVER"
"""Error code: the driver or its client failed (an exception, a lost server)."""


# -- values ---------------------------------------------------------------------------


SAID_MAX = 2_000
"""The most characters of a driver's own words (an error's message, its stderr, its name)
the kit shows or keeps of one."""

def said(text: object, limit: int = SAID_MAX) -> str:
    """A driver's own words as the kit shows and keeps them (DP-16): ``inert`` (what a
    terminal acts on and a lone surrogate, valid JSON but not UTF-8, written as escapes),
    and no more than ``limit`` characters of it."""
    text = inert(text)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text) - limit:,} more characters)"



def bytes_json(value: bytes | bytearray | memoryview) -> dict[str, str]:
    """Bytes in JSON, the one way the kit writes them (the driver protocol and traces):
    ``{"b64": "<base64>"}``."""
    return {"b64": base64.b64encode(bytes(value)).decode("ascii")}


def is_bytes_json(value: Any) -> bool:
    """Whether ``value`` is what ``bytes_json`` writes."""
    return isinstance(value, dict) and value.keys() == {"b64"} and isinstance(value["b64"], str)


def json_bytes(value: dict[str, str]) -> bytes:
    """The inverse of ``bytes_json`` (``ProtocolError`` if it is not base64)."""
    try:
        return base64.b64decode(value["b64"], validate=True)
    except binascii.Error as exc:
        raise ProtocolError(f"bad base64 {value['b64']!r}: {exc}") from None


def encode(value: Any) -> Any:
    """A Python value as JSON: bytes become ``{"b64": ...}``, tuples lists; str, int,
    float, bool and None stay as they are."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes_json(value)
    if isinstance(value, (list, tuple)):
        return [encode(v) for v in value]
    if isinstance(value, dict):
        return {k: encode(v) for k, v in value.items()}
    return value


def decode(value: Any) -> Any:
    """The inverse of ``encode``: ``{"b64": ...}`` becomes bytes (``ProtocolError`` if
    it is not base64)."""
    if isinstance(value, dict):
        if is_bytes_json(value):
            return json_bytes(value)
        return {k: decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decode(v) for v in value]
    return value


# -- answers ----------------------------------------------------------------------------


def encode_answer(op: str, answer: Any, dropped: tuple[str, ...] = ()) -> Any:
    """An op's answer in its wire shape (claim carries the dropped orphans)."""
    if op in ("claim", "lane_claim"):
        return {"job": None if answer is None else _job_json(answer), "dropped": list(dropped)}
    if op == "lane_wclaim":
        return {"jobs": [_job_json(job) for job in answer], "dropped": list(dropped)}
    if op == "snapshot":
        return encode({**answer.to_json(), "rows": {i: dict(r) for i, r in answer.rows}})
    return encode(answer)


def _job_json(job: Claimed | LaneClaimed) -> dict[str, Any]:
    """A claimed job on the wire; a lane claim's carries its ``group``."""
    out = {"id": job.id, "payload": encode(job.payload), "token": job.token}
    return {**out, "group": job.group} if isinstance(job, LaneClaimed) else out


def _job(op: str, job: Any, ok: Any) -> Claimed | LaneClaimed:
    """A claimed job from the wire (``claim``'s, or a lane claim's with its group)."""
    lane = op != "claim"
    keys = {"id", "payload", "token"} | ({"group"} if lane else set())
    _shape(isinstance(job, dict) and job.keys() == keys and isinstance(job["id"], str)
           and isinstance(job["payload"], bytes) and is_int(job["token"])
           and (not lane or isinstance(job["group"], str)),
           op, '{"id": str, "payload": {"b64": ...}, "token": int' + (', "group": str}' if lane else "}"), ok)
    if lane:
        return LaneClaimed(job["id"], job["payload"], job["token"], job["group"])
    return Claimed(job["id"], job["payload"], job["token"])


def _dropped(op: str, value: Any, key: str, ok: Any) -> tuple[str, ...]:
    """A claim's ``dropped`` orphans (DP-12), the reply's shape checked."""
    _shape(isinstance(value, dict) and value.keys() == {key, "dropped"}
           and isinstance(value["dropped"], list) and all(isinstance(d, str) for d in value["dropped"]),
           op, f'{{"{key}": ..., "dropped": [id, ...]}}', ok)
    return tuple(value["dropped"])


def is_int(v: Any) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool)


def _shape(ok: bool, op: str, want: str, got: Any) -> None:
    if not ok:
        raise ProtocolError(f"{op} answered {json.dumps(got)[:200]}, expected {want}")


def decode_answer(op: str, ok: Any) -> tuple[Any, tuple[str, ...]]:
    """A reply's ``ok`` as the model's answer, plus the orphans a claim dropped;
    ``ProtocolError`` for a value of the wrong shape."""
    value = decode(ok)
    kind = spec.OPS[op]["answers"][0] if op in spec.OPS else op
    if op in ("claim", "lane_claim"):
        dropped = _dropped(op, value, "job", ok)
        return (None if value["job"] is None else _job(op, value["job"], ok["job"])), dropped
    if op == "lane_wclaim":
        dropped = _dropped(op, value, "jobs", ok)
        _shape(isinstance(value["jobs"], list), op, '{"jobs": [job, ...], "dropped": [id, ...]}', ok)
        return [_job(op, job, ok) for job in value["jobs"]], dropped
    if kind == "count":
        _shape(is_int(value), op, "an integer", ok)
    elif kind == "ids":
        _shape(isinstance(value, list) and all(isinstance(v, str) for v in value), op, "a list of ids", ok)
    elif kind == "counts":
        _shape(isinstance(value, dict) and all(is_int(v) for v in value.values()), op,
               '{"pending": int, ...}', ok)
    elif kind == "row":
        _shape(value is None or (isinstance(value, dict) and all(isinstance(v, bytes) for v in value.values())),
               op, 'null or {field: {"b64": ...}}', ok)
    elif op == "snapshot":
        try:
            return Snapshot.build(value["queue"], {loc: [tuple(e) for e in value[loc]] for loc in spec.LOCATIONS},
                                  value["rows"], value["completed"], value["failed"], value["stray"],
                                  {g: [tuple(e) for e in lane] for g, lane in value.get("lanes", {}).items()},
                                  value.get("ring", ()), value.get("paused", ()),
                                  {name: value.get(name, {}) for name in LANE_HASHES}), ()
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ProtocolError(f"snapshot answered a malformed keyspace: {exc!r}") from None
    elif op in spec.OPS or op in spec.LANE_OPS:
        _shape(isinstance(value, str), op, "a string", ok)
    return value, ()


# -- absent arguments (DP-9c) ----------------------------------------------------------


OPTIONAL_ARGS: dict[str, tuple[str, ...]] = {
    op: tuple(a["name"] for a in d["args"] if a.get("optional") or "default" in a)
    for op, d in {**spec.OPS, **spec.LANE_OPS}.items()
}
"""Per op, the arguments a version-2 driver may declare absent (``absent_args``): those
the table marks optional or gives a default (DP-9c)."""


def check_absent_args(absent: Any, ops: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """An ``absent_args`` declaration, checked: only optional arguments of offered ops,
    and schedule keeps one of ``run_at`` and ``delay_ms``; ``ProtocolError`` otherwise."""
    if absent is None:
        return {}
    if not isinstance(absent, dict):
        raise ProtocolError(f"absent_args is {{op: [arg, ...]}}, got {json.dumps(absent)[:160]}")
    out: dict[str, tuple[str, ...]] = {}
    for op, names in absent.items():
        if op not in ops or not isinstance(names, list) or not all(n in OPTIONAL_ARGS.get(op, ()) for n in names):
            raise ProtocolError(f"absent_args {op}: {json.dumps(names)[:80]}: only optional arguments "
                                f"({', '.join(OPTIONAL_ARGS.get(op, ())) or 'none'}) of an offered op may be absent")
        if op == "schedule" and {"run_at", "delay_ms"} <= set(names):
            raise ProtocolError("absent_args schedule: a schedule needs run_at or delay_ms")
        out[op] = tuple(names)
    return out

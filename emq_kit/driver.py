"""The driver protocol (specs/driver-protocol.md): how the kit talks to a port's driver
over JSON lines, and the two reference drivers behind ``emq driver``.

Both ends share this module's codec: ``encode``/``decode`` carry bytes as
``{"b64": "..."}``; ``encode_answer``/``decode_answer`` give each op's result its wire
shape. ``Driver`` is the driver loop (one request in, one reply out): ``emq driver
--model`` serves a ``ModelTarget`` (the oracle, serverless), ``emq driver --live`` the
Python client (``emq_live.connect``) on the server the kit names in ``init``. Both speak
protocol version 2 when the kit offers it (the ops list, ``fence``, ``batch``) and
version 1 to an older kit; ``Driver``'s ``ops``/``absent_args``/``protocol`` narrow them.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import json
import sys
from typing import IO, Any, Callable, Sequence

from emq_model import errors, spec
from emq_model.model import Claimed
from emq_model.snapshot import Snapshot

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

REQUIRED_OPS = CONTROL_OPS + QUEUE_OPS
"""What a version-1 driver must offer: every op."""

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


class ProtocolError(Exception):
    """A message that breaks the protocol."""


# -- values ---------------------------------------------------------------------------


def encode(value: Any) -> Any:
    """A Python value as JSON: bytes become ``{"b64": ...}``, tuples lists; str, int,
    float, bool and None stay as they are."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"b64": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, (list, tuple)):
        return [encode(v) for v in value]
    if isinstance(value, dict):
        return {k: encode(v) for k, v in value.items()}
    return value


def decode(value: Any) -> Any:
    """The inverse of ``encode``: ``{"b64": ...}`` becomes bytes (``ProtocolError`` if
    it is not base64)."""
    if isinstance(value, dict):
        if value.keys() == {"b64"} and isinstance(value["b64"], str):
            try:
                return base64.b64decode(value["b64"], validate=True)
            except binascii.Error as exc:
                raise ProtocolError(f"bad base64 {value['b64']!r}: {exc}") from None
        return {k: decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decode(v) for v in value]
    return value


# -- answers ----------------------------------------------------------------------------


def encode_answer(op: str, answer: Any, dropped: tuple[str, ...] = ()) -> Any:
    """An op's answer in its wire shape (claim carries the dropped orphans)."""
    if op == "claim":
        job = None if answer is None else {"id": answer.id, "payload": encode(answer.payload), "token": answer.token}
        return {"job": job, "dropped": list(dropped)}
    if op == "snapshot":
        return encode({**answer.to_json(), "rows": {i: dict(r) for i, r in answer.rows}})
    return encode(answer)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _shape(ok: bool, op: str, want: str, got: Any) -> None:
    if not ok:
        raise ProtocolError(f"{op} answered {json.dumps(got)[:200]}, expected {want}")


def decode_answer(op: str, ok: Any) -> tuple[Any, tuple[str, ...]]:
    """A reply's ``ok`` as the model's answer, plus the orphans a claim dropped;
    ``ProtocolError`` for a value of the wrong shape."""
    value = decode(ok)
    kind = spec.OPS[op]["answers"][0] if op in spec.OPS else op
    if op == "claim":
        _shape(isinstance(value, dict) and value.keys() == {"job", "dropped"}
               and isinstance(value["dropped"], list) and all(isinstance(d, str) for d in value["dropped"]),
               op, '{"job": ..., "dropped": [id, ...]}', ok)
        job = value["job"]
        if job is None:
            return None, tuple(value["dropped"])
        _shape(isinstance(job, dict) and job.keys() == {"id", "payload", "token"} and isinstance(job["id"], str)
               and isinstance(job["payload"], bytes) and _is_int(job["token"]),
               op, '{"id": str, "payload": {"b64": ...}, "token": int}', ok["job"])
        return Claimed(job["id"], job["payload"], job["token"]), tuple(value["dropped"])
    if kind == "count":
        _shape(_is_int(value), op, "an integer", ok)
    elif kind == "ids":
        _shape(isinstance(value, list) and all(isinstance(v, str) for v in value), op, "a list of ids", ok)
    elif kind == "counts":
        _shape(isinstance(value, dict) and all(_is_int(v) for v in value.values()), op,
               '{"pending": int, ...}', ok)
    elif kind == "row":
        _shape(value is None or (isinstance(value, dict) and all(isinstance(v, bytes) for v in value.values())),
               op, 'null or {field: {"b64": ...}}', ok)
    elif op == "snapshot":
        try:
            return Snapshot.build(value["queue"], {loc: [tuple(e) for e in value[loc]] for loc in spec.LOCATIONS},
                                  value["rows"], value["completed"], value["failed"], value["stray"]), ()
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ProtocolError(f"snapshot answered a malformed keyspace: {exc!r}") from None
    elif op in spec.OPS:
        _shape(isinstance(value, str), op, "a string", ok)
    return value, ()


# -- the driver loop --------------------------------------------------------------------


OPTIONAL_ARGS: dict[str, tuple[str, ...]] = {
    op: tuple(a["name"] for a in d["args"] if a.get("optional") or "default" in a) for op, d in spec.OPS.items()
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


class Driver:
    """Serves requests on a backend made by ``open_backend(url)`` at ``init``: an object
    with ``queue(name)`` (the model's methods) and ``close()``; ``reset()`` if it keeps
    state between examples, ``fence()`` (the ``{emq}:version`` value it found or wrote)
    if it fences. A ``serverless`` backend (the model) is a ``Target``: it also answers
    ``snapshot`` and ``forget_row``.

    ``ops`` narrows what the driver offers (a partial port), ``absent_args`` declares
    arguments its API lacks, ``protocol`` caps the version it speaks (1: an old driver)."""

    def __init__(self, name: str, open_backend: Callable[[str | None], Any], *, serverless: bool,
                 ops: Sequence[str] | None = None, absent_args: dict[str, list[str]] | None = None,
                 protocol: int = PROTOCOL) -> None:
        self.name, self.open_backend, self.serverless = name, open_backend, serverless
        every = REQUIRED_OPS + (SERVERLESS_OPS if serverless else ())
        self.offered = [op for op in every if ops is None or op in ops]
        self.absent_args = absent_args or {}
        self.max_protocol = protocol
        self.protocol = 1
        self.queues: tuple[str, ...] = ()
        self.backend: Any = None
        self.done = False

    def ops(self) -> list[str]:
        """The ops named in the ``init`` answer (``batch`` from version 2)."""
        return self.offered + ([BATCH] if self.protocol >= 2 else [])

    def _init(self, args: dict[str, Any]) -> dict[str, Any]:
        url, offer = args.get("url"), args.get("protocol")
        if not _is_int(offer) or offer < 1:
            raise ProtocolError(f"init offers protocol {offer!r}; a version is a positive integer")
        if self.serverless and url is not None:
            raise ProtocolError(f"{self.name} has no server: run the check without --url")
        if not self.serverless and url is None:
            raise ProtocolError(f"{self.name} needs a server: run the check with --url")
        if args.get("clock") == "server" and self.serverless:
            raise ProtocolError(f"{self.name} has no server clock: use --clock virtual")
        self.protocol = min(offer, self.max_protocol)
        self.backend = self.open_backend(url)
        self.queues = tuple(args.get("queues", []))
        for name in self.queues:
            self.backend.queue(name)
        info: dict[str, Any] = {"name": self.name, "version": spec.SPEC_VERSION, "protocol": self.protocol,
                                "ops": self.ops()}
        if self.protocol >= 2:
            info["fence"] = self.backend.fence() if hasattr(self.backend, "fence") else None
            info["batch_max"] = BATCH_MAX
            if self.absent_args:
                info["absent_args"] = self.absent_args
        return info

    def handle(self, request: dict[str, Any]) -> Any:
        """The ``ok`` value of one request; raises ``EmqError`` for a refusal and
        ``ProtocolError`` for a request it cannot serve."""
        op, args = request.get("op"), decode(request.get("args") or {})
        if op == "init":
            return self._init(args)
        if op == "shutdown":
            self.done = True
            return None
        if self.backend is None:
            raise ProtocolError(f"{op!r} before init")
        if op not in self.ops():
            raise ProtocolError(f"unknown op {op!r}" + (" (not offered at init)" if op in spec.OPS else ""))
        if op == "reset":
            if hasattr(self.backend, "reset"):
                self.backend.reset()
            return None
        if op == "queue":
            self.backend.queue(args.get("name"))
            return None
        if op == BATCH:
            return self._batch(request.get("args") or {})
        if op == "snapshot":
            return encode_answer(op, self.backend.snapshot(request.get("queue")))
        if op == "forget_row":
            self.backend.forget_row(request.get("queue"), args.get("id"))
            return None
        queue = self.backend.queue(request.get("queue"))
        answer = getattr(queue, op)(**args)
        return encode_answer(op, answer, getattr(queue, "last_dropped", ()) if op == "claim" else ())

    def _batch(self, args: dict[str, Any]) -> list[dict[str, Any]]:
        """DP-20: each call answered in order, as if sent alone; with ``snapshot`` each
        reply on a run queue carries that queue's keyspace read right after the call."""
        calls, snapshots = args.get("calls"), args.get("snapshot", False)
        if not isinstance(calls, list) or not 1 <= len(calls) <= BATCH_MAX or not isinstance(snapshots, bool):
            raise ProtocolError(f"a batch is {{\"calls\": [1..{BATCH_MAX} calls], \"snapshot\": bool}}")
        replies = []
        for call in calls:
            if not isinstance(call, dict) or call.get("op") in (BATCH, "init", "reset", "shutdown"):
                raise ProtocolError(f"a batch holds queue ops, queue and forget_row, not {json.dumps(call)[:80]}")
            reply = self.answer(call)
            if snapshots and call.get("queue") in self.queues:
                reply["snapshot"] = encode_answer("snapshot", self.backend.queue(call["queue"]).snapshot())
            replies.append(reply)
        return replies

    def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        """``{"ok": ...}`` or ``{"error": {"code", "message"}}`` for one request."""
        try:
            return {"ok": self.handle(request)}
        except errors.EmqError as exc:
            return {"error": {"code": exc.code, "message": exc.detail}}
        except ProtocolError as exc:
            return {"error": {"code": PROTO, "message": str(exc)}}
        except Exception as exc:  # noqa: BLE001 - the kit judges it, the loop goes on
            return {"error": {"code": DRIVER, "message": f"{type(exc).__name__}: {exc}"}}

    def reply(self, line: str) -> dict[str, Any]:
        """The reply to one request line."""
        try:
            request = json.loads(line)
            if not isinstance(request, dict) or "id" not in request:
                raise ProtocolError("a request is an object with an id")
        except (ValueError, ProtocolError) as exc:
            return {"id": None, "error": {"code": PROTO, "message": str(exc)}}
        return {"id": request["id"], **self.answer(request)}

    def serve(self, stdin: IO[str], stdout: IO[str]) -> None:
        """Answer requests until ``shutdown`` or the end of input."""
        try:
            for line in stdin:
                stdout.write(json.dumps(self.reply(line)) + "\n")
                stdout.flush()
                if self.done:
                    break
        finally:
            if self.backend is not None:
                self.backend.close()


# -- emq driver -------------------------------------------------------------------------


def cmd_driver(args: argparse.Namespace) -> int:
    from emq_live.client import connect

    from .targets import ModelTarget

    if args.model:
        driver = Driver("emq-model", lambda url: ModelTarget(), serverless=True)
    else:
        driver = Driver("emq-python", lambda url: connect(args.url or url, scripts=args.scripts), serverless=False)
    driver.serve(sys.stdin, sys.stdout)
    return 0


def register(sub: Any) -> None:
    """Add ``emq driver`` to the command line."""
    d = sub.add_parser("driver", help="a reference driver: speak the driver protocol on stdin/stdout")
    which = d.add_mutually_exclusive_group(required=True)
    which.add_argument("--model", action="store_true", help="the model (serverless)")
    which.add_argument("--live", action="store_true", help="the Python client, on the server init names")
    which.add_argument("--url", help="the Python client, on URL instead of the server init names")
    d.add_argument("--scripts", metavar="DIR", help="with --live/--url: a script directory")
    d.set_defaults(func=cmd_driver)

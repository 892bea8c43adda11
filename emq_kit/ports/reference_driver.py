"""The two reference drivers behind ``emq driver`` (specs/driver-protocol.md): the driver
loop, one request in, one reply out. ``emq driver --model`` serves a ``ModelTarget`` (the
oracle, serverless), ``emq driver --live`` the Python client (``emq_live.connect``) on the
server the kit names in ``init``."""

from __future__ import annotations

import json
from typing import IO, Any, Callable, Sequence

from emq_kit.ports.protocol import (
    BATCH,
    BATCH_MAX,
    DRIVER,
    KEY_FAULT_OPS,
    LANE_OPS,
    PROTO,
    PROTOCOL,
    REQUIRED_OPS,
    SERVERLESS_OPS,
    ProtocolError,
    decode,
    encode_answer,
    is_int,
)
from emq_model import errors, spec


class Driver:
    """Serves requests on a backend made by ``open_backend(url)`` at ``init``: an object
    with ``queue(name)`` (the model's methods) and ``close()``; ``reset()`` if it keeps
    state between examples, ``fence()`` (the ``{emq}:version`` value it found or wrote)
    if it fences. A ``serverless`` backend (the model) is a ``Target``: it also answers
    ``snapshot`` and ``forget_row``, and with ``faults`` the key faults (``spoil_key``,
    ``mend_key``: the backend has them).

    It offers every op of the contract and the lane ops (lifecycle.md §10); ``ops``
    narrows what it offers (a partial port), ``absent_args`` declares
    arguments its API lacks, ``protocol`` caps the version it speaks (1: an old driver)."""

    def __init__(self, name: str, open_backend: Callable[[str | None], Any], *, serverless: bool,
                 ops: Sequence[str] | None = None, absent_args: dict[str, list[str]] | None = None,
                 protocol: int = PROTOCOL, faults: bool = False) -> None:
        self.name, self.open_backend, self.serverless = name, open_backend, serverless
        every = REQUIRED_OPS + LANE_OPS + (SERVERLESS_OPS + (KEY_FAULT_OPS if faults else ()) if serverless else ())
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
        if not is_int(offer) or offer < 1:
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
            known = op in spec.OPS or op in spec.LANE_OPS
            raise ProtocolError(f"unknown op {op!r}" + (" (not offered at init)" if known else ""))
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
        if op in KEY_FAULT_OPS:
            getattr(self.backend, op)(request.get("queue"), **args)
            return None
        queue = self.backend.queue(request.get("queue"))
        answer = getattr(queue, op)(**args)
        claims = ("claim", "lane_claim", "lane_wclaim")
        return encode_answer(op, answer, getattr(queue, "last_dropped", ()) if op in claims else ())

    def _batch(self, args: dict[str, Any]) -> list[dict[str, Any]]:
        """DP-20: each call answered in order, as if sent alone; with ``snapshot`` each
        reply on a run queue carries that queue's keyspace read right after the call."""
        calls, snapshots = args.get("calls"), args.get("snapshot", False)
        if not isinstance(calls, list) or not 1 <= len(calls) <= BATCH_MAX or not isinstance(snapshots, bool):
            raise ProtocolError(f"a batch is {{\"calls\": [1..{BATCH_MAX} calls], \"snapshot\": bool}}")
        bad = next((c for c in calls if not isinstance(c, dict) or c.get("op") in (BATCH, "init", "reset", "shutdown")),
                   None)
        if bad is not None:  # DP-21: refused whole before any call runs
            raise ProtocolError(f"a batch holds queue ops, queue and forget_row, not {json.dumps(bad)[:80]}")
        replies = []
        for call in calls:
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

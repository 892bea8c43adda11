"""The two reference drivers behind ``emq driver`` (specs/driver-protocol.md): the driver
loop, one request in, one reply out. ``emq driver --model`` serves a ``ModelTarget`` (the
oracle, serverless), ``emq driver --live`` the Python client (``emq_live.connect``) on the
server the kit names in ``init``."""

from __future__ import annotations

import json
from typing import IO, Any, Callable

from emq_kit.ports.protocol import (
    DRIVER,
    PROTO,
    PROTOCOL,
    QUEUE_OPS,
    REQUIRED_OPS,
    SERVERLESS_OPS,
    ProtocolError,
    decode,
    encode_answer,
)
from emq_model import errors, spec


class Driver:
    """Serves requests on a backend made by ``open_backend(url)`` at ``init``: an object
    with ``queue(name)`` (the model's methods) and ``close()``; ``reset()`` if it keeps
    state between examples. A ``serverless`` backend (the model) is a ``Target``: it also
    answers ``snapshot`` and ``forget_row``."""

    def __init__(self, name: str, open_backend: Callable[[str | None], Any], *, serverless: bool) -> None:
        self.name, self.open_backend, self.serverless = name, open_backend, serverless
        self.backend: Any = None
        self.done = False

    def ops(self) -> list[str]:
        return list(REQUIRED_OPS + (SERVERLESS_OPS if self.serverless else ()))

    def handle(self, request: dict[str, Any]) -> Any:
        """The ``ok`` value of one request; raises ``EmqError`` for a refusal and
        ``ProtocolError`` for a request it cannot serve."""
        op, args = request.get("op"), decode(request.get("args") or {})
        if op == "init":
            url = args.get("url")
            if self.serverless and url is not None:
                raise ProtocolError(f"{self.name} has no server: run the check without --url")
            if not self.serverless and url is None:
                raise ProtocolError(f"{self.name} needs a server: run the check with --url")
            if args.get("clock") == "server" and self.serverless:
                raise ProtocolError(f"{self.name} has no server clock: use --clock virtual")
            self.backend = self.open_backend(url)
            for name in args.get("queues", []):
                self.backend.queue(name)
            return {"name": self.name, "version": spec.SPEC_VERSION, "protocol": PROTOCOL, "ops": self.ops()}
        if op == "shutdown":
            self.done = True
            return None
        if self.backend is None:
            raise ProtocolError(f"{op!r} before init")
        if op == "reset":
            if hasattr(self.backend, "reset"):
                self.backend.reset()
            return None
        if op == "queue":
            self.backend.queue(args.get("name"))
            return None
        if op == "snapshot" and self.serverless:
            return encode_answer(op, self.backend.snapshot(request.get("queue")))
        if op == "forget_row" and self.serverless:
            self.backend.forget_row(request.get("queue"), args.get("id"))
            return None
        if op not in QUEUE_OPS:
            raise ProtocolError(f"unknown op {op!r}")
        queue = self.backend.queue(request.get("queue"))
        answer = getattr(queue, op)(**args)
        return encode_answer(op, answer, getattr(queue, "last_dropped", ()) if op == "claim" else ())

    def reply(self, line: str) -> dict[str, Any]:
        """The reply to one request line."""
        try:
            request = json.loads(line)
            if not isinstance(request, dict) or "id" not in request:
                raise ProtocolError("a request is an object with an id")
        except (ValueError, ProtocolError) as exc:
            return {"id": None, "error": {"code": PROTO, "message": str(exc)}}
        try:
            return {"id": request["id"], "ok": self.handle(request)}
        except errors.EmqError as exc:
            return {"id": request["id"], "error": {"code": exc.code, "message": exc.detail}}
        except ProtocolError as exc:
            return {"id": request["id"], "error": {"code": PROTO, "message": str(exc)}}
        except Exception as exc:  # noqa: BLE001 - the kit judges it, the loop goes on
            return {"id": request["id"], "error": {"code": DRIVER, "message": f"{type(exc).__name__}: {exc}"}}

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

"""A port under test: its driver program, spawned and spoken to over the driver protocol
(specs/driver-protocol.md), as a ``Target`` of the conformance machine.

With a server (``url``) the kit wipes the queues' keys, reads every snapshot and deletes
rows by hand itself, over its own connection (a ``LiveTarget`` used only as an
inspector), so a port is judged on what it leaves in the server as well as on its
answers. Without one the driver must be serverless and answer ``snapshot`` and
``forget_row`` itself (the model driver).

A driver that exits, hangs past ``timeout`` or breaks the protocol raises a
``DriverError``; the machine turns that into a ``Crash`` answer, so the verdict is a
divergence at that step. A dead driver is started again at the next ``reset``, which is
what lets Hypothesis shrink a crash like any other counterexample.
"""

from __future__ import annotations

import json
import queue as queues
import shlex
import subprocess
import threading
from collections import deque
from typing import Any, Sequence

from emq_kit.check.live import LiveTarget
from emq_kit.check.machine import QUEUES, Crash
from emq_kit.errors import KitError
from emq_kit.ports.protocol import (
    DRIVER,
    PROTO,
    PROTOCOL,
    REQUIRED_OPS,
    SERVERLESS_OPS,
    decode_answer,
    encode,
)
from emq_model import errors, spec
from emq_model.snapshot import Snapshot

STARTUP = 30.0
"""Seconds a driver may take to answer ``init`` (it may be starting a runtime)."""


class DriverError(KitError):
    """The driver failed to answer a request as the protocol says."""


class DriverExited(DriverError):
    """The driver's process ended (or closed its output) before it answered."""


class DriverTimeout(DriverError):
    """No answer within the per-request timeout; the driver was killed."""


class DriverGarbage(DriverError):
    """A reply that is not a JSON object for the pending request; the driver was killed."""


class DriverProcess:
    """The driver's process and its pipes: one request at a time, each answered within
    ``timeout`` seconds. The driver's stderr is kept (its last lines) for messages."""

    def __init__(self, argv: Sequence[str], timeout: float) -> None:
        self.argv, self.timeout, self.next_id = list(argv), timeout, 1
        try:
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE)
        except OSError as exc:
            raise DriverError(f"cannot start {shlex.join(self.argv)}: {exc}") from None
        self.lines: queues.Queue[bytes | None] = queues.Queue()
        self.stderr: deque[str] = deque(maxlen=20)
        self.readers = [threading.Thread(target=self._pump_out, daemon=True),
                        threading.Thread(target=self._pump_err, daemon=True)]
        for t in self.readers:
            t.start()

    def _pump_out(self) -> None:
        for line in self.proc.stdout:  # type: ignore[union-attr]
            self.lines.put(line)
        self.lines.put(None)

    def _pump_err(self) -> None:
        for line in self.proc.stderr:  # type: ignore[union-attr]
            self.stderr.append(line.decode("utf-8", "replace").rstrip())

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def request(self, op: str, args: dict[str, Any], queue: Any = None) -> Any:
        """Send one request and return its ``ok``; a refusal raises its ``EmqError``,
        anything else the protocol does not allow a ``DriverError``. ``init`` may take
        ``STARTUP`` seconds if that is longer than the timeout: a runtime starting up
        is not a hung driver."""
        timeout = max(self.timeout, STARTUP) if op == "init" else self.timeout
        n, self.next_id = self.next_id, self.next_id + 1
        message: dict[str, Any] = {"id": n, "op": op, "args": args}
        if queue is not None:
            message["queue"] = queue
        what = f"request {n} ({op})"
        try:
            self.proc.stdin.write(json.dumps(message).encode("ascii") + b"\n")  # type: ignore[union-attr]
            self.proc.stdin.flush()  # type: ignore[union-attr]
        except (BrokenPipeError, ValueError, OSError):
            raise self._exited(f"before reading {what}") from None
        try:
            line = self.lines.get(timeout=timeout)
        except queues.Empty:
            self.kill()
            raise DriverTimeout(f"no reply to {what} within {timeout:g} s; driver killed") from None
        if line is None:
            raise self._exited(f"before answering {what}")
        try:
            reply = json.loads(line.decode("utf-8"))
            if not isinstance(reply, dict) or reply.get("id") != n or ("ok" in reply) == ("error" in reply):
                raise ValueError("not a reply to it")
        except ValueError:
            self.kill()
            raise DriverGarbage(f"reply to {what} is not {{\"id\": {n}, \"ok\"|\"error\": ...}}: "
                                f"{line[:160].decode('utf-8', 'replace')!r}; driver killed") from None
        if "ok" in reply:
            return reply["ok"]
        return _raise(reply["error"], what)

    def _exited(self, when: str) -> DriverExited:
        try:
            code: Any = self.proc.wait(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            code = "unknown (it closed its output and was killed)"
        self.readers[1].join(timeout=1)
        tail = " | ".join(line for line in self.stderr if line.strip())[-400:]
        return DriverExited(f"driver exited with code {code} {when}" + (f"; stderr: {tail}" if tail else ""))

    def kill(self) -> None:
        if self.alive:
            self.proc.kill()
        self.proc.wait()

    def close(self) -> None:
        """``shutdown``, then wait for the exit (bounded); kill if it lingers."""
        if self.alive:
            try:
                self.request("shutdown", {})
                self.proc.stdin.close()  # type: ignore[union-attr]
                self.proc.wait(timeout=self.timeout)
            except (DriverError, errors.EmqError, subprocess.TimeoutExpired, OSError):
                pass
        self.kill()
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                stream.close()  # type: ignore[union-attr]
            except OSError:  # a request still buffered for a driver that is gone
                pass


def _raise(error: Any, what: str) -> Any:
    """The exception an ``error`` reply names: a refusal code's ``EmqError``, else a
    ``DriverError`` (``EDRIVER``, ``EPROTO`` or a word the protocol does not have)."""
    if not isinstance(error, dict) or not isinstance(error.get("code"), str):
        raise DriverError(f"malformed error reply to {what}: {json.dumps(error)[:160]}")
    code, message = error["code"], str(error.get("message", ""))
    if code in errors.CODES:
        raise errors.from_code(code, message)
    kind = {DRIVER: "the driver failed", PROTO: "the driver refused the request"}.get(code, f"unknown code {code}")
    raise DriverError(f"{kind} at {what}: {message}")


class DriverQueue:
    """A queue of the port: each method of the model is one request to the driver."""

    def __init__(self, target: "DriverTarget", name: str) -> None:
        self.target, self.name = target, name
        self.last_dropped: tuple[str, ...] = ()

    def __getattr__(self, op: str) -> Any:
        if op not in spec.OPS:
            raise AttributeError(op)

        def call(**args: Any) -> Any:
            answer, dropped = decode_answer(op, self.target.process.request(op, encode(args), self.name))
            if op == "claim":
                self.last_dropped = dropped
            return answer

        return call


class DriverTarget:
    """The port behind ``command`` (split like a shell would, run without one), on the
    server ``url`` (or serverless), in ``clock`` mode (``virtual`` or ``server``)."""

    batches = False
    """Batch ops are not part of the driver protocol (B-4): the machine sends none."""

    def __init__(self, command: str, url: str | None = None, *, clock: str = "virtual", timeout: float = 10.0,
                 queues: Sequence[str] = QUEUES) -> None:
        try:
            self.argv = shlex.split(command)
        except (ValueError, AttributeError) as exc:
            raise DriverError(f"cannot split the driver command {command!r}: {exc}") from None
        if not self.argv:
            raise DriverError("the driver command is empty")
        self.command, self.url, self.clock, self.timeout = command, url, clock, timeout
        self.names = tuple(queues)
        self.inspector = LiveTarget(url) if url is not None else None
        self.info: dict[str, Any] = {}
        try:
            self.process = self._start()
        except DriverError:
            self.close()
            raise

    def _start(self) -> DriverProcess:
        process = DriverProcess(self.argv, self.timeout)
        try:
            info = process.request("init", {"protocol": PROTOCOL, "url": self.url, "queues": list(self.names),
                                            "clock": self.clock})
            if not isinstance(info, dict) or not isinstance(info.get("ops"), list):
                raise DriverError(f"init answered {json.dumps(info)[:160]}, expected {{name, version, protocol, ops}}")
            if info.get("protocol") != PROTOCOL:
                raise DriverError(f"the driver speaks protocol {info.get('protocol')!r}, the kit {PROTOCOL}")
            need = REQUIRED_OPS + (() if self.inspector else SERVERLESS_OPS)
            missing = [op for op in need if op not in info["ops"]]
            if missing:
                hint = "" if self.inspector else " (without --url the driver must be serverless)"
                raise DriverError(f"the driver lacks ops {', '.join(missing)}{hint}")
        except (DriverError, errors.EmqError) as exc:
            process.close()
            raise DriverError(f"{self.command}: init failed: {exc}") from None
        self.info = info
        return process

    def reset(self) -> None:
        """Wipe the run's queues (with a server), then ``reset`` the driver, starting it
        again first if it died."""
        if self.inspector is not None:
            self.inspector.reset()
            for name in self.names:
                self.inspector.queue(name)  # the first hand-out after a reset wipes the queue
        if not self.process.alive:
            self.process = self._start()
        self.process.request("reset", {})

    def queue(self, name: str) -> Any:
        """The run's own queues without a round trip (``init`` named them); any other
        name is asked of the driver (``queue``), which must refuse a bad one."""
        if name in self.names:
            return DriverQueue(self, name)
        try:
            self.process.request("queue", {"name": encode(name)})
        except DriverError as exc:
            return Crash(exc)
        return DriverQueue(self, name)

    def snapshot(self, name: str) -> Snapshot:
        if self.inspector is not None:
            return self.inspector.snapshot(name)
        snap, _ = decode_answer("snapshot", self.process.request("snapshot", {}, name))
        return snap

    def forget_row(self, name: str, job_id: str) -> None:
        if self.inspector is not None:
            self.inspector.forget_row(name, job_id)
        else:
            self.process.request("forget_row", {"id": job_id}, name)

    def describe(self) -> dict[str, Any]:
        server = self.inspector.describe()["server"] if self.inspector else "serverless"
        return {
            "target": f"driver {self.command}",
            "server": server,
            "scripts": f"{self.info.get('name', '?')} {self.info.get('version', '?')}",
            "driver": self.command,
            "driver_info": self.info,
            "url": self.url,
            "clock": self.clock,
        }

    def close(self) -> None:
        if hasattr(self, "process"):
            self.process.close()
        if self.inspector is not None:
            self.inspector.close()

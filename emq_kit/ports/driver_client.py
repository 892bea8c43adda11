"""A port under test: its driver program, spawned and spoken to over the driver protocol
(specs/driver-protocol.md), as a ``Target`` of the conformance machine.

With a server (``url``) the kit wipes the queues' keys, reads every snapshot and deletes
rows by hand itself, over its own connection (a ``LiveTarget`` used only as an
inspector), so a port is judged on what it leaves in the server as well as on its
answers. Without one the driver must be serverless and answer ``snapshot`` and
``forget_row`` itself (the model driver).

A driver that cannot start (its command, ``init``, its fence: DP-9) is a
``DriverUnavailable``, the environment's like a server out of reach. A started driver
that exits, hangs past ``timeout`` or breaks the protocol raises a ``DriverError`` (a
``TargetFault``); the machine turns that into a ``Crash`` answer, so the verdict is a
divergence at that step. A dead driver is started again at the next ``reset``, which is
what lets Hypothesis shrink a crash like any other counterexample.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue as queues
import shlex
import signal
import subprocess
import threading
import time
from collections import deque
from typing import Any, Callable, Sequence

from emq_kit._signals import Refused
from emq_kit.check.live import LiveTarget, say_once
from emq_kit.check.model_target import call_then
from emq_kit.check.pools import QUEUES
from emq_kit.check.step import Crash
from emq_kit.errors import (
    DriverError,
    DriverExited,
    DriverGarbage,
    DriverTimeout,
    DriverUnavailable,
    ProtocolError,
)
from emq_kit.ports.protocol import (
    BATCH,
    BATCH_MAX,
    CORE_OPS,
    DRIVER,
    PROTO,
    PROTOCOL,
    PROTOCOLS,
    REQUIRED_OPS,
    SERVERLESS_OPS,
    check_absent_args,
    decode_answer,
    encode,
    is_int,
    said,
)
from emq_kit.targets.protocol import BatchReply, Capabilities
from emq_live.client import BadReply
from emq_live.urls import redact
from emq_model import errors, keyspace, spec
from emq_model.snapshot import Snapshot

TIMEOUT = 10.0
"""Seconds a request may take when ``--timeout`` is not given (DP-14)."""
STARTUP = 30.0
"""Seconds ``init`` may take when ``--timeout`` is not given: the driver may be starting
a runtime (DP-14). A timeout given bounds ``init`` too."""


EXIT_POLL = 0.1
"""Seconds between looks at whether a driver that owes a reply has exited meanwhile."""


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")  # json.loads takes NaN and Infinity by default


class DriverProcess:
    """The driver's process and its pipes: one request at a time, each answered within
    ``timeout`` seconds (``init`` within ``init_timeout``). The driver's stderr is kept
    (its last lines) for messages."""

    def __init__(self, argv: Sequence[str], timeout: float, init_timeout: float | None = None) -> None:
        self.argv, self.timeout, self.next_id = list(argv), timeout, 1
        self.busy = self.killed = False
        self.init_timeout = timeout if init_timeout is None else init_timeout
        try:
            # its own session: a Ctrl-C to our process group is ours to handle (INT-1), and
            # the driver ends when its stdin closes, our death included (DP-18)
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, start_new_session=True)
        except OSError as exc:
            raise DriverUnavailable(f"cannot start {shlex.join(self.argv)}: {exc}") from None
        self.lines: queues.Queue[bytes | None] = queues.Queue()
        self.stderr: deque[str] = deque(maxlen=20)
        self.readers = [threading.Thread(target=self._pump_out, daemon=True),
                        threading.Thread(target=self._pump_err, daemon=True)]
        for t in self.readers:
            t.start()

    # Each reader closes its stream at its end: closed from another thread while it
    # reads, the close would wait for the end of a pipe a child of the driver may hold.

    def _pump_out(self) -> None:
        with self.proc.stdout:  # type: ignore[union-attr]
            for line in self.proc.stdout:  # type: ignore[union-attr]
                self.lines.put(line)
        self.lines.put(None)

    def _pump_err(self) -> None:
        with self.proc.stderr:  # type: ignore[union-attr]
            for line in self.proc.stderr:  # type: ignore[union-attr]
                self.stderr.append(line.decode("utf-8", "replace").rstrip())

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def request(self, op: str, args: dict[str, Any], queue: Any = None) -> Any:
        """Send one request and return its ``ok``; a refusal raises its ``EmqError``,
        anything else the protocol does not allow a ``DriverError``."""
        n, what, reply = self.exchange(op, args, queue)
        if "ok" in reply:
            return reply["ok"]
        return _raise(reply["error"], what)

    def exchange(self, op: str, args: dict[str, Any], queue: Any = None) -> tuple[int, str, dict[str, Any]]:
        """Send one request; its id, its name for messages and the reply object (exactly
        one of ``ok`` and ``error``, checked)."""
        timeout = self.init_timeout if op == "init" else self.timeout
        n, self.next_id = self.next_id, self.next_id + 1
        message: dict[str, Any] = {"id": n, "op": op, "args": args}
        if queue is not None:
            message["queue"] = queue
        what = f"request {n} ({op})"
        self.busy = True  # until its reply is read: a close meanwhile kills (the driver is not listening)
        try:
            self.proc.stdin.write(json.dumps(message).encode("ascii") + b"\n")  # type: ignore[union-attr]
            self.proc.stdin.flush()  # type: ignore[union-attr]
        except (BrokenPipeError, ValueError, OSError):
            raise self._exited(f"before reading {what}") from None
        line = self._reply(what, timeout)
        try:
            reply = json.loads(line.decode("utf-8"), parse_constant=_not_json)
            if not isinstance(reply, dict) or not is_int(reply.get("id")) or reply["id"] != n \
                    or ("ok" in reply) == ("error" in reply):
                raise ValueError("not a reply to it")
        except (ValueError, RecursionError):  # RecursionError: nested deeper than the parser goes
            self.kill()
            raise DriverGarbage(f"reply to {what} is not {{\"id\": {n}, \"ok\"|\"error\": ...}}: "
                                f"{line[:160].decode('utf-8', 'replace')!r}; driver killed") from None
        self.busy = False
        return n, what, reply

    def _reply(self, what: str, timeout: float) -> bytes:
        """The next line the driver writes, within ``timeout`` seconds; ``DriverExited``
        once the driver has exited without one (a child of its holding its output open
        kept the end from coming: the run waited as long as the child lived), else
        ``DriverTimeout``, the driver killed."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=min(EXIT_POLL, max(deadline - time.monotonic(), 0)))
            except queues.Empty:
                if self.proc.poll() is not None:  # what it wrote before its exit is still read
                    with contextlib.suppress(queues.Empty):
                        if (line := self.lines.get(timeout=EXIT_POLL)) is not None:
                            return line
                    raise self._exited(f"before answering {what}") from None
                if time.monotonic() >= deadline:
                    self.kill()
                    raise DriverTimeout(f"no reply to {what} within {timeout:g} s; driver killed") from None
                continue
            if line is None:
                raise self._exited(f"before answering {what}")
            return line

    def _exited(self, when: str) -> DriverExited:
        try:
            code: Any = self.proc.wait(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            code = "unknown (it closed its output and was killed)"
        self.kill()  # it, or a child of its left behind
        self.readers[1].join(timeout=1)
        tail = said(" | ".join(line for line in self.stderr if line.strip())[-400:])
        return DriverExited(f"driver exited with code {code} {when}" + (f"; stderr: {tail}" if tail else ""))

    def kill(self) -> None:
        """SIGKILL to the driver's process group (its session's: a wrapper's child, a
        child it forked, goes too), then its exit waited for. Once only: past it the
        group is empty, and its id free for another process to take."""
        if not self.killed:
            self.killed = True
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)  # the leader of its own session: its group's id
        self.proc.wait()

    def close(self) -> None:
        """``shutdown``, then wait for the exit (bounded); kill if it lingers. A driver
        still on a request (interrupted while it answered, or timed out) is killed at
        once: it would not read the ``shutdown`` before that request's end."""
        if self.alive and not self.busy:
            try:
                self.request("shutdown", {})
                self.proc.stdin.close()  # type: ignore[union-attr]
                self.proc.wait(timeout=self.timeout)
            except (DriverError, errors.EmqError, subprocess.TimeoutExpired, OSError):
                pass
        self.kill()
        with contextlib.suppress(OSError):  # a request still buffered for a driver that is gone
            self.proc.stdin.close()  # type: ignore[union-attr]


def _raise(error: Any, what: str) -> Any:
    """The exception an ``error`` reply names: a refusal code's ``EmqError``, else a
    ``DriverError`` (``EDRIVER``, ``EPROTO`` or a word the protocol does not have)."""
    if not isinstance(error, dict) or not isinstance(error.get("code"), str):
        raise DriverError(f"malformed error reply to {what}: {json.dumps(error)[:160]}")
    code, message = error["code"], said(error.get("message", ""))
    if code in errors.CODES:
        raise errors.from_code(code, message)
    kind = {DRIVER: "the driver failed", PROTO: "the driver refused the request"}.get(code, f"unknown code {said(code, 80)}")
    raise DriverError(f"{kind} at {what}: {message}")


class DriverQueue:
    """A queue of the port: each method of the model is one request to the driver."""

    def __init__(self, target: "DriverTarget", name: str) -> None:
        self.target, self.name = target, name
        self.last_dropped: tuple[str, ...] = ()

    def __getattr__(self, op: str) -> Any:
        if op not in spec.OPS and op not in spec.LANE_OPS:
            raise AttributeError(op)

        def call(**args: Any) -> Any:
            answer, dropped = decode_answer(op, self.target.process.request(op, self.target.wire_args(op, args),
                                                                            self.name))
            if op in ("claim", "lane_claim", "lane_wclaim"):
                self.last_dropped = self.target._dropped[self.name] = dropped
            return answer

        return call


class DriverTarget:
    """The port behind ``command`` (split like a shell would, run without one), on the
    server ``url`` (or serverless), in ``clock`` mode (``virtual`` or ``server``).

    ``timeout`` bounds each request, ``init`` included (None: ``TIMEOUT``, and
    ``STARTUP`` for ``init``). After ``init``: ``protocol`` (1 or 2), ``offered`` (the ops the driver listed),
    ``absent_args`` (arguments its API lacks), ``batch_max`` (0 without batches) and
    ``fence`` (the ``{emq}:version`` value the driver runs under, or ``None``). With
    ``partial`` a driver lacking ops outside the core is accepted (the caller generates
    only ``offered``); without it such a driver is refused, naming what it lacks."""

    conn = None  # the port's client stands between the kit and its scripts: no raw calls
    stuck = False  # a driver that hangs is killed (DP-15)

    def __init__(self, command: str, url: str | None = None, *, clock: str = "virtual", timeout: float | None = None,
                 queues: Sequence[str] = QUEUES, partial: bool = False) -> None:
        try:
            self.argv = shlex.split(command)
        except (ValueError, AttributeError) as exc:
            raise DriverUnavailable(f"cannot split the driver command {command!r}: {exc}") from None
        if not self.argv:
            raise DriverUnavailable("the driver command is empty")
        # --timeout bounds every request, init included; without it init may take
        # STARTUP seconds (DP-14)
        self.given_timeout = timeout  # the user's, said in the replay command (None: the defaults)
        self.timeout = TIMEOUT if timeout is None else timeout
        self.init_timeout = STARTUP if timeout is None else timeout
        self.command, self.url, self.clock = command, url, clock
        self.offer = PROTOCOL  # the version offered at init: 1 once a driver refused more (DP-9)
        self.notes: tuple[str, ...] = ()  # what the kit did on its own the user should know (one line each)
        self.names, self.partial = tuple(queues), partial
        self.inspector: LiveTarget | None = None
        self._dropped: dict[str, tuple[str, ...]] = {}  # each queue's last claim's orphans
        self.info: dict[str, Any] = {}
        self.protocol, self.batch_max = 1, 0
        self.fence: str | None = None
        self.offered: frozenset[str] = frozenset()
        self.absent_args: dict[str, tuple[str, ...]] = {}
        try:
            # The driver's init comes before the kit's own connection: the kit never
            # writes {emq}:version, the port fences as it would in production (DP-9d).
            self.process = self._start()
            if url is not None:
                self.inspector = LiveTarget(url, fence=False)
            self._check_fence()
        except DriverUnavailable:
            self.close()
            raise

    @property
    def capabilities(self) -> Capabilities:
        """What ``init`` said: the ops offered, the arguments absent, the batch size, the
        fence. No batch ops (not part of the protocol, B-4); the lane ops as offered
        (driver-protocol.md, "Lane ops": the cells of the others are not implemented);
        the kit's own faults only with a server it can reach itself (``inspector``)."""
        return Capabilities(lanes=True, batch_max=self.batch_max, key_faults=self.inspector is not None,
                            fence=self.fence, offered=self.offered, absent_args=self.absent_args)

    def time_calls(self, on: bool) -> bool:
        return False  # the port reads its server's clock itself (--clock server)

    def read_changes(self, on: bool) -> bool:
        """A deep run's reads by change (DEPTH-3) are the built-in client's: a driver's
        snapshot is its port's whole one, said once on stderr and in ``notes``."""
        if on:
            self.notes = say_once(self.notes, "every snapshot is read whole: a driver answers its queue's whole snapshot")
        return False

    def bracket(self) -> tuple[int, int] | None:
        return None

    def _start(self) -> DriverProcess:
        """A new driver process, past ``init``. DP-9: a driver that answers ``init`` with
        an error while offered a version above 1 may be a version-1 driver that checks
        the offer strictly: it is started again and offered 1, once for the run (a
        restart after a crash offers what was agreed), and ``notes`` says so."""
        try:
            return self._init(self.offer)
        except Refused as exc:
            if self.offer == 1:
                raise DriverUnavailable(f"{self.command}: init failed: {exc}") from None
            first, self.offer = exc, 1
        try:
            process = self._init(1)
        except Refused as exc:
            raise DriverUnavailable(f"{self.command}: init failed: {exc} (offered {PROTOCOL}: {first}; then 1)") from None
        self.notes = (*self.notes, f"{self.command} answered init offering protocol {PROTOCOL} with an error "
                      f"({first}): started it again offering protocol 1 (DP-9)")
        return process

    def _init(self, offer: int) -> DriverProcess:
        """A driver process that answered ``init`` offering ``offer``: ``Refused`` when it
        answered an error, ``DriverUnavailable`` for anything else that is wrong."""
        process = DriverProcess(self.argv, self.timeout, self.init_timeout)
        try:
            _, what, reply = process.exchange("init", {"protocol": offer, "url": self.url, "queues": list(self.names),
                                                       "clock": self.clock})
            if "error" in reply:
                error = reply["error"]
                words = f"{error.get('code')} {error.get('message', '')}".strip() if isinstance(error, dict) else error
                process.close()
                raise Refused(said(words, 160))
            info = reply["ok"]
            if not isinstance(info, dict) or not isinstance(info.get("ops"), list) \
                    or not all(isinstance(op, str) for op in info["ops"]):
                raise DriverError(f"init answered {json.dumps(info)[:160]}, expected {{name, version, protocol, ops}} "
                                  "(ops: a list of names)")
            protocol = info.get("protocol")
            if not is_int(protocol) or protocol not in PROTOCOLS or protocol > offer:
                raise DriverError(f"the driver speaks protocol {protocol!r}, offered "
                                  f"{', '.join(map(str, PROTOCOLS[:PROTOCOLS.index(offer) + 1]))}")
            ops = info["ops"]
            every = REQUIRED_OPS + (() if self.url else SERVERLESS_OPS)
            core = CORE_OPS + (() if self.url else ("snapshot",))
            missing = [op for op in (every if protocol == 1 else core) if op not in ops]
            hint = " (without --url the driver must be serverless)" if set(missing) & set(SERVERLESS_OPS) else ""
            if missing and protocol >= 2:
                raise DriverError(f"the driver lacks the core ops {', '.join(missing)}: the kit cannot check a port "
                                  f"without {', '.join(core)}{hint}")
            missing = missing or [op for op in every if op not in ops and not self.partial]
            hint = " (without --url the driver must be serverless)" if set(missing) & set(SERVERLESS_OPS) else ""
            if missing:
                raise DriverError(f"the driver lacks ops {', '.join(missing)}{hint}")
            absent = check_absent_args(info.get("absent_args"), ops) if protocol >= 2 else {}
            batch_max = info.get("batch_max", BATCH_MAX) if protocol >= 2 and BATCH in ops else 0
            if BATCH in ops and protocol >= 2 and (not is_int(batch_max) or batch_max < 1):
                raise DriverError(f"batch_max is {batch_max!r}, expected a positive integer")
        except (DriverError, ProtocolError, errors.EmqError) as exc:
            process.close()
            raise DriverUnavailable(f"{self.command}: init failed: {exc}") from None
        self.info, self.protocol, self.offered = info, protocol, frozenset(ops)
        self.absent_args, self.batch_max = absent, batch_max
        self.fence = info.get("fence") if protocol >= 2 else None
        return process

    def _check_fence(self) -> None:
        """DP-9d: the fence the port runs under. A version-2 driver reports it; with a
        server the kit reads the key itself and the two must agree. A value the kit
        the kit does not speak is a difference of the port the run reports
        (``emq_kit/check/fence.py``); a driver and its server that disagree stop it."""
        key = keyspace.VERSION_KEY
        if self.inspector is not None:
            raw = self.inspector.conn.redis.get(key)
            held = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
            if self.protocol >= 2 and self.fence != held:
                raise DriverUnavailable(f"{self.command}: init reported fence {self.fence!r}, the server holds "
                                  f"{key} = {held!r}")
            self.fence = held
        elif self.fence is not None and not isinstance(self.fence, str):
            raise DriverUnavailable(f"{self.command}: init reported fence {self.fence!r}, expected a string or null")

    def wire_args(self, op: str, args: dict[str, Any]) -> dict[str, Any]:
        """A call's arguments as sent: encoded, without those the driver declared
        absent (DP-9c). The op must be one the driver offered."""
        if op not in self.offered:
            raise DriverError(f"{op} was not offered by the driver at init")
        absent = self.absent_args.get(op, ())
        drawn = [name for name in absent if args.get(name) is not None]
        if drawn:
            raise DriverError(f"{op} got {', '.join(drawn)}, which the driver declared absent")
        return encode({k: v for k, v in args.items() if k not in absent})

    def batch(self, calls: Sequence[tuple[str, str | None, dict[str, Any]]], snapshots: bool = True) -> list[BatchReply]:
        """DP-20: ``calls`` (op, queue or ``None``, arguments) in requests of at most
        ``batch_max`` calls, one reply per call, in order; with ``snapshots`` each reply
        on a run queue carries the queue's snapshot read after its call. With a server
        the kit reads each run queue the batch touched itself afterwards: it must equal
        the driver's last snapshot of it (a driver cannot report a keyspace it did not
        leave). A reply of the wrong shape, or a last snapshot the keyspace belies, is
        ``DriverGarbage`` (DP-21, DP-22), the driver killed: a breach of the batch is no
        answer a replay call by call can meet, so it is listed as met (DP-17)."""
        if not self.batch_max:
            raise DriverError("the driver offers no batch (protocol 2, batch in its ops)")
        out: list[BatchReply] = []
        for start in range(0, len(calls), self.batch_max):
            chunk = calls[start:start + self.batch_max]
            wire = [{"op": op, **({"queue": q} if q is not None else {}),
                     "args": {"name": encode(args.get("name"))} if op == "queue" else self.wire_args(op, args)}
                    for op, q, args in chunk]
            _, what, reply = self.process.exchange(BATCH, {"calls": wire, "snapshot": snapshots})
            if "error" in reply:
                _raise(reply["error"], what)
            replies = reply["ok"]
            if not isinstance(replies, list) or len(replies) != len(chunk):
                raise self._garbage(f"{what} answered {json.dumps(replies)[:160]}, expected {len(chunk)} replies")
            out += [self._batch_reply(call, r, snapshots, f"{what} call {i + 1}")
                    for i, (call, r) in enumerate(zip(chunk, replies))]
        if snapshots and self.inspector is not None:
            last = {op_q: r.snapshot for (_, op_q, _), r in zip(calls, out) if op_q in self.names}
            for name, snap in last.items():
                if snap != self.inspector.snapshot(name):
                    raise self._garbage(f"the driver's snapshot of {name} after the batch differs from the keyspace")
        return out

    def _garbage(self, message: str) -> DriverGarbage:
        self.process.kill()
        return DriverGarbage(f"{message}; driver killed")

    def _batch_reply(self, call: tuple[str, str | None, dict[str, Any]], r: Any, snapshots: bool,
                     what: str) -> BatchReply:
        op, name, _ = call
        if not isinstance(r, dict) or ("ok" in r) == ("error" in r) or not set(r) <= {"ok", "error", "snapshot"}:
            raise self._garbage(f"{what} is {json.dumps(r)[:160]}, expected {{\"ok\"|\"error\": ..., \"snapshot\"?}}")
        snap = None
        if snapshots and name in self.names:
            if "snapshot" not in r:
                raise self._garbage(f"{what} carries no snapshot of {name}")
            try:
                snap = decode_answer("snapshot", r["snapshot"])[0]
            except ProtocolError as exc:
                raise self._garbage(f"{what}: {exc}") from None
        dropped: tuple[str, ...] = ()
        try:
            if "error" in r:
                _raise(r["error"], what)
            answer = None if op == "queue" else r["ok"]
            if op != "queue":
                answer, dropped = decode_answer(op, r["ok"])
        except (errors.EmqError, DriverError, ProtocolError) as exc:
            answer = exc
        return BatchReply(answer, dropped, snap)

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
            if "queue" not in self.offered:
                raise DriverError("queue was not offered by the driver at init")
            self.process.request("queue", {"name": encode(name)})
        except DriverError as exc:
            return Crash(exc)
        return DriverQueue(self, name)

    def call(self, name: str, op: str, args: dict[str, Any], meanwhile: Callable[[], None] | None = None) -> Any:
        return call_then(self.queue(name), op, args, meanwhile)

    def dropped(self, name: str) -> tuple[str, ...]:
        return self._dropped.get(name, ())

    def snapshot(self, name: str) -> Snapshot | BadReply:
        if self.inspector is not None:
            return self.inspector.snapshot(name)
        snap, _ = decode_answer("snapshot", self.process.request("snapshot", {}, name))
        return snap

    def forget_row(self, name: str, job_id: str) -> None:
        if self.inspector is not None:
            self.inspector.forget_row(name, job_id)
        else:
            self.process.request("forget_row", {"id": job_id}, name)

    def spoil_key(self, name: str, key: str, kind: str, id: str | None = None, group: str | None = None) -> None:
        if self.inspector is not None:
            self.inspector.spoil_key(name, key, kind, id, group)
        else:
            self.process.request("spoil_key", _which(key, id, group, kind=kind), name)

    def mend_key(self, name: str, key: str, id: str | None = None, group: str | None = None) -> None:
        if self.inspector is not None:
            self.inspector.mend_key(name, key, id, group)
        else:
            self.process.request("mend_key", _which(key, id, group), name)

    def stray_key(self, name: str, key: str, kind: str) -> None:
        if self.inspector is not None:
            self.inspector.stray_key(name, key, kind)
        else:
            self.process.request("stray_key", {"key": key, "kind": kind}, name)

    def drop_key(self, name: str, key: str) -> None:
        if self.inspector is not None:
            self.inspector.drop_key(name, key)
        else:
            self.process.request("drop_key", {"key": key}, name)

    def describe(self) -> dict[str, Any]:
        server = self.inspector.describe()["server"] if self.inspector else "serverless"
        return {
            "target": f"driver {self.command}",
            "server": server,
            "scripts": f"{said(self.info.get('name', '?'), 200)} {said(self.info.get('version', '?'), 80)}",
            "driver": self.command,
            "timeout": self.given_timeout,
            "driver_info": self.info,
            "url": redact(self.url) if self.url else None,
            "clock": self.clock,
        }

    def close(self) -> None:
        if hasattr(self, "process"):
            self.process.close()
        if self.inspector is not None:
            self.inspector.close()


def _which(key: str, id: str | None, group: str | None, **more: str) -> dict[str, str]:
    """A key fault's arguments on the wire (DP-9e): the key, its id or group, ``kind``."""
    return {"key": key, **({"id": id} if id is not None else {}), **({"group": group} if group is not None else {}),
            **more}

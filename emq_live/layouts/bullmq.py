"""The BullMQ layout's target: BullMQ's own scripts, unmodified, from the installed
``bullmq`` package (pinned in pyproject.toml), on a real Valkey or Redis.

Each modelled transition is one method calling one script with the keys and arguments
``bullmq.scripts.Scripts`` would send, except that every timestamp is the caller's
virtual clock (``Scripts`` reads ``time.time()`` itself, so it is not reused; its loader
is). ``projection()`` reads the layout back with plain commands.

Two of BullMQ's keys expire in server time rather than by a timestamp argument: the lock
(PX lockDuration) and the stalled-check throttle (PX stalledInterval). The run sets the
lock an hour long and expresses its expiry as the explicit ``lapse`` op; ``check_stalled``
deletes the throttle first, which is the check running after its interval.
"""

from __future__ import annotations

import functools
import inspect
import json
from pathlib import Path
from typing import Any, Callable, TypeVar

import redis

from emq_model.keyspace import glob
from emq_model.layouts.bullmq import (
    HASH_FIELDS,
    LIST_LOCATIONS,
    ZSET_LOCATIONS,
    Projection,
    Retention,
    check_args,
    table,
)

PREFIX = table()["prefix"]
QUEUE = table()["queue"]
RUN = table()["run"]


class LayoutUnavailable(RuntimeError):
    """This server cannot run the layout's scripts; ``reason`` is one line."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


NO_CMSGPACK = (
    "bullmq layout: the server's Lua has no cmsgpack (fakeredis runs scripts on lupa, "
    "which offers no cmsgpack module); use --url with Valkey or Redis"
)


def bullmq_version() -> str:
    """The installed bullmq package's version; ``LayoutUnavailable`` when it is missing
    or is not the pinned one (the contract is checked against that version)."""
    try:
        import bullmq
    except ImportError as exc:
        raise LayoutUnavailable("bullmq layout: the bullmq package is not installed (pip install 'emq[bullmq]')") from exc
    pinned = table()["package"]["version"]
    if bullmq.__version__ != pinned:
        raise LayoutUnavailable(f"bullmq layout: bullmq {bullmq.__version__} installed, the contract is for {pinned}")
    return bullmq.__version__


def _has_cmsgpack(client: redis.Redis) -> bool:
    try:
        return bool(client.eval("return type(cmsgpack) == 'table' and 1 or 0", 0))
    except redis.ResponseError:
        return False


F = TypeVar("F", bound=Callable[..., Any])


def _checked(method: F) -> F:
    """Refuse bad arguments (``ArgError``) before anything is sent: the op is the
    method's name, its argument list the table's."""
    signature = inspect.signature(method)

    @functools.wraps(method)
    def call(self: "BullTarget", *args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        check_args(method.__name__, tuple(bound.arguments.values())[1:])
        return method(self, *args, **kwargs)

    return call  # type: ignore[return-value]


class BullTarget:
    """BullMQ's scripts on one server, the queue ``{q}`` under prefix ``emq`` (or the
    queue ``{name}``: a run of the kit's own, specs/ownership.md OWN-2). Methods mirror
    ``BullModel``'s ops and return the script's reply decoded the same way."""

    def __init__(
        self,
        client: redis.Redis,
        retention: Retention = Retention(),
        max_stalled: int = RUN["max_stalled"],
        lock_ms: int = RUN["lock_ms"],
        scripts: str | Path | None = None,
        name: str = QUEUE[1:-1],
    ) -> None:
        """Load the scripts (SCRIPT LOAD through redis-py's ``register_script``): the
        package's, or the same files from the directory ``scripts`` (a mutated copy,
        selftest); a server whose Lua lacks cmsgpack raises ``LayoutUnavailable`` before
        anything is written."""
        self.version = bullmq_version()
        self.base = f"{PREFIX}:{{{name}}}:"  # emq:{q}: — the job hash is base + id
        from bullmq.redis_connection import SCRIPT_DEFINITIONS, loadScript

        if not _has_cmsgpack(client):
            raise LayoutUnavailable(NO_CMSGPACK)
        shipped = set(SCRIPT_DEFINITIONS.values())
        self.client = client
        self.retention = retention
        self.max_stalled = max_stalled
        self.lock_ms = lock_ms
        self.scripts_dir = None if scripts is None else str(scripts)
        self._scripts = {}
        self._known: set[str] = set()  # every id named to or by the scripts (projection)
        for name, entry in table()["scripts"].items():
            if entry["file"] not in shipped:
                raise LayoutUnavailable(f"bullmq layout: bullmq {self.version} ships no {entry['file']}")
            source = loadScript(entry["file"]) if scripts is None else Path(scripts, entry["file"]).read_text("utf-8")
            self._scripts[name] = client.register_script(source)

    def _key(self, name: str) -> str:
        return self.base + name

    def _call(self, name: str, args: list[Any], **named: str) -> Any:
        """One EVALSHA: the table's key list, ``<name>`` placeholders filled from
        ``named`` (names under the queue's base)."""
        if "job" in named:
            self._known.add(named["job"])
        keys = [self._key(named[k[1:-1]] if k.startswith("<") else k) for k in table()["scripts"][name]["keys"]]
        return self._scripts[name](keys=keys, args=args)

    # -- the transitions ----------------------------------------------------

    @_checked
    def add(self, job_id: str, now: int, delay: int = 0, priority: int = 0, lifo: bool = False) -> str:
        """Scripts.addJob's choice of script: delayed, else prioritized, else standard."""
        import msgpack

        opts: dict[str, Any] = {"attempts": 1, "delay": delay}
        if priority:
            opts["priority"] = priority
        if lifo:
            opts["lifo"] = True
        packed = msgpack.packb([self.base, job_id, "job", now, None, None, None, None, None], use_bin_type=True)
        args = [packed, json.dumps(None), msgpack.packb(opts), now]
        name = "add_delayed" if delay else "add_prioritized" if priority else "add"
        jid = _text(self._call(name, args))
        self._known.add(jid)
        return jid

    @_checked
    def take(self, token: str, now: int) -> tuple[str | None, int]:
        """moveToActive with the worker's packed options (token, lockDuration)."""
        import msgpack

        opts = msgpack.packb({"token": token, "lockDuration": self.lock_ms, "limiter": None}, use_bin_type=True)
        reply = self._call("take", [self.base, now, opts])
        return (_text(reply[1]) if reply[1] else None), int(reply[3])

    def _finish(self, job_id: str, token: str, now: int, target: str, prop: str, value: str) -> int:
        import msgpack

        keep = self.retention.of(target)
        opts = msgpack.packb(
            {
                "token": token,
                "keepJobs": {"count": keep},
                "limiter": None,
                "lockDuration": self.lock_ms,
                "attempts": 1,
                "maxMetricsSize": "",
                "fpof": False,
                "cpof": False,
                "idof": False,
                "rdof": False,
            },
            use_bin_type=True,
        )
        args = [job_id, now, prop, value, target, "", self.base, opts]
        if target == "failed":
            args.append(_fields(prop, value))
        return int(self._call("finish", args, job=job_id, target=target, metrics="metrics:" + target))

    @_checked
    def complete(self, job_id: str, token: str, now: int, value: str) -> int:
        return self._finish(job_id, token, now, "completed", "returnvalue", value)

    @_checked
    def fail(self, job_id: str, token: str, now: int, reason: str) -> int:
        return self._finish(job_id, token, now, "failed", "failedReason", reason)

    @_checked
    def retry(self, job_id: str, token: str, now: int, reason: str) -> int:
        args = [self.base, now, "LPUSH", job_id, token, _fields("failedReason", reason)]
        return int(self._call("retry", args, job=job_id))

    @_checked
    def backoff(self, job_id: str, token: str, now: int, delay: int, reason: str) -> int:
        args = [self.base, str(now), job_id, token, delay, "0", _fields("failedReason", reason), "0"]
        return int(self._call("backoff", args, job=job_id))

    @_checked
    def promote(self, job_id: str) -> int:
        self._known.add(job_id)
        return int(self._call("promote", [self.base, job_id]))

    @_checked
    def check_stalled(self, now: int) -> list[str]:
        self.client.delete(self._key("stalled-check"))
        reply = self._call("check_stalled", [self.max_stalled, self.base, now, RUN["stalled_interval_ms"]])
        return [_text(x) for x in reply]

    @_checked
    def extend(self, job_id: str, token: str) -> int:
        self._known.add(job_id)
        return int(self._call("extend", [token, self.lock_ms, job_id], lock=job_id + ":lock"))

    @_checked
    def remove(self, job_id: str) -> int:
        return int(self._call("remove", [job_id, 0, self.base], job=job_id))

    @_checked
    def reprocess(self, job_id: str, state: str, reset: bool = False) -> int:
        prop = "failedReason" if state == "failed" else "returnvalue"
        flag = "1" if reset else "0"
        args = [job_id, "LPUSH", prop, state, flag, flag]
        return int(self._call("reprocess", args, job=job_id, state=state))

    @_checked
    def lapse(self, job_id: str) -> int:
        """The lock's TTL running out, brought forward: DEL of the lock key."""
        self._known.add(job_id)
        return int(self.client.delete(self._key(job_id + ":lock")))

    def wipe(self) -> None:
        """Delete every key of the queue (SCAN of ``emq:{q}:*``, then DEL): the next
        call meets an empty queue. Other keys on the server are left alone: the base is
        escaped as a glob (a queue name may hold ``*``, OWN-1)."""
        pattern = glob(self.base) + "*"
        keys = list(self.client.scan_iter(match=pattern, count=1000))
        if keys:
            self.client.delete(*keys)
        self._known.clear()

    # -- reading ------------------------------------------------------------

    def discover(self) -> None:
        """Name every job id the queue's keys show (a job hash ``emq:{q}:<id>`` or a
        lock ``emq:{q}:<id>:lock``) to ``projection``, which then reads their hashes
        and locks: what an audit of a keyspace this target did not write needs. Read
        only (SCAN)."""
        pattern = glob(self.base) + "*"
        named = set(table()["locations"]) | set(table()["auxiliary"])
        for key in self.client.scan_iter(match=pattern, count=1000):
            rest = _text(key)[len(self.base):]
            jid = rest.removesuffix(":lock")
            if jid and ":" not in jid and jid not in named:
                self._known.add(jid)

    def projection(self) -> Projection:
        """The layout's projection in two pipelined round trips: the locations and
        counters, then the hash fields and lock of every id this target has named or
        been given (a hash or lock can only exist under such an id, so an orphan hash
        still shows)."""
        pipe = self.client.pipeline(transaction=False)
        pipe.get(self._key("id"))
        pipe.get(self._key("pc"))
        pipe.smembers(self._key("stalled"))
        for k in LIST_LOCATIONS:
            pipe.lrange(self._key(k), 0, -1)
        for k in ZSET_LOCATIONS:
            pipe.zrange(self._key(k), 0, -1, withscores=True)
        counter, pc, stalled, *rest = pipe.execute()
        lists = {k: [_text(x) for x in v] for k, v in zip(LIST_LOCATIONS, rest)}
        zsets = {k: [(_text(m), s) for m, s in v] for k, v in zip(ZSET_LOCATIONS, rest[len(LIST_LOCATIONS):])}
        self._known.update(j for v in lists.values() for j in v)
        self._known.update(m for v in zsets.values() for m, _ in v)
        ids = sorted(self._known)
        for jid in ids:
            pipe.exists(self._key(jid))
            pipe.hmget(self._key(jid), list(HASH_FIELDS))
            pipe.get(self._key(jid + ":lock"))
        found = pipe.execute()
        hashes, locks = {}, {}
        for i, jid in enumerate(ids):
            exists, fields, lock = found[3 * i : 3 * i + 3]
            if exists:
                hashes[jid] = {f: _text(v) for f, v in zip(HASH_FIELDS, fields) if v is not None}
            if lock is not None:
                locks[jid] = _text(lock)
        return Projection.build(
            lists, zsets, [_text(x) for x in stalled], locks, hashes, int(counter or 0), int(pc or 0)
        )


def _fields(name: str, value: str) -> bytes:
    """fieldsToUpdate as the worker packs it: a msgpacked flat [field, value] array."""
    import msgpack

    return msgpack.packb([name, value], use_bin_type=True)


def _text(value: Any) -> str:
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else str(value)



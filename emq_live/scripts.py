"""The scripts: assembled, loaded and run in one place.

Each script is assembled as

    generated prelude  +  lib.lua  +  <op>.lua

The prelude is one chunk-local table ``emq`` of constants generated here from
``specs/transitions.json`` (limits, wire version, the script's op with its ``argv``, the
keys it ``touches`` and the argument types it uses, the type of every key) and from
``emq_model`` (the key kinds, the id shape, the refusal codes as ``emq.code``), so no
number or word of the contract is retyped in Lua.

Scripts are sent with ``SCRIPT LOAD`` and run with ``EVALSHA``. A ``NOSCRIPT`` reply
(after ``SCRIPT FLUSH``, a restart or a failover) is handled here and nowhere else: the
scripts are all loaded again and the call repeated, once. A call that got ``NOSCRIPT`` did not
run, so repeating it is exact.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import hiredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeout

from emq_model import branded_id, errors, keyspace, model, spec

Call = tuple[str, Sequence[Any], Sequence[Any]]
"""A script call: its name, KEYS and ARGV."""


class Plain(tuple):
    """A command a ``Stream`` sends as it is, among its script calls: an operator's write
    (``DEL``, ``RESTORE``...) in a window of steps."""

    __slots__ = ()


class OrderLost(RedisConnectionError):
    """``NOSCRIPT`` met a call of a stream (its script was flushed), and a call or a
    plain command sent after it ran: sending the call again would run it after them,
    so the order the stream was sent in is lost and nothing sent can be judged. The run
    ends as on a lost connection: the environment's doing, never a verdict."""


SETTLE_ROUNDS = 3
"""How many times ``settle_all`` sends again the calls that met ``NOSCRIPT``: a flush
while they go again fails their tail again."""

TRANSITION_SCRIPTS: tuple[str, ...] = spec.TRANSITIONS
"""The scripts a script directory must hold (one per transition)."""

READ_SCRIPTS: tuple[str, ...] = ("snapshot", "counts", "state")
"""Read-only scripts, for reads that must see one instant."""

LANE_SCRIPTS: tuple[str, ...] = spec.LANE_TRANSITIONS
"""The lane transitions (lifecycle.md §10). A lane op with a ``script`` entry runs that
op's file (``lane_wclaim`` runs lane_claim.lua, as claim_many runs claim.lua). A foreign
directory may lack them: ours run then, with our lib.lua."""

SCRIPTS: tuple[str, ...] = TRANSITION_SCRIPTS + READ_SCRIPTS + LANE_SCRIPTS

LEASE_EXPIRED = model.LEASE_EXPIRED
"""The ``last_error`` a dead reap writes (T-reap-2); the model's constant."""


def lua_literal(value: Any) -> str:
    """``value`` (dict, list, tuple, str, bytes, int, bool) as a Lua expression."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        value = value.encode("utf-8")
    if isinstance(value, bytes):
        out = []
        for b in value:
            ch = chr(b)
            if ch in '"\\':
                out.append("\\" + ch)
            elif 0x20 <= b < 0x7F:
                out.append(ch)
            else:
                out.append(f"\\{b:03d}")
        return '"' + "".join(out) + '"'
    if isinstance(value, dict):
        items = ", ".join(f"[{lua_literal(k)}] = {lua_literal(v)}" for k, v in value.items())
        return "{" + items + "}"
    if isinstance(value, (list, tuple)):
        return "{" + ", ".join(lua_literal(v) for v in value) + "}"
    raise TypeError(f"no Lua literal for {type(value).__name__}")


def _lua_type(name: str) -> dict[str, Any]:
    """A type of the table with its bounds as canonical decimal strings (CC-2)."""
    t = spec.TYPES[name]
    out: dict[str, Any] = {}
    if "min" in t:
        out["min"] = str(spec.bound(t["min"]))
        out["max"] = str(spec.bound(t["max"]))
    if "max_bytes" in t:
        out["max_bytes"] = spec.bound(t["max_bytes"])
    if "values" in t:
        out["values"] = list(t["values"])
    if "alphabet" in t:
        out["min_bytes"] = t["min_bytes"]
        out["pattern"] = lua_class(t["alphabet"])
    return out


def lua_class(alphabet: str) -> str:
    """A Lua pattern matching one character outside ``alphabet`` (``[^...]``), every
    punctuation character escaped with ``%``."""
    return "[^" + "".join(c if c.isalnum() else "%" + c for c in alphabet) + "]"


def _argv(argv: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"name": a["name"], "type": a["type"], "optional": bool(a.get("optional"))} for a in argv]


def _op_entry(op: str) -> dict[str, Any]:
    """What ``emq.begin`` needs to know of one script's op: its ARGV, whether it takes a
    trailing ``now`` and a row key, for a batch with items the ARGV of one item, and the
    keys whose type it checks (``touches``, CC-8; "rows", the rows of the ids a claim,
    promote or reap takes, is the script's own check)."""
    if op == "snapshot":
        return {"argv": [], "clock": False, "row_key": False, "items": False, "touches": []}
    if op in spec.BATCHES:
        b = spec.BATCHES[op]
        items = _argv(spec.OPS[b["of"]]["argv"]) if b["items"] else False
        return {"argv": _argv(b["argv"]), "clock": bool(b["clock"]), "row_key": False, "items": items,
                "touches": _touches(b["of"])}
    d = spec.entry(op)
    return {"argv": _argv(d["argv"]), "clock": bool(d["clock"]), "row_key": bool(d["row_key"]), "items": False,
            "touches": _touches(op)}


def _touches(op: str) -> list[str]:
    """The keys ``begin`` types (CC-8): "rows" and "lanes" are typed by the script as it
    meets them (the rows and the lanes of the ids the call would take), before any write."""
    return [name for name in spec.entry(op)["touches"] if name not in ("rows", "lanes")]


@functools.lru_cache(maxsize=None)
def prelude(op: str | None = None) -> str:
    """The generated head of a script: ``local emq = {...}``. For one ``op`` it names the
    op (``emq.op``) and carries only that op's entry and the argument types it uses: a
    script builds this table on every call, so it holds nothing the script does not
    read. Without ``op``: every op and type. Made once per op (the table is fixed at
    import; a ``ScriptSet`` is built per example by the raw calls' judge)."""
    everything = [*spec.OPS, *spec.LANE_OPS, *spec.BATCHES, "snapshot"]
    ops = {name: _op_entry(name) for name in ([op] if op else everything)}
    used = {a["type"] for e in ops.values() for a in [*e["argv"], *(e["items"] or [])]}
    used |= {"time"} if any(e["clock"] for e in ops.values()) else set()
    table = {
        "op": op or False,
        "spec_version": spec.SPEC_VERSION,
        "wire_version": spec.WIRE_VERSION,
        "limits": {name: str(v) for name, v in spec.LIMITS.items()},
        "queue_max_bytes": keyspace.QUEUE_MAX_BYTES,
        "kinds": list(keyspace.KINDS),
        "key_names": list(spec.LOCATIONS) + ["completed", "failed"],
        "key_types": dict(keyspace.KEY_TYPES),
        "code": {name: getattr(errors, name) for name in ("KIND", "ARG", "STALE", "STATE", "LOCK", "TYPE")},
        "locations": list(spec.LOCATIONS),
        "states": dict(spec.STATE_OF),
        "types": {name: _lua_type(name) for name in spec.TYPES if op is None or name in used},
        "ops": ops,
        "job_ns": branded_id.JOB,
        "id_len": branded_id.ID_LEN,
        "body_max": branded_id.encode(branded_id.JOB, branded_id.MAX_VALUE)[3:],
        "lease_expired": LEASE_EXPIRED,
        "lane_kinds": list(keyspace.LANE_KINDS),
        "lane_head": keyspace.LANE_HEAD,
        "lane_tail": keyspace.LANE_TAIL,
        "group": _lua_type("group"),
    }
    return (
        "-- generated by emq_live.scripts.prelude() from specs/transitions.json; do not edit\n"
        f"local emq = {lua_literal(table)}\n"
    )


def _own_dir() -> Any:
    return resources.files("emq_live").joinpath("lua")


def _read(node: Any, name: str) -> str | None:
    entry = node.joinpath(name)
    return entry.read_text("utf-8") if entry.is_file() else None


@dataclass(frozen=True)
class Script:
    """One assembled script."""

    name: str
    source: str
    sha: str

    @classmethod
    def assemble(cls, name: str, lib: str, body: str) -> "Script":
        """``prelude(name) + lib + body``, with its SHA1."""
        source = prelude(name) + lib + "\n" + body
        return cls(name, source, hashlib.sha1(source.encode("utf-8")).hexdigest())


class ScriptSet:
    """Every script, assembled from a directory (ours by default).

    A foreign directory (a port's rewritten scripts, same calling convention) must hold
    every transition ``<op>.lua``; its ``lib.lua`` is prepended when present. The read
    scripts it lacks are ours, with our ``lib.lua``.

    A batch op (``spec.BATCHES``) runs the script of the op it is ``of``, assembled under
    the batch's name (``emq.op``), which then takes the batch's ARGV; a batch with items
    also gets ``batch.lua`` after ``lib.lua``. Batch scripts come from a directory that
    holds ``batch.lua`` (a full copy of ours, as ``emq selftest`` mutates), and are ours
    otherwise, since a port's single-op scripts know no batch ARGV."""

    def __init__(self, directory: str | Path | None = None) -> None:
        own = _own_dir()
        own_lib = _read(own, "lib.lua") or ""
        if directory is None:
            node, lib = own, own_lib
        else:
            node = Path(directory)
            if not node.is_dir():
                raise FileNotFoundError(f"no script directory {directory}")
            missing = [op for op in TRANSITION_SCRIPTS if not (node / f"{op}.lua").is_file()]
            if missing:
                raise FileNotFoundError(f"{directory} lacks {', '.join(m + '.lua' for m in missing)}")
            lib = _read(node, "lib.lua") or ""
        self.directory = str(directory) if directory is not None else str(own)
        self.scripts: dict[str, Script] = {}
        for name in SCRIPTS:
            # a bundle (``emq scripts --out``) holds each lane op assembled under its own
            # name (emq.op): lane_wclaim.lua, which lane_claim.lua would run as a lane_claim
            named = directory is not None and (Path(directory) / f"{name}.lua").is_file()
            file = name if named else spec.LANE_OPS.get(name, {}).get("script", name)
            body, body_lib = _read(node, f"{file}.lua"), lib
            if body is None:
                body, body_lib = _read(own, f"{file}.lua"), own_lib
            assert body is not None, name
            self.scripts[name] = Script.assemble(name, body_lib, body)
        batch_node, batch_base = (node, lib) if _read(node, "batch.lua") is not None else (own, own_lib)
        batch_lib = batch_base + "\n" + (_read(batch_node, "batch.lua") or "")
        for name, batch in spec.BATCHES.items():
            body = _read(batch_node, f"{batch['of']}.lua")
            assert body is not None, name
            self.scripts[name] = Script.assemble(name, batch_lib if batch["items"] else batch_base, body)

    @staticmethod
    @functools.cache
    def own() -> ScriptSet:
        """Our scripts, assembled once per process (a set is never changed once made):
        the observer's snapshot.lua, read beside scripts under test."""
        return ScriptSet()

    def __getitem__(self, name: str) -> Script:
        return self.scripts[name]

    def load(self, client: Any, names: Iterable[str] | None = None) -> None:
        """``SCRIPT LOAD`` the named scripts (all by default). After ``NOSCRIPT`` all are
        loaded again: a server then holds all of them or, after a flush, none, so the
        calls of a pipeline that met ``NOSCRIPT`` are those sent after a point
        (``settle_all``), never some here and there. On one server they are loaded in
        one pipeline (a flush that falls inside it leaves some missing: ``settle_all``
        then finds calls that met ``NOSCRIPT`` here and there); a cluster loads each on
        every primary in turn."""
        chosen = [self.scripts[name] for name in (names if names is not None else self.scripts)]
        if getattr(client, "connection_pool", None) is None:  # a cluster routes SCRIPT LOAD to every primary
            got = [client.script_load(script.source) for script in chosen]
        else:
            pipe = client.pipeline(transaction=False)
            for script in chosen:
                pipe.script_load(script.source)
            got = pipe.execute()
        for script, sha in zip(chosen, got, strict=True):
            sha = sha.decode() if isinstance(sha, bytes) else sha
            if sha != script.sha:
                raise RuntimeError(f"server hashed {script.name}.lua as {sha}, expected {script.sha}")

    def run(self, client: Any, name: str, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        """``EVALSHA`` one script; on ``NOSCRIPT`` load every script and run it again (once).
        Refusals come back as ``emq_model.errors.EmqError``; other error replies as
        redis-py's exceptions."""
        script = self.scripts[name]
        try:
            try:
                return client.evalsha(script.sha, len(keys), *keys, *args)
            except NoScriptError:
                self.load(client)
                return client.evalsha(script.sha, len(keys), *keys, *args)
        except ResponseError as exc:
            raise refusal(exc) from None

    def run_batch(self, client: Any, calls: Sequence[Call]) -> list[Any]:
        """Several ``EVALSHA`` calls in one round trip (a non-transactional pipeline),
        in order: one ``Stream`` sent whole. Each result is an answer or an exception
        instance (refusals as ``EmqError``)."""
        stream = self.stream(client)
        stream.send(calls)
        return stream.receive()

    def stream(self, client: Any) -> "Stream":
        """A ``Stream`` of calls over ``client``: written as they come, read together."""
        return Stream(self, client)

    def send_then(self, client: Any, call: Call, then: Call, *,
                  timed: bool = False) -> Callable[[], tuple[Any, ...]]:
        """Send ``call`` and then ``then`` in one write (a non-transactional pipeline) and
        return the function that waits for their two results, so the caller can work
        while the server runs them. Each result is a reply or an exception instance
        (refusals as ``EmqError``). When either met ``NOSCRIPT`` the pair runs again, one
        ``run`` after the other, so ``then`` always sees the state ``call`` left (a
        ``call`` that met ``NOSCRIPT`` did not run). A cluster client runs the pipeline
        at once (it routes each command; the pair shares a slot).

        ``timed``: the server's ``TIME`` (ms) is read right before ``call`` and right
        after ``then``, in the same write, and the results end with ``(t0, t1)``: a
        window of the server's clock that holds the clock ``call`` ran at (the server
        runs a connection's commands in order). After ``NOSCRIPT`` the window ends with a
        ``TIME`` read once the pair (or ``then`` alone) ran again. A cluster's pipeline is
        bracketed by reads of their own, on the client's default node, as a clock of its
        own would read."""
        pool = getattr(client, "connection_pool", None)
        if pool is None:
            t0 = ms_of(client.time()) if timed else 0
            results = self._pipeline(client, [call, then])
            settled = self._settle(client, call, then, results)
            times = ((t0, ms_of(client.time())),) if timed else ()
            return lambda: (*settled, *times)
        commands = [self._evalsha(c) for c in (call, then)]
        if timed:
            commands = [("TIME",), *commands, ("TIME",)]
        conn = pool.get_connection()
        try:
            conn.send_packed_command(packed(conn, commands))
        except BaseException:
            conn.disconnect()
            pool.release(conn)
            raise

        def receive() -> tuple[Any, ...]:
            results = read_replies(pool, conn, len(commands))
            if not timed:
                return self._settle(client, call, then, results)
            t0, first, second, t1 = results
            for read in (t0, t1):
                if isinstance(read, ResponseError):  # TIME refused (an ACL without it): as client.time() raises
                    raise read
            again = any(isinstance(r, NoScriptError) for r in (first, second))
            settled = self._settle(client, call, then, [first, second])
            if again:  # the pair, or ``then`` alone, ran again: ``call`` ran after t0 and before this read
                t1 = client.time()
            return (*settled, (ms_of(t0), ms_of(t1)))

        return receive

    def _settle(self, client: Any, call: Call, then: Call, results: Sequence[Any]) -> tuple[Any, Any]:
        first, second = results
        if isinstance(first, NoScriptError):
            first, second = self._outcome(client, call), self._outcome(client, then)
        elif isinstance(second, NoScriptError):
            second = self._outcome(client, then)
        return tuple(refusal(r) if isinstance(r, ResponseError) else r for r in (first, second))  # type: ignore[return-value]

    def settle_all(self, client: Any, calls: Sequence[Call | Plain], results: list[Any]) -> list[Any]:
        """``results`` of ``calls`` sent in order, ``NOSCRIPT`` settled: the calls that
        met it did not run, and after a flush (every script is loaded again at once:
        ``load``) they are a suffix of the calls, so every script is loaded and they are
        sent again, in order, in a second pipeline (again, should a flush fail their
        tail again); the order of effects is the calls'. A call or a plain command after
        the first of them that ran ran before them: ``OrderLost``. A script's error
        replies become refusals where they name one."""
        results = list(results)
        for _ in range(SETTLE_ROUNDS):
            first = next((i for i, r in enumerate(results) if isinstance(r, NoScriptError)), None)
            if first is None:
                break
            if not all(isinstance(r, NoScriptError) for r in results[first:]):
                raise OrderLost("the server's scripts were flushed while a window of calls was on the wire, "
                                "and a call or a write sent after the first that met NOSCRIPT ran first: "
                                "the window cannot be judged")
            self.load(client)
            results[first:] = self._pipeline(client, calls[first:])
        if any(isinstance(r, NoScriptError) for r in results):
            raise OrderLost(f"the server's scripts were flushed {SETTLE_ROUNDS + 1} times while a window of calls "
                            "was on the wire: the window cannot be judged")
        return [refusal(r) if isinstance(r, ResponseError) and not isinstance(c, Plain) else r
                for c, r in zip(calls, results)]

    def _evalsha(self, call: Call | Plain) -> tuple[Any, ...]:
        """The command that sends ``call`` (a ``Plain`` command is sent as it is)."""
        if isinstance(call, Plain):
            return call
        name, keys, args = call
        return ("EVALSHA", self.scripts[name].sha, len(keys), *keys, *args)

    def _outcome(self, client: Any, call: Call) -> Any:
        """``run``, with a refusal or an error reply returned instead of raised."""
        try:
            return self.run(client, *call)
        except (errors.EmqError, ResponseError) as exc:
            return exc

    def _pipeline(self, client: Any, calls: Sequence[Call | Plain]) -> list[Any]:
        pipe = client.pipeline(transaction=False)
        for c in calls:
            # execute_command, not pipe.evalsha: a cluster pipeline blocks the method
            # (it cannot route it in general) but routes the command by its keys
            pipe.execute_command(*self._evalsha(c))
        return list(pipe.execute(raise_on_error=False))


class Stream:
    """Script calls (and ``Plain`` commands) written to one connection as they come and
    read back together, in order: the server runs each call while the caller makes the
    next, and the replies wait in the socket (a window of steps,
    emq_kit/check/window.py). ``NOSCRIPT`` is settled once everything sent is read
    (``ScriptSet.settle_all``). A cluster client
    routes each command by its keys: there the calls wait and go as one pipeline at
    ``receive``. A stream holds its connection from the first ``send`` to ``receive``;
    ``close`` drops what was sent and not read, with the connection."""

    def __init__(self, scripts: ScriptSet, client: Any) -> None:
        self.scripts, self.client = scripts, client
        self.pool = getattr(client, "connection_pool", None)
        self.calls: list[Call | Plain] = []  # sent (or held, on a cluster) and not read
        self.conn: Any = None
        self.reading: tuple[list[Call | Plain], list[Any]] = ([], [])  # the last receive's calls, replies read
        self.stalled: Any = None  # the connection a receive timed out on, its replies still coming

    def send(self, calls: Sequence[Call | Plain]) -> None:
        """Write ``calls`` now, after those sent before them."""
        self.calls.extend(calls)
        if self.pool is None or not calls:
            return
        if self.conn is None:
            self.conn = self.pool.get_connection()
        try:
            self.conn.send_packed_command(packed(self.conn, [self.scripts._evalsha(c) for c in calls]))
        except BaseException:
            self.close()
            raise

    def receive(self) -> list[Any]:
        """The result of every call sent since the last ``receive``, in order: an answer or
        an exception instance (refusals as ``EmqError``)."""
        calls, self.calls = self.calls, []
        if self.pool is None:
            return self.scripts.settle_all(self.client, calls, self.scripts._pipeline(self.client, calls))
        conn, self.conn = self.conn, None
        self.reading = (calls, [])
        if conn is not None:
            read_replies(self.pool, conn, len(calls), self.reading[1], stalled=self._stalled)
        return self.scripts.settle_all(self.client, calls, list(self.reading[1]))

    def _stalled(self, conn: Any) -> None:
        self.stalled = conn

    def read_after_stall(self) -> list[Any] | None:
        """After the last ``receive`` timed out (a call that never returned, CC-9, since
        stopped): every reply of its calls, read on, as ``receive`` gives them (fewer if
        the read breaks off again); None when there is nothing to read on, or a reply
        met ``NOSCRIPT`` (it was never run again)."""
        conn, self.stalled = self.stalled, None
        if conn is None:
            return None
        calls, replies = self.reading
        try:
            read_replies(self.pool, conn, len(calls) - len(replies), replies)
        except Exception:  # noqa: BLE001 - what was read stays in ``replies``
            pass
        if any(isinstance(r, NoScriptError) for r in replies):
            return None
        return self.scripts.settle_all(self.client, calls[:len(replies)], list(replies))

    def close(self) -> None:
        """Drop the calls sent and not read: their connection is closed, never handed
        back with replies in it."""
        self.calls.clear()
        for conn in (self.conn, self.stalled):
            if conn is not None and self.pool is not None:
                conn.disconnect()
                self.pool.release(conn)
        self.conn = self.stalled = None


def read_replies(pool: Any, conn: Any, n: int, results: list[Any] | None = None, *,
                 stalled: Callable[[Any], None] | None = None) -> list[Any]:
    """``n`` replies read off ``conn`` in order (appended to ``results``: those read
    before a read that broke off stay there), an error reply as its exception (read, so
    the socket stays in step). ``conn`` goes back to ``pool`` however the read ends,
    closed if it broke off; but a read that timed out hands it, open, to ``stalled``
    when given (the replies may still come)."""
    results = [] if results is None else results
    try:
        for _ in range(n):
            try:
                results.append(conn.read_response(disconnect_on_error=False))
            except ResponseError as exc:
                results.append(exc)
    except RedisTimeout:
        if stalled is None:
            conn.disconnect()
            pool.release(conn)
        else:
            stalled(conn)
        raise
    except BaseException:
        conn.disconnect()
        pool.release(conn)
        raise
    pool.release(conn)
    return results


PLAIN = frozenset((str, bytes, int))
"""The values hiredis packs as redis-py's encoder does (UTF-8 strict, a decimal)."""


def packed(conn: Any, commands: Sequence[tuple[Any, ...]]) -> Any:
    """``commands`` (each named by one word: ``EVALSHA``, ``TIME``) in RESP, for
    ``conn.send_packed_command``: packed by hiredis at once when every value is a plain
    str, bytes or int and ``conn`` encodes in strict UTF-8, byte for byte what
    ``conn.pack_commands`` makes, which spends most of a call's packing on its encoder;
    otherwise by ``conn.pack_commands``."""
    encoder = conn.encoder
    if encoder.encoding == "utf-8" and encoder.encoding_errors == "strict" and all(
            type(v) in PLAIN for command in commands for v in command):
        return [b"".join([hiredis.pack_command(command) for command in commands])]
    return conn.pack_commands(commands)


def refusal(exc: ResponseError) -> Exception:
    """The ``EmqError`` an error reply names (``errors.parse_reply``), else ``exc``."""
    mapped = errors.parse_reply(str(exc))
    return mapped if mapped is not None else exc


def ms_of(time_reply: Sequence[Any]) -> int:
    """A ``TIME`` reply (seconds, microseconds; as redis-py parses it or raw) in ms (CLK-1)."""
    sec, usec = time_reply
    return int(sec) * 1000 + int(usec) // 1000

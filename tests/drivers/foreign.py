"""A foreign port: a queue of its own (in memory, serverless, its own argument checks
read from specs/transitions.json as any port reads them), not our client, our scripts or
our model, behind the driver protocol. It differs from the contract in six independent
ways, each on unless conformed:

    empty-queue       accepts an empty queue name (KS-3)
    lease-bound       no upper bound on lease_ms (claim, extend)
    complete-settled  complete of an attempt already settled by retry answers ok and
                      deletes the row (T-complete)
    extend-dead       extend of a dead job's last attempt revives it into active (T-extend)
    claim-orphan      claim of a pending member with no row makes it a row (T-claim-5)
    reprocess         reprocess is missing: not offered at init

It has no lane ops (optional for a port): its lane cells are not implemented.

Planted defects, each off unless planted (``--plant a,b``), for the report's verdicts:

    kind-as-arg       a malformed or foreign job id is refused with EMQARG, not EMQKIND, on
                      every op that takes an id: one cause, many ops (ID-7)
    reap-uncapped     reap ignores max_attempts: a lease that expired goes back to pending
                      however many attempts it had (T-reap); only an expired lease shows it
    batch-counts      counts inside a batch request (DP-20) answers the counts as they were
                      when the batch began: a difference no step-by-step replay reproduces

    python tests/drivers/foreign.py [--conform all | --conform a,b,...] [--plant a,b,...]
                                    [--store memory | --store server] [--fence VALUE]

With ``--store server`` the port keeps its queues on the server ``init`` names, in the
contract's keyspace (specs/transitions.json ``keys``), with its own code: each call reads
the queue's locations, counters and the rows it asks for, runs the same logic as in
memory and writes back what changed. It reads ``TIME`` when a call carries no ``now``
(``--clock server``), fences ``{emq}:version`` as a client does, never checks a key's
type (a key of another type fails the call with the server's ``WRONGTYPE``) and sends
no batch. With ``--fence VALUE`` (in memory) it reports that it runs under
``{emq}:version`` = VALUE (another wire version than the contract's: a seventh
difference, KS-6).

FOREIGN_CONFORM and FOREIGN_PLANT in the environment are read the same way when there is
no flag.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any, Iterator, NamedTuple

from emq_kit.ports.protocol import LANE_OPS
from emq_kit.ports.reference_driver import Driver
from emq_model.errors import from_code
from emq_model.snapshot import Snapshot

DEVIATIONS = ("empty-queue", "lease-bound", "complete-settled", "extend-dead", "claim-orphan", "reprocess")
PLANTS = ("kind-as-arg", "reap-uncapped", "batch-counts")
TABLE = json.loads((Path(__file__).resolve().parents[2] / "specs" / "transitions.json").read_text("utf-8"))
LIMITS, TYPES, OPS = TABLE["limits"], TABLE["types"], TABLE["ops"]
DIGITS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
STATE = {loc: d["state"] for loc, d in TABLE["locations"].items()}
ON: set[str] = set(DEVIATIONS)
BATCHED: dict[str, dict[str, int]] = {}  # batch-counts: each queue's counts when the batch began


def refuse(code: str, why: str) -> None:
    raise from_code(code, why)


def checked(type_name: str, name: str, value: Any) -> Any:
    """One value against its type in the table, or the type's refusal."""
    t = TYPES[type_name]
    if type_name == "job_id":
        code = "EMQARG" if "kind-as-arg" in ON else "EMQKIND"  # planted: the id namespace unchecked
        if not isinstance(value, str) or not re.fullmatch(r"JOB[0-9A-Za-z]{11}", value):
            refuse(code, f"not a JOB id: {value!r}")
        n = 0
        for ch in value[3:]:
            n = n * 62 + DIGITS.index(ch)
        if n > LIMITS["snowflake_max"]:
            refuse(code, f"{value} overflows")
        return value
    if type_name in ("payload", "text"):
        if isinstance(value, str):
            try:
                value = value.encode("utf-8")
            except UnicodeEncodeError:
                refuse("EMQARG", f"{name} is not UTF-8")
        if not isinstance(value, bytes):
            refuse("EMQARG", f"{name} must be bytes")
        cap = t.get("max_bytes")
        if cap is not None and len(value) > LIMITS.get(cap, cap):
            refuse("EMQARG", f"{name} is too long")
        return value
    if "values" in t:
        if value not in t["values"]:
            refuse("EMQARG", f"{name} is not one of {t['values']}")
        return value
    lo, hi = (LIMITS.get(b, b) if isinstance(b, str) else b for b in (t["min"], t["max"]))
    if type_name == "lease" and "lease-bound" in ON:
        hi = float("inf")  # deviation: any lease is accepted
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        refuse("EMQARG", f"{name} must be an integer in [{lo}, {hi}]")
    return value


def args_of(op: str, given: dict[str, Any]) -> dict[str, Any]:
    """Every argument in table order (CC-5), then the clock."""
    out = {}
    for a in OPS[op]["args"]:
        v = given.get(a["name"], a.get("default"))
        out[a["name"]] = None if v is None and a.get("optional") else checked(a["type"], a["name"], v)
    if OPS[op]["clock"]:
        out["now"] = checked("time", "now", given.get("now"))
    return out


class Job(NamedTuple):
    id: str
    payload: bytes
    token: int


class ForeignQueue:
    """One queue: where[id] = (location, score); rows[id] = fields."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.where: dict[str, tuple[str, int]] = {}
        self.rows: dict[str, dict[str, bytes]] = {}
        self.completed = self.failed = 0
        self.last_dropped: tuple[str, ...] = ()

    def _put(self, job_id: str, loc: str, score: int) -> None:
        self.where[job_id] = (loc, score)
        self.rows[job_id]["state"] = STATE[loc].encode()

    def _first(self, loc: str, now: int | None = None) -> list[str]:
        found = [(s, i.encode()) for i, (where, s) in self.where.items() if where == loc and (now is None or s <= now)]
        return [i.decode() for _, i in sorted(found)]

    def _attempt(self, job_id: str, token: int, locs: tuple[str, ...]) -> dict[str, bytes]:
        row = self.rows.get(job_id)
        if row is None or self.where.get(job_id, (None,))[0] not in locs or int(row["attempts"]) != token:
            refuse("EMQSTALE", f"no live attempt {token} of {job_id}")
        return row

    def enqueue(self, **given: Any) -> str:
        a = args_of("enqueue", given)
        if a["id"] in self.rows or a["id"] in self.where:
            return "duplicate"
        self.rows[a["id"]] = {"attempts": b"0", "payload": a["payload"]}
        self._put(a["id"], "pending", 0)
        return "enqueued"

    def schedule(self, **given: Any) -> str:
        a = args_of("schedule", given)
        if (a["run_at"] is None) == (a["delay_ms"] is None):
            refuse("EMQARG", "one of run_at and delay_ms")
        if a["id"] in self.rows or a["id"] in self.where:
            return "duplicate"
        self.rows[a["id"]] = {"attempts": b"0", "payload": a["payload"]}
        self._put(a["id"], "schedule", a["run_at"] if a["run_at"] is not None else a["now"] + a["delay_ms"])
        return "scheduled"

    def claim(self, **given: Any) -> Job | None:
        a = args_of("claim", given)
        dropped = []
        for job_id in self._first("pending"):
            if job_id not in self.rows:
                if "claim-orphan" not in ON:
                    del self.where[job_id]
                    dropped.append(job_id)
                    continue
                self.rows[job_id] = {"attempts": b"0", "payload": b""}  # deviation: a row from nothing
            row = self.rows[job_id]
            row["attempts"] = str(int(row["attempts"]) + 1).encode()
            self._put(job_id, "active", a["now"] + a["lease_ms"])
            self.last_dropped = tuple(dropped)
            return Job(job_id, row["payload"], int(row["attempts"]))
        self.last_dropped = tuple(dropped)
        return None

    def complete(self, **given: Any) -> str:
        a = args_of("complete", given)
        if a["id"] not in self.rows:
            return "gone"
        settled = ("schedule", "dead") if "complete-settled" in ON else ()
        self._attempt(a["id"], a["token"], ("active", "pending") + settled)
        self.where.pop(a["id"], None)
        del self.rows[a["id"]]
        self.completed += 1
        return "ok"

    def retry(self, **given: Any) -> str:
        a = args_of("retry", given)
        row = self._attempt(a["id"], a["token"], ("active", "pending"))
        row["last_error"] = a["error"]
        if int(row["attempts"]) < a["max_attempts"]:
            self._put(a["id"], "schedule", a["now"] + a["delay_ms"])
            return "scheduled"
        self._put(a["id"], "dead", 0)
        self.failed += 1
        return "dead"

    def extend(self, **given: Any) -> str:
        a = args_of("extend", given)
        self._attempt(a["id"], a["token"], ("active", "dead") if "extend-dead" in ON else ("active",))
        self._put(a["id"], "active", a["now"] + a["lease_ms"])
        return "ok"

    def _pump(self, loc: str, a: dict[str, Any], cap: int | None) -> int:
        moved = 0
        for job_id in self._first(loc, a["now"])[: a["limit"]]:
            row = self.rows.get(job_id)
            if row is None:
                del self.where[job_id]
                continue
            if cap is not None and int(row["attempts"]) >= cap:
                row["last_error"] = b"lease expired"
                self._put(job_id, "dead", 0)
                self.failed += 1
            else:
                self._put(job_id, "pending", 0)
            moved += 1
        return moved

    def promote(self, **given: Any) -> int:
        return self._pump("schedule", args_of("promote", given), None)

    def reap(self, **given: Any) -> int:
        a = args_of("reap", given)
        return self._pump("active", a, None if "reap-uncapped" in ON else a["max_attempts"])

    def reprocess(self, **given: Any) -> str:
        a = args_of("reprocess", given)
        if a["id"] not in self.rows or self.where.get(a["id"], (None,))[0] != "dead":
            refuse("EMQSTATE", f"{a['id']} is not dead")
        self._put(a["id"], "pending", 0)
        return "ok"

    def remove(self, **given: Any) -> str:
        a = args_of("remove", given)
        loc = self.where.get(a["id"], (None,))[0]
        if loc == "active":
            refuse("EMQLOCK", f"{a['id']} is active")
        if loc is None and a["id"] not in self.rows:
            return "gone"
        self.where.pop(a["id"], None)
        self.rows.pop(a["id"], None)
        return "ok"

    def browse(self, **given: Any) -> list[str]:
        a = args_of("browse", given)
        return sorted(self._first("pending"), key=str.encode, reverse=True)[: a["n"]]

    def counts(self, **given: Any) -> dict[str, int]:
        args_of("counts", given)
        if "batch-counts" in ON and self.name in BATCHED:
            return BATCHED[self.name]
        return self.tally()

    def tally(self) -> dict[str, int]:
        return {loc: sum(1 for where, _ in self.where.values() if where == loc) for loc in STATE}

    def state(self, **given: Any) -> str:
        a = args_of("state", given)
        loc = self.where.get(a["id"], (None,))[0]
        return loc or ("unknown" if a["id"] in self.rows else "absent")

    def job(self, **given: Any) -> dict[str, bytes] | None:
        a = args_of("job", given)
        row = self.rows.get(a["id"])
        return dict(row) if row is not None else None

    def snapshot(self) -> Snapshot:
        locations = {loc: [(i, s) for i, (where, s) in self.where.items() if where == loc] for loc in STATE}
        return Snapshot.build(self.name, locations, self.rows, self.completed, self.failed)


class ForeignStore:
    """The port's whole store: its queues by name."""

    fenced: str | None = None  # the fence it claims (--fence)

    def __init__(self) -> None:
        self.queues: dict[str, ForeignQueue] = {}

    def fence(self) -> str | None:
        return self.fenced

    def queue(self, name: Any) -> ForeignQueue:
        if not isinstance(name, str) or len(name.encode("utf-8", "surrogatepass")) > LIMITS["queue_max_bytes"] or (
                name == "" and "empty-queue" not in ON) or any(
                ch in "{}" or ch.isspace() or not ch.isprintable() for ch in name):
            refuse("EMQARG", f"bad queue name {name!r}")
        return self.queues.setdefault(name, ForeignQueue(name))

    def snapshot(self, name: str) -> Snapshot:
        return self.queue(name).snapshot()

    def forget_row(self, name: str, job_id: str) -> None:
        self.queue(name).rows.pop(job_id, None)

    def reset(self) -> None:
        self.queues.clear()

    def close(self) -> None:
        self.queues.clear()


class Rows(MutableMapping):
    """A queue's rows on the server, each read the first time the port asks for it."""

    def __init__(self, read: Any) -> None:
        self.read, self.seen, self.before = read, {}, {}

    def _row(self, job_id: str) -> dict[str, bytes] | None:
        if job_id not in self.seen:
            row = self.read(job_id)
            self.seen[job_id], self.before[job_id] = row, None if row is None else dict(row)
        return self.seen[job_id]

    def __getitem__(self, job_id: str) -> dict[str, bytes]:
        row = self._row(job_id)
        if row is None:
            raise KeyError(job_id)
        return row

    def __setitem__(self, job_id: str, row: dict[str, bytes]) -> None:
        self._row(job_id)
        self.seen[job_id] = row

    def __delitem__(self, job_id: str) -> None:
        if self._row(job_id) is None:
            raise KeyError(job_id)
        self.seen[job_id] = None

    def __iter__(self) -> Iterator[str]:
        return iter([i for i, row in self.seen.items() if row is not None])

    def __len__(self) -> int:
        return sum(1 for row in self.seen.values() if row is not None)

    def changed(self) -> dict[str, dict[str, bytes] | None]:
        return {i: row for i, row in self.seen.items() if row != self.before.get(i)}


class ServerQueue:
    """One queue kept on the server: each op reads it, runs ``ForeignQueue``'s logic and
    writes back what changed, in one MULTI."""

    def __init__(self, store: "ServerStore", name: str) -> None:
        self.store, self.name = store, name
        self.head = "emq:{" + name + "}:"
        self.last_dropped: tuple[str, ...] = ()

    def __getattr__(self, op: str) -> Any:
        if op not in OPS:
            raise AttributeError(op)

        def call(**given: Any) -> Any:
            if OPS[op]["clock"] and self.store.clock == "server":
                sec, usec = self.store.r.time()
                given = {**given, "now": sec * 1000 + usec // 1000}
            queue, before = self.load()
            answer = getattr(queue, op)(**given)
            self.save(queue, before)
            self.last_dropped = queue.last_dropped
            return answer

        return call

    def load(self) -> tuple[ForeignQueue, tuple[dict[str, tuple[str, int]], int, int]]:
        r, queue = self.store.r, ForeignQueue(self.name)
        for loc in STATE:
            for member, score in r.zrange(self.head + loc, 0, -1, withscores=True):
                queue.where[member.decode("utf-8", "surrogateescape")] = (loc, int(score))

        def read(job_id: str) -> dict[str, bytes] | None:
            fields = r.hgetall(self.head + "job:" + job_id)
            return {f.decode(): v for f, v in fields.items()} or None

        queue.rows = Rows(read)  # type: ignore[assignment]
        queue.completed = int(r.hget(self.head + "metrics:completed", "count") or 0)
        queue.failed = int(r.hget(self.head + "metrics:failed", "count") or 0)
        return queue, (dict(queue.where), queue.completed, queue.failed)

    def save(self, queue: ForeignQueue, before: tuple[dict[str, tuple[str, int]], int, int]) -> None:
        was, completed, failed = before
        tx = self.store.r.pipeline(transaction=True)
        for loc in STATE:
            mine = {i: s for i, (where, s) in queue.where.items() if where == loc}
            if mine != {i: s for i, (where, s) in was.items() if where == loc}:
                tx.delete(self.head + loc)
                if mine:
                    tx.zadd(self.head + loc, {i.encode("utf-8", "surrogateescape"): s for i, s in mine.items()})
        for job_id, row in queue.rows.changed().items():  # type: ignore[attr-defined]
            tx.delete(self.head + "job:" + job_id)
            if row:
                tx.hset(self.head + "job:" + job_id, mapping=row)
        for name, old, new in (("completed", completed, queue.completed), ("failed", failed, queue.failed)):
            if new != old:
                tx.hset(self.head + "metrics:" + name, "count", new)
        tx.execute()


class ServerStore(ForeignStore):
    """The port's queues on a server (``--store server``)."""

    clock = "virtual"  # the clock mode init names

    def __init__(self, url: str) -> None:
        import redis

        super().__init__()
        self.r = redis.Redis.from_url(url)

    def fence(self) -> str | None:
        key = TABLE["keys"]["version"]
        self.r.set(key, TABLE["wire_version"], nx=True)
        held = self.r.get(key)
        return None if held is None else held.decode()

    def queue(self, name: Any) -> Any:
        super().queue(name)  # its checks of the name
        return ServerQueue(self, name)

    def reset(self) -> None:
        """The kit has deleted the run's keys (DP-10): nothing is kept between calls."""

    def close(self) -> None:
        self.r.close()


class ForeignDriver(Driver):
    """The reference driver loop, with the port's own batch (batch-counts) and, on a
    server, no batch at all."""

    def _init(self, args: dict[str, Any]) -> dict[str, Any]:
        ServerStore.clock = args.get("clock") or "virtual"
        return super()._init(args)

    def ops(self) -> list[str]:
        return super().ops() if self.serverless else list(self.offered)

    def _batch(self, args: dict[str, Any]) -> list[dict[str, Any]]:
        BATCHED.update({name: self.backend.queue(name).tally() for name in self.queues})
        try:
            return super()._batch(args)
        finally:
            BATCHED.clear()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conform", default=os.environ.get("FOREIGN_CONFORM", ""),
                        help="deviations to turn off, comma-separated, or 'all'")
    parser.add_argument("--plant", default=os.environ.get("FOREIGN_PLANT", ""),
                        help=f"planted defects to turn on, comma-separated: {', '.join(PLANTS)}")
    parser.add_argument("--store", choices=("memory", "server"), default="memory",
                        help="where the queues live: in the driver (serverless) or on the server init names")
    parser.add_argument("--fence", help="the {emq}:version value it reports running under (default: none)")
    given = parser.parse_args()
    conform = {c for c in given.conform.split(",") if c}
    conform = set(DEVIATIONS) if "all" in conform else conform
    if conform - set(DEVIATIONS):
        parser.error(f"unknown deviations {sorted(conform - set(DEVIATIONS))}; known: {', '.join(DEVIATIONS)}")
    plant = {p for p in given.plant.split(",") if p}
    if plant - set(PLANTS):
        parser.error(f"unknown plants {sorted(plant - set(PLANTS))}; known: {', '.join(PLANTS)}")
    ON.difference_update(conform)
    ON.update(plant)
    serverless = given.store == "memory"
    # It has no lanes (lifecycle.md §10 is optional for a port): its lane cells are not implemented.
    missing = {"reprocess"} & ON | set(LANE_OPS)
    ops = [op for op in Driver("", None, serverless=serverless).offered if op not in missing]
    ForeignStore.fenced = given.fence
    store = (lambda url: ForeignStore()) if serverless else ServerStore
    ForeignDriver("foreign", store, serverless=serverless, ops=ops).serve(sys.stdin, sys.stdout)


if __name__ == "__main__":
    main()

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

    python tests/drivers/foreign.py [--conform all | --conform a,b,...] [--fence VALUE]

With ``--fence VALUE`` it reports that it runs under ``{emq}:version`` = VALUE (another
wire version than the contract's: a seventh difference, KS-6).

FOREIGN_CONFORM in the environment is read the same way when there is no flag.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from typing import Any, NamedTuple

from emq_kit.ports.protocol import LANE_OPS
from emq_kit.ports.reference_driver import Driver
from emq_model.errors import from_code
from emq_model.snapshot import Snapshot

DEVIATIONS = ("empty-queue", "lease-bound", "complete-settled", "extend-dead", "claim-orphan", "reprocess")
TABLE = json.loads((Path(__file__).resolve().parents[2] / "specs" / "transitions.json").read_text("utf-8"))
LIMITS, TYPES, OPS = TABLE["limits"], TABLE["types"], TABLE["ops"]
DIGITS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
STATE = {loc: d["state"] for loc, d in TABLE["locations"].items()}
ON: set[str] = set(DEVIATIONS)


def refuse(code: str, why: str) -> None:
    raise from_code(code, why)


def checked(type_name: str, name: str, value: Any) -> Any:
    """One value against its type in the table, or the type's refusal."""
    t = TYPES[type_name]
    if type_name == "job_id":
        if not isinstance(value, str) or not re.fullmatch(r"JOB[0-9A-Za-z]{11}", value):
            refuse("EMQKIND", f"not a JOB id: {value!r}")
        n = 0
        for ch in value[3:]:
            n = n * 62 + DIGITS.index(ch)
        if n > LIMITS["snowflake_max"]:
            refuse("EMQKIND", f"{value} overflows")
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
        return self._pump("active", a, a["max_attempts"])

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conform", default=os.environ.get("FOREIGN_CONFORM", ""),
                        help="deviations to turn off, comma-separated, or 'all'")
    parser.add_argument("--fence", help="the {emq}:version value it reports running under (default: none)")
    given = parser.parse_args()
    conform = {c for c in given.conform.split(",") if c}
    conform = set(DEVIATIONS) if "all" in conform else conform
    if conform - set(DEVIATIONS):
        parser.error(f"unknown deviations {sorted(conform - set(DEVIATIONS))}; known: {', '.join(DEVIATIONS)}")
    ON.difference_update(conform)
    # It has no lanes (lifecycle.md §10 is optional for a port): its lane cells are not implemented.
    missing = {"reprocess"} & ON | set(LANE_OPS)
    ops = [op for op in Driver("", None, serverless=True).offered if op not in missing]
    ForeignStore.fenced = given.fence
    Driver("foreign", lambda url: ForeignStore(), serverless=True, ops=ops).serve(sys.stdin, sys.stdout)


if __name__ == "__main__":
    main()

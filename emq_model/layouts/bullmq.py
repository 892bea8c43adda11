"""The BullMQ-shaped layout: a pure model of BullMQ's scripts (specs/layouts/bullmq.md).

A job's state is the key its id sits in: ``wait`` and ``active`` are lists, ``delayed``,
``prioritized``, ``completed`` and ``failed`` sorted sets, the job a hash. ``BullModel``
predicts, for each modelled transition, the reply of BullMQ's script and the
``Projection`` of the keyspace after it (the locations with their order and scores, the
stall candidates, the locks, the counters and the hash fields with lifecycle meaning).
No I/O; the clock is an argument of every call that reads it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any, Iterable, Mapping

from ..errors import ArgError
from ..snapshot import Entries, norm_score, zset_order

DELAY_SHIFT = 0x1000  # a delayed score is due_ms * 4096 + sequence (getDelayedScore)
PRIORITY_SHIFT = 0x100000000  # a prioritized score is priority * 2^32 + counter
PROMOTE_LIMIT = 1000  # promoteDelayedJobs moves at most this many per call

OK = 0
MISSING_JOB = -1
MISSING_LOCK = -2
NOT_IN_STATE = -3
LOCK_MISMATCH = -6
NO_LOCK = "0"  # BullMQ's token for work done without a lock: no lock is set or checked


@cache
def table() -> dict[str, Any]:
    """The layout's contract table, ``specs/layouts/bullmq.json``."""
    node = resources.files("emq_specs").joinpath("layouts").joinpath("bullmq.json")
    return json.loads(node.read_text("utf-8"))


LOCATIONS: tuple[str, ...] = tuple(table()["locations"])
LIST_LOCATIONS: tuple[str, ...] = tuple(k for k, v in table()["locations"].items() if v["type"] == "list")
ZSET_LOCATIONS: tuple[str, ...] = tuple(k for k, v in table()["locations"].items() if v["type"] == "zset")
HASH_FIELDS: tuple[str, ...] = tuple(table()["hash_fields"])
KEEP_ALL = -1  # keepJobs.count -1: a finished job stays in its set with its hash
PRIORITY_LIMIT = 2_097_152  # BullMQ's client refuses priorities above 2^21


def _is_int(v: Any, low: int, high: int | None = None) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= low and (high is None or v <= high)


# What each argument named in the table's ops (and the retention step) may be (the model
# accepts what the scripts accept; the target refuses the rest before it sends anything,
# and a trace's step holding another value is refused when it is read).
ARG_RULES = {
    "job_id": lambda v: isinstance(v, str) and (v == "" or (v.isdigit() and not v.startswith("0"))),
    "token": lambda v: isinstance(v, str) and v != "" and v.isprintable(),
    "now": lambda v: _is_int(v, 0, 2**40),
    "delay": lambda v: _is_int(v, 0, 2**32),
    "priority": lambda v: _is_int(v, 0, PRIORITY_LIMIT),
    "lifo": lambda v: isinstance(v, bool),
    "reset": lambda v: isinstance(v, bool),
    "state": lambda v: v in ("failed", "completed"),
    "value": lambda v: isinstance(v, str),
    "reason": lambda v: isinstance(v, str),
    # the retention step's keepJobs counts (KEEP_ALL, 0, or how many to keep), packed by msgpack
    "completed": lambda v: _is_int(v, KEEP_ALL, 2**32),
    "failed": lambda v: _is_int(v, KEEP_ALL, 2**32),
}


def arg_ok(op: str, name: str, value: Any) -> bool:
    """Whether ``value`` may be the argument ``name`` of ``op`` (``ARG_RULES``; ``""``
    asks add for an auto id, and only add)."""
    return ARG_RULES[name](value) and not (name == "job_id" and value == "" and op != "add")


def check_args(op: str, args: tuple[Any, ...]) -> None:
    """``ArgError`` unless ``args`` fit the op's argument list in bullmq.json: ids are
    canonical integers (BQ-12; ``""`` asks add for an auto id, and only add), the clock a
    non-negative integer of milliseconds."""
    names = table()["ops"][op]["args"]
    if len(args) != len(names):
        raise ArgError(f"{op} takes {', '.join(names)}")
    for name, value in zip(names, args):
        if not arg_ok(op, name, value):
            raise ArgError(f"{op}: bad {name} {value!r}")


@dataclass(frozen=True)
class Retention:
    """keepJobs.count per finished set: -1 keeps every job, 0 deletes the job (hash and
    all) as it finishes, n > 0 keeps the newest n (removeJobsByMaxCount)."""

    completed: int = KEEP_ALL
    failed: int = KEEP_ALL

    def of(self, target: str) -> int:
        return self.completed if target == "completed" else self.failed


@dataclass(frozen=True)
class Projection:
    """The keyspace as the layout's contract sees it. ``lists`` are head-to-tail,
    ``zsets`` in server order with exact scores, ``hashes`` only the ``HASH_FIELDS``
    present (values as the server's text)."""

    lists: tuple[tuple[str, tuple[str, ...]], ...]
    zsets: tuple[tuple[str, Entries], ...]
    stalled: tuple[str, ...]
    locks: tuple[tuple[str, str], ...]
    hashes: tuple[tuple[str, tuple[tuple[str, str], ...]], ...]
    counter: int
    priority_counter: int

    def location(self, name: str) -> tuple[str, ...]:
        """The ids in a location, in server order."""
        for loc, ids in self.lists:
            if loc == name:
                return ids
        return tuple(m for m, _ in dict(self.zsets)[name])

    def hash(self, job_id: str) -> dict[str, str] | None:
        """The projected fields of a job's hash, ``None`` when the hash does not exist."""
        for jid, fields in self.hashes:
            if jid == job_id:
                return dict(fields)
        return None

    def to_json(self) -> dict[str, Any]:
        return {
            "lists": {k: list(v) for k, v in self.lists},
            "zsets": {k: [[m, s] for m, s in v] for k, v in self.zsets},
            "stalled": list(self.stalled),
            "locks": dict(self.locks),
            "hashes": {k: dict(v) for k, v in self.hashes},
            "counter": self.counter,
            "priority_counter": self.priority_counter,
        }

    @classmethod
    def build(
        cls,
        lists: Mapping[str, Iterable[str]],
        zsets: Mapping[str, Iterable[tuple[str, float | int]]],
        stalled: Iterable[str],
        locks: dict[str, str],
        hashes: dict[str, dict[str, str]],
        counter: int,
        priority_counter: int,
    ) -> "Projection":
        """The canonical value: locations in table order, sets and maps sorted."""
        return cls(
            lists=tuple((k, tuple(lists.get(k, ()))) for k in LIST_LOCATIONS),
            zsets=tuple(
                (k, zset_order((m, norm_score(s)) for m, s in zsets.get(k, ()))) for k in ZSET_LOCATIONS
            ),
            stalled=tuple(sorted(stalled)),
            locks=tuple(sorted(locks.items())),
            hashes=tuple(
                (jid, tuple(sorted((f, v) for f, v in h.items() if f in HASH_FIELDS)))
                for jid, h in sorted(hashes.items())
            ),
            counter=counter,
            priority_counter=priority_counter,
        )


def diff(expected: Projection, seen: Projection) -> list[str]:
    """The parts of two projections that differ, one line each (empty when equal)."""
    a, b = expected.to_json(), seen.to_json()
    out = []
    for part in a:
        if isinstance(a[part], dict):
            for k in sorted(set(a[part]) | set(b[part])):
                if a[part].get(k) != b[part].get(k):
                    out.append(f"{part}.{k}: model {a[part].get(k)!r} != seen {b[part].get(k)!r}")
        elif a[part] != b[part]:
            out.append(f"{part}: model {a[part]!r} != seen {b[part]!r}")
    return out


def check_projection(p: Projection) -> list[str]:
    """The layout's invariants (BQ-INV-1..4 of bullmq.md) on one projection: the
    violations, empty when it holds. ``hash_iff_located`` holds under any Retention the
    run uses, because every modelled op deletes the hash exactly when it drops the id."""
    bad = []
    seen: dict[str, list[str]] = {}
    for loc in LOCATIONS:
        ids = p.location(loc)
        if len(set(ids)) != len(ids):
            bad.append(f"BQ-INV-2 duplicate member in {loc}: {list(ids)}")
        for jid in ids:
            seen.setdefault(jid, []).append(loc)
    for jid, locs in seen.items():
        if len(locs) != 1:
            bad.append(f"BQ-INV-1 job {jid} in {locs}")
    hashed = {jid for jid, _ in p.hashes}
    for jid in sorted(hashed ^ set(seen)):
        bad.append(f"BQ-INV-3 job {jid}: hash {'without' if jid in hashed else 'missing for'} a location")
    active = set(p.location("active"))
    locked = {jid for jid, _ in p.locks}
    for jid in sorted(locked - active):
        bad.append(f"BQ-INV-4 lock on {jid}, which is not active")
    return bad


@dataclass
class BullModel:
    """BullMQ's scripts as a pure state machine (one queue, no flows, no limiter, no
    pause). Each op returns the script's reply as the target decodes it."""

    retention: Retention = field(default_factory=Retention)
    max_stalled: int = 1
    wait: list[str] = field(default_factory=list)  # head first, as LRANGE 0 -1
    active: list[str] = field(default_factory=list)
    zsets: dict[str, dict[str, int]] = field(default_factory=lambda: {k: {} for k in ZSET_LOCATIONS})
    stalled: set[str] = field(default_factory=set)
    locks: dict[str, str] = field(default_factory=dict)
    hashes: dict[str, dict[str, str]] = field(default_factory=dict)
    counter: int = 0
    priority_counter: int = 0

    # -- reading ------------------------------------------------------------

    def projection(self) -> Projection:
        return Projection.build(
            {"wait": self.wait, "active": self.active},
            {k: v.items() for k, v in self.zsets.items()},
            self.stalled,
            self.locks,
            self.hashes,
            self.counter,
            self.priority_counter,
        )

    def location(self, job_id: str) -> str | None:
        """Where the job sits, ``None`` when nowhere."""
        if job_id in self.wait:
            return "wait"
        if job_id in self.active:
            return "active"
        for loc, members in self.zsets.items():
            if job_id in members:
                return loc
        return None

    def _ordered(self, loc: str) -> list[str]:
        return [m for m, _ in zset_order(self.zsets[loc].items())]

    # -- helpers the scripts share --------------------------------------------

    def _hincr(self, job_id: str, name: str) -> int:
        h = self.hashes[job_id]
        h[name] = str(int(h.get(name, "0")) + 1)
        return int(h[name])

    def _prioritize(self, job_id: str, priority: int) -> None:
        """addJobWithPriority: the score folds in the INCR'd priority counter."""
        self.priority_counter += 1
        self.zsets["prioritized"][job_id] = priority * PRIORITY_SHIFT + self.priority_counter % PRIORITY_SHIFT

    def _delayed_score(self, now: int, delay: int) -> int:
        """getDelayedScore: jobs due the same millisecond keep their arrival order in the
        low 12 bits, capped at 4095."""
        due = now + delay if delay > 0 else now
        low, high = due * DELAY_SHIFT, (due + 1) * DELAY_SHIFT - 1
        same = [s for s in self.zsets["delayed"].values() if low <= s <= high]
        if not same:
            return low
        return high if max(same) >= high else max(same) + 1

    def _promote_due(self, now: int) -> None:
        """promoteDelayedJobs: every job due by ``now`` (at most 1000), in score order,
        to the head of wait or into prioritized; its delay field becomes 0."""
        delayed = self.zsets["delayed"]
        due = [m for m in self._ordered("delayed") if delayed[m] <= (now + 1) * DELAY_SHIFT - 1][:PROMOTE_LIMIT]
        for jid in due:
            del delayed[jid]
        for jid in due:
            self._requeue(jid)
            self.hashes.setdefault(jid, {})["delay"] = "0"

    def _release(self, job_id: str, token: str) -> int:
        """removeLock: the caller's token must hold the lock; the lock and the stall
        candidacy go. ``NO_LOCK`` skips the check and touches neither (BQ-18)."""
        if token == NO_LOCK:
            return OK
        held = self.locks.get(job_id)
        if held != token:
            return LOCK_MISMATCH if held is not None else MISSING_LOCK
        del self.locks[job_id]
        self.stalled.discard(job_id)
        return OK

    def _leave_active(self, job_id: str, token: str, fields: dict[str, str]) -> int:
        """The preamble moveToFinished, retryJob and moveToDelayed share: the hash must
        exist, the token must hold the lock (released here), the worker's fields are
        written, and only then must the job be in active (so a -3 keeps those writes)."""
        if job_id not in self.hashes:
            return MISSING_JOB
        code = self._release(job_id, token)
        if code:
            return code
        self.hashes[job_id].update(fields)
        return OK if self._lrem_last(self.active, job_id) else NOT_IN_STATE

    def _requeue(self, job_id: str) -> None:
        """addJobInTargetList (LPUSH: the head of wait, last in line) or, for a job with a
        priority, addJobWithPriority."""
        priority = int(self.hashes.get(job_id, {}).get("priority", "0"))
        if priority == 0:
            self.wait.insert(0, job_id)
        else:
            self._prioritize(job_id, priority)

    def _lrem_last(self, items: list[str], job_id: str) -> bool:
        """LREM key -1 id: the occurrence nearest the tail."""
        for i in range(len(items) - 1, -1, -1):
            if items[i] == job_id:
                del items[i]
                return True
        return False

    def _drop_job(self, job_id: str) -> None:
        """removeJobKeys: the hash goes (its lock is gone already)."""
        self.hashes.pop(job_id, None)

    # -- the transitions ----------------------------------------------------

    def add(self, job_id: str, now: int, delay: int = 0, priority: int = 0, lifo: bool = False) -> str:
        """addStandardJob / addDelayedJob / addPrioritizedJob (Scripts.addJob's choice):
        the counter always counts; an existing custom id is a duplicate and changes
        nothing else. An auto id is not checked: it overwrites fields of a hash an
        integer custom id already made (BQ-12)."""
        self.counter += 1
        jid = job_id or str(self.counter)
        if job_id and jid in self.hashes:
            return jid
        self.hashes.setdefault(jid, {}).update(timestamp=str(now), delay=str(delay), priority=str(priority))
        if delay > 0:
            self.zsets["delayed"][jid] = self._delayed_score(now, delay)
        elif priority > 0:
            self._prioritize(jid, priority)
        elif lifo:
            self.wait.append(jid)
        else:
            self.wait.insert(0, jid)
        return jid

    def take(self, token: str, now: int) -> tuple[str | None, int]:
        """moveToActive: promote what is due, then the tail of wait, else the lowest
        score of prioritized (an empty prioritized resets the priority counter). The
        reply is (id, 0), or (None, the next delayed due ms or 0)."""
        self._promote_due(now)
        if self.wait:
            jid = self.wait.pop()
        elif self.zsets["prioritized"]:
            jid = self._ordered("prioritized")[0]
            del self.zsets["prioritized"][jid]
        else:
            self.priority_counter = 0
            order = self._ordered("delayed")
            return None, (self.zsets["delayed"][order[0]] // DELAY_SHIFT if order else 0)
        self.active.insert(0, jid)
        if token != NO_LOCK:
            self.locks[jid] = token
        h = self.hashes.setdefault(jid, {})
        h["processedOn"] = str(now)
        self._hincr(jid, "ats")
        return jid, 0

    def _finish(self, job_id: str, token: str, now: int, target: str, prop: str, value: str) -> int:
        """moveToFinished: lock, fields, then the active check (so a -3 keeps the
        earlier writes, as the script does), then attemptsMade and the finished set
        under the retention."""
        # the worker's fieldsToUpdate carry the reason of a failure, nothing for a success
        code = self._leave_active(job_id, token, {"failedReason": value} if target == "failed" else {})
        if code:
            return code
        self._hincr(job_id, "atm")
        keep = self.retention.of(target)
        if keep == 0:
            self._drop_job(job_id)
            return OK
        self.zsets[target][job_id] = now
        h = self.hashes[job_id]
        h[prop] = value
        h["finishedOn"] = str(now)
        if target == "failed":
            h.pop("defa", None)
        if keep > 0:
            newest_first = list(reversed(self._ordered(target)))
            for old in newest_first[keep:]:
                del self.zsets[target][old]
                self._drop_job(old)
        return OK

    def complete(self, job_id: str, token: str, now: int, value: str) -> int:
        """moveToFinished to completed."""
        return self._finish(job_id, token, now, "completed", "returnvalue", value)

    def fail(self, job_id: str, token: str, now: int, reason: str) -> int:
        """moveToFinished to failed (the attempts are spent, or the failure is final)."""
        return self._finish(job_id, token, now, "failed", "failedReason", reason)

    def retry(self, job_id: str, token: str, now: int, reason: str) -> int:
        """retryJob: a failed attempt with attempts left and no backoff; promotes what is
        due first, whatever the outcome."""
        self._promote_due(now)
        code = self._leave_active(job_id, token, {"failedReason": reason})
        if code:
            return code
        self._requeue(job_id)
        self._hincr(job_id, "atm")
        return OK

    def backoff(self, job_id: str, token: str, now: int, delay: int, reason: str) -> int:
        """moveToDelayed: a failed attempt with attempts left, due again at now + delay."""
        code = self._leave_active(job_id, token, {"failedReason": reason})
        if code:
            return code
        score = self._delayed_score(now, delay)
        self._hincr(job_id, "atm")
        self.hashes[job_id]["delay"] = str(delay)
        self.zsets["delayed"][job_id] = score
        return OK

    def promote(self, job_id: str) -> int:
        """promote: a delayed job to the head of wait (or into prioritized) now."""
        if self.zsets["delayed"].pop(job_id, None) is None:
            return NOT_IN_STATE
        self._requeue(job_id)
        self.hashes.setdefault(job_id, {})["delay"] = "0"
        return OK

    def check_stalled(self, now: int) -> list[str]:
        """moveStalledJobsToWait: each candidate (in SMEMBERS order, ascending for the
        integer ids the run uses) still active without a lock counts a stall, gets a
        deferred failure past max_stalled, and goes to the tail of wait (next in line);
        then every active id becomes a candidate."""
        stalling = sorted(self.stalled, key=_smembers_key)
        self.stalled = set()
        moved = []
        for jid in stalling:
            if jid in self.locks or not _lrem_first(self.active, jid):
                continue
            if self._hincr(jid, "stc") > self.max_stalled:
                self.hashes[jid]["defa"] = "job stalled more than allowable limit"
            self.wait.append(jid)
            moved.append(jid)
        self.stalled = set(self.active)
        return moved

    def extend(self, job_id: str, token: str) -> int:
        """extendLock: only the holder's token renews; the job stops being a candidate."""
        if self.locks.get(job_id) != token:
            return 0
        self.stalled.discard(job_id)
        return 1

    def remove(self, job_id: str) -> int:
        """removeJob: refused (0) while a lock is held; otherwise the first location in
        BullMQ's search order loses the id and the hash goes (1, also for no job)."""
        if job_id in self.locks:
            return 0
        for loc in ("completed", "waiting-children", "delayed", "failed", "prioritized"):
            if self.zsets[loc].pop(job_id, None) is not None:
                break
        else:
            if job_id in self.wait:
                self.wait.remove(job_id)
            elif job_id in self.active:
                self.active.remove(job_id)
        self._drop_job(job_id)
        return 1

    def reprocess(self, job_id: str, state: str, reset: bool = False) -> int:
        """reprocessJob (Job.retry): a finished job back to the head of wait (or into
        prioritized), its finish fields cleared; attemptsMade/Started kept unless reset.
        ``stc`` and ``defa`` are not cleared."""
        if job_id not in self.hashes:
            return MISSING_JOB
        if self.zsets[state].pop(job_id, None) is None:
            return NOT_IN_STATE
        h = self.hashes[job_id]
        gone = ["finishedOn", "processedOn", "failedReason" if state == "failed" else "returnvalue"]
        for name in gone + (["atm", "ats"] if reset else []):
            h.pop(name, None)
        self._requeue(job_id)
        return 1

    def lapse(self, job_id: str) -> int:
        """The lock's TTL runs out (its holder died): not a script, the passage of time."""
        return 1 if self.locks.pop(job_id, None) is not None else 0


def _lrem_first(items: list[str], job_id: str) -> bool:
    """LREM key 1 id: the occurrence nearest the head."""
    if job_id in items:
        items.remove(job_id)
        return True
    return False


def _smembers_key(job_id: str) -> tuple[int, str]:
    """SMEMBERS order of a small set of canonical integers (an intset): ascending."""
    return (int(job_id), job_id) if job_id.lstrip("-").isdigit() else (0, job_id)

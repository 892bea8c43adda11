"""QueueModel — the oracle: one queue's four locations, rows and counters in memory, with
the clock as a parameter. Every method is one rule of specs/lifecycle.md §6; a refused
call raises an ``EmqError`` and changes nothing (all checks come before the first write).
"""

from __future__ import annotations

import copy
import dataclasses
import weakref
from collections import deque
from typing import Any, Iterable, Iterator, NamedTuple

from . import errors, spec
from .change import Change, apply, sizes_of
from .keyspace import KEY_TYPES, check_queue, key_of, outside, prefix
from .lanes import LaneClaimed, Lanes
from .snapshot import Entries, Place, Row, Score, Snapshot, norm_score, small_of, zset_order

PENDING, ACTIVE, SCHEDULE, DEAD = spec.LOCATIONS
LEASE_EXPIRED = b"lease expired"
RECENT = 16
"""How many of its last changes the model keeps, for a reader that follows it a few
snapshots behind (the kit's kept orders, emq_kit/check/orders.py)."""
LANE_TYPED = ("ring", "paused", "glimit", "gactive")
"""The fixed lane keys typed with a lane a call takes (its serviceability reads them)."""


class _Written(dict[str, Any]):
    """A dict that notes in ``noted`` every key it writes, or its ``owner`` when it has
    one (a row's fields note the row's id): the model knows which members and rows each
    of its transitions touched (INC-1)."""

    def __init__(self, noted: set[str], owner: str | None = None, fields: Any = ()) -> None:
        super().__init__(fields)
        self.noted, self.owner = noted, owner

    def _note(self, key: Any) -> None:
        self.noted.add(key if self.owner is None else self.owner)

    def __setitem__(self, key: str, value: Any) -> None:
        self._note(key)
        super().__setitem__(key, value)

    def __delitem__(self, key: str) -> None:
        self._note(key)
        super().__delitem__(key)

    def pop(self, key: str, *default: Any) -> Any:
        self._note(key)
        return super().pop(key, *default)

    def setdefault(self, key: str, default: Any = None) -> Any:
        self._note(key)
        return super().setdefault(key, default)

    def clear(self) -> None:
        for key in self:
            self._note(key)
        super().clear()

    def update(self, *given: Any, **more: Any) -> None:
        for key, value in dict(*given, **more).items():
            self[key] = value

    def popitem(self) -> tuple[str, Any]:
        key, value = super().popitem()
        self._note(key)
        return key, value


class _Rows(_Written):
    """The rows: each row written in is kept as a ``_Written`` owned by its id, so a
    field written in place notes the row too."""

    def __setitem__(self, key: str, value: Any) -> None:
        super().__setitem__(key, _Written(self.noted, key, value))


class Claimed(NamedTuple):
    """A claim's answer: the id, its payload and the fencing token (the row's attempts)."""

    id: str
    payload: bytes
    token: int


class QueueModel:
    """The reference model of one queue. Locations map id -> score; rows map id -> fields.

    ``last_dropped`` holds the orphans the last claim dropped (T-claim-5). ``spoiled``
    holds the keys an operator overwrote with another type (``spoil``), by their name in
    ``transitions.json``'s ``keys`` (``("row", id)`` for a row, ``("lane", group)`` for a
    lane): a call touching one is refused with ``EMQTYPE`` (CC-8), and the snapshot shows
    them as stray keys until ``mend`` puts their content back. ``strays`` holds the keys
    an operator wrote outside the grammar under the queue's prefix (``write_stray``), by
    their suffix: no call touches them, every snapshot reports them until ``drop_stray``.
    """

    def __init__(self, queue: str) -> None:
        self.queue = check_queue(queue)
        self.lanes = Lanes()
        self._noted = self.lanes.noted  # every id written since the last snapshot (INC-1)
        self._last: Snapshot | None = None  # that snapshot, which ``snapshot`` brings up to date
        self.last_change: tuple[Snapshot, Change, Snapshot] | None = None
        """The last ``snapshot()``'s: the one before, the change that brought it up to date
        (it may name more ids than moved, INC-1) and the one after; None when built whole."""
        self._recent: deque[tuple[weakref.ref[Snapshot], Change]] = deque(maxlen=RECENT)  # see ``changes_since``
        self.sets: dict[str, dict[str, int]] = {loc: _Written(self._noted) for loc in spec.LOCATIONS}
        self.rows: dict[str, dict[str, bytes]] = _Rows(self._noted)
        self.completed = 0
        self.failed = 0
        self.last_dropped: tuple[str, ...] = ()
        self.spoiled: set[str | tuple[str, str]] = set()
        self._lost: dict[str | tuple[str, str], Any] = {}  # what each spoil overwrote, for ``mend``
        self._shown: dict[str, Entries | None] = {}  # a spoiled location's entries in the last snapshot
        self._whole: dict[str, Entries | None] = {}  # locations replaced at once since it (INC-1's whole)
        self.strays: set[str] = set()

    # -- helpers ---------------------------------------------------------------------

    def _where(self, job_id: str) -> str | None:
        """The location of the id; a grouped row's id in its lane is ``pending`` (LANE-1).
        An orphan in a lane is found by no one: its row held its group."""
        loc = next((loc for loc in spec.LOCATIONS if job_id in self.sets[loc]), None)
        group = self._group(job_id)
        if loc is None and group is not None and self.lanes.holds(group, job_id):
            return PENDING
        return loc

    def _group(self, job_id: str) -> str | None:
        row = self.rows.get(job_id)
        raw = row.get("group") if row is not None else None
        return raw.decode() if raw is not None else None

    def _vacate(self, job_id: str) -> str | None:
        """Take the id out of its location (its lane, for a grouped pending job); a grouped
        job leaving active releases its lane's count. Returns its group."""
        loc, group = self._where(job_id), self._group(job_id)
        if group is not None and loc == PENDING:
            self.lanes.discard(group, job_id)
        elif loc is not None:
            del self.sets[loc][job_id]
        if group is not None and loc == ACTIVE:
            self.lanes.release(group)
        return group

    def _exists(self, job_id: str) -> bool:
        return job_id in self.rows or self._where(job_id) is not None

    def _move(self, job_id: str, to: str, score: int) -> None:
        """Move the id to ``to``; a grouped job's pending is its lane, its entering active
        counts in ``gactive``, and its lane's place on the ring follows (LANE-3, LANE-4)."""
        group = self._vacate(job_id)
        if group is not None and to == PENDING:
            self.lanes.add(group, job_id)
        else:
            self.sets[to][job_id] = score
        self.rows[job_id]["state"] = spec.STATE_OF[to].encode()
        if group is not None:
            if to == ACTIVE:
                self.lanes.acquire(group)
            self.lanes.settle(group)

    def _due(self, loc: str, now: int, limit: int) -> list[str]:
        due = [(m, s) for m, s in self.sets[loc].items() if s <= now]
        return [m for m, _ in zset_order(due)[:limit]]

    def _live_attempt(self, job_id: str, token: int, allowed: tuple[str, ...]) -> None:
        """Refuse with EMQSTALE unless the row exists, the id is in ``allowed`` and the
        token equals attempts (T-complete-2/3, T-retry-1..3, T-extend-1)."""
        row = self.rows.get(job_id)
        if row is None:
            raise errors.StaleError(f"{job_id} is gone")
        loc = self._where(job_id)
        if loc not in allowed:
            raise errors.StaleError(f"{job_id} is in {loc or 'no location'}; its attempt was settled")
        attempts = int(row["attempts"])
        if token != attempts:
            raise errors.StaleError(f"token {token} does not match attempts {attempts}")

    def _delete(self, job_id: str) -> None:
        """The id leaves its location and its row goes; its lane's place on the ring follows."""
        group = self._vacate(job_id)
        self.rows.pop(job_id, None)
        if group is not None:
            self.lanes.settle(group)

    def _typed(self, op: str, id: str | None = None, rows: Iterable[str] = (), *, group: str | None = None,
               lanes: Iterable[str] = (), plan: Iterable[str | tuple[str, str]] = ()) -> None:
        """CC-8: refuse with EMQTYPE if a key ``op`` touches is spoiled: its fixed keys in
        table order, then the row of ``id`` (KEYS[7]) or ``rows`` (the rows of the ids a
        claim, promote or reap would take, or a batch's items); ``lane`` is the lane of
        the call's ``group``; ``lanes`` the lane keys of the ``lanes`` groups the call
        takes a job of (a grouped claim's ``plan``: the lanes and rows its walk types)."""
        if not self.spoiled:
            return
        for name in spec.entry(op)["touches"]:
            keys: list[str | tuple[str, str]]
            if name == "row" and id is not None:
                keys = [("row", id)]
            elif name in ("row", "rows"):
                keys = [("row", r) for r in rows]
            elif name == "lane":
                keys = [("lane", group)] if group is not None else []
            elif name == "lanes":
                keys = [*plan]
                for g in lanes:
                    keys += [("lane", g), *LANE_TYPED]
            else:
                keys = [name]
            for key in keys:
                if key in self.spoiled:
                    raise errors.WrongTypeError(f"{self._key_name(key)} holds another type than {self._type_of(key)}")

    def _groups(self, ids: Iterable[str]) -> list[str]:
        """The groups of the ids' rows, for the "lanes" a call takes (a plain job has none)."""
        return [g for g in (self._group(i) for i in ids) if g is not None]

    def _key_name(self, key: str | tuple[str, str]) -> str:
        if isinstance(key, tuple):
            return key_of(self.queue, key[0], id=key[1], group=key[1])
        return key_of(self.queue, key)

    @staticmethod
    def _type_of(key: str | tuple[str, str]) -> str:
        return KEY_TYPES[key[0] if isinstance(key, tuple) else key]

    def _fresh(self, job_id: str, payload: bytes, loc: str, score: int) -> None:
        self.rows[job_id] = {"state": b"", "attempts": b"0", "payload": payload}
        self._move(job_id, loc, score)

    # -- transitions -----------------------------------------------------------------

    def enqueue(self, id: str, payload: bytes | str) -> str:
        """T-enqueue: a new job into pending; ``duplicate`` if the id exists."""
        a = spec.check_args("enqueue", {"id": id, "payload": payload})
        self._typed("enqueue", a["id"])
        if self._exists(a["id"]):
            return "duplicate"
        self._fresh(a["id"], a["payload"], PENDING, 0)
        return "enqueued"

    def schedule(
        self, id: str, payload: bytes | str, *, run_at: int | None = None, delay_ms: int | None = None, now: int
    ) -> str:
        """T-schedule: a new job into schedule at ``run_at`` or ``now + delay_ms``."""
        a = spec.check_args("schedule", {"id": id, "payload": payload, "run_at": run_at, "delay_ms": delay_ms})
        now = spec.check_now(now)
        if (a["run_at"] is None) == (a["delay_ms"] is None):
            raise errors.ArgError("schedule takes exactly one of run_at and delay_ms")
        self._typed("schedule", a["id"])
        if self._exists(a["id"]):
            return "duplicate"
        at = a["run_at"] if a["run_at"] is not None else now + a["delay_ms"]
        self._fresh(a["id"], a["payload"], SCHEDULE, at)
        return "scheduled"

    def claim(self, lease_ms: int, *, now: int) -> Claimed | None:
        """T-claim: the lowest pending job becomes active until ``now + lease_ms``;
        orphans met on the way are dropped and recorded in ``last_dropped``."""
        a = spec.check_args("claim", {"lease_ms": lease_ms})
        now = spec.check_now(now)
        jobs = self._claim(1, a["lease_ms"], now)
        return jobs[0] if jobs else None

    def _walk(self, n: int) -> list[str]:
        """The members of pending a claim of up to ``n`` jobs meets, lowest first: every
        orphan up to the ``n``-th member with a row (CC-8 types their rows first)."""
        met: list[str] = []
        found = 0
        for job_id, _ in self.ordered(PENDING):
            if found == n:
                break
            met.append(job_id)
            found += job_id in self.rows or ("row", job_id) in self.spoiled
        return met

    def ordered(self, loc: str) -> Iterator[tuple[str, Score]]:
        """The entries of location ``loc`` in a sorted set's order (``zset_order``), as
        they are read: the last snapshot's when nothing was written since (INC-3: it is
        the one built whole), so a deep queue is not sorted again nor copied."""
        settled = self.settled
        return settled.walk(loc) if settled is not None else iter(zset_order(self.sets[loc].items()))

    def _claim(self, n: int, lease_ms: int, now: int) -> list[Claimed]:
        """Up to ``n`` claims with one ``now``: the pending members met are typed first
        (CC-8), then the orphans are dropped (``last_dropped``) and the rest claimed."""
        met = self._walk(n)
        self._typed("claim", rows=met)
        jobs: list[Claimed] = []
        for job_id in met:
            if job_id not in self.rows:
                del self.sets[PENDING][job_id]
                continue
            row = self.rows[job_id]
            row["attempts"] = str(int(row["attempts"]) + 1).encode()
            self._move(job_id, ACTIVE, now + lease_ms)
            jobs.append(Claimed(job_id, row["payload"], int(row["attempts"])))
        self.last_dropped = tuple(m for m in met if m not in self.rows)
        return jobs

    def complete(self, id: str, token: int) -> str:
        """T-complete: the live attempt settles; ``gone`` if there is no row."""
        a = spec.check_args("complete", {"id": id, "token": token})
        self._typed("complete", a["id"], lanes=self._groups([a["id"]]))
        if a["id"] not in self.rows:
            return "gone"
        self._live_attempt(a["id"], a["token"], (ACTIVE, PENDING))
        self._delete(a["id"])
        self.completed += 1
        return "ok"

    def retry(self, id: str, token: int, *, delay_ms: int, max_attempts: int, error: bytes | str, now: int) -> str:
        """T-retry: the live attempt failed; to schedule, or to dead past ``max_attempts``."""
        a = spec.check_args(
            "retry", {"id": id, "token": token, "delay_ms": delay_ms, "max_attempts": max_attempts, "error": error}
        )
        now = spec.check_now(now)
        self._typed("retry", a["id"], lanes=self._groups([a["id"]]))
        self._live_attempt(a["id"], a["token"], (ACTIVE, PENDING))
        row = self.rows[a["id"]]
        row["last_error"] = a["error"]
        if int(row["attempts"]) < a["max_attempts"]:
            self._move(a["id"], SCHEDULE, now + a["delay_ms"])
            return "scheduled"
        self._move(a["id"], DEAD, 0)
        self.failed += 1
        return "dead"

    def extend(self, id: str, token: int, lease_ms: int, *, now: int) -> str:
        """T-extend: the active lease becomes ``now + lease_ms``."""
        a = spec.check_args("extend", {"id": id, "token": token, "lease_ms": lease_ms})
        now = spec.check_now(now)
        self._typed("extend", a["id"])
        self._live_attempt(a["id"], a["token"], (ACTIVE,))
        self.sets[ACTIVE][a["id"]] = now + a["lease_ms"]
        return "ok"

    def promote(self, *, now: int, limit: int = 100) -> int:
        """T-promote: due scheduled jobs (score <= now) back to pending; the count moved."""
        a = spec.check_args("promote", {"limit": limit})
        now = spec.check_now(now)
        due = self._due(SCHEDULE, now, a["limit"])
        self._typed("promote", rows=due, lanes=self._groups(due))
        moved = 0
        for job_id in due:
            if job_id not in self.rows:
                del self.sets[SCHEDULE][job_id]
                continue
            self._move(job_id, PENDING, 0)
            moved += 1
        return moved

    def reap(self, *, now: int, limit: int = 100, max_attempts: int | None = None) -> int:
        """T-reap: expired leases (score <= now) back to pending, or to dead when
        ``max_attempts`` is given and reached; the count moved."""
        a = spec.check_args("reap", {"limit": limit, "max_attempts": max_attempts})
        now = spec.check_now(now)
        due = self._due(ACTIVE, now, a["limit"])
        self._typed("reap", rows=due, lanes=self._groups(due))
        moved = 0
        for job_id in due:
            row = self.rows.get(job_id)
            if row is None:
                del self.sets[ACTIVE][job_id]
                continue
            if a["max_attempts"] is not None and int(row["attempts"]) >= a["max_attempts"]:
                row["last_error"] = LEASE_EXPIRED
                self._move(job_id, DEAD, 0)
                self.failed += 1
            else:
                self._move(job_id, PENDING, 0)
            moved += 1
        return moved

    def reprocess(self, id: str) -> str:
        """T-reprocess: a dead job back to pending, attempts kept."""
        a = spec.check_args("reprocess", {"id": id})
        self._typed("reprocess", a["id"], lanes=self._groups([a["id"]]))
        if a["id"] not in self.rows or self._where(a["id"]) != DEAD:
            raise errors.StateError(f"{a['id']} is not dead")
        self._move(a["id"], PENDING, 0)
        return "ok"

    def remove(self, id: str) -> str:
        """T-remove: a job that is not active is deleted; ``gone`` if it does not exist."""
        a = spec.check_args("remove", {"id": id})
        self._typed("remove", a["id"], lanes=self._groups([a["id"]]))
        loc = self._where(a["id"])
        if loc == ACTIVE:
            raise errors.LockError(f"{a['id']} is active")
        if not self._exists(a["id"]):
            return "gone"
        self._delete(a["id"])
        return "ok"

    # -- lanes (lifecycle.md §10) ------------------------------------------------------

    def lane_enqueue(self, id: str, payload: bytes | str, group: str) -> str:
        """T-lane_enqueue: a new job into its group's lane; ``duplicate`` if the id exists
        (or already sits in that lane)."""
        a = spec.check_args("lane_enqueue", {"id": id, "payload": payload, "group": group})
        self._typed("lane_enqueue", a["id"], group=a["group"])
        if self._exists(a["id"]) or self.lanes.holds(a["group"], a["id"]):
            return "duplicate"
        self.rows[a["id"]] = {"state": b"", "attempts": b"0", "payload": a["payload"], "group": a["group"].encode()}
        self._move(a["id"], PENDING, 0)
        return "enqueued"

    def lane_claim(self, lease_ms: int, *, now: int) -> LaneClaimed | None:
        """T-lane_claim: the ring turns one step and the head of that lane becomes active;
        ``None`` when no lane is serviceable. Orphans met go to ``last_dropped``."""
        a = spec.check_args("lane_claim", {"lease_ms": lease_ms})
        now = spec.check_now(now)
        self._typed("lane_claim", plan=self.claim_plan(weighted=False))
        jobs = self._turn(a["lease_ms"], now, weighted=False)
        return jobs[0] if jobs else None

    def lane_wclaim(self, lease_ms: int, *, now: int) -> list[LaneClaimed]:
        """T-lane_wclaim: the ring turns one step and up to min(weight, depth, headroom)
        heads of that lane become active, in lane order; ``[]`` when none is serviceable."""
        a = spec.check_args("lane_wclaim", {"lease_ms": lease_ms})
        now = spec.check_now(now)
        self._typed("lane_wclaim", plan=self.claim_plan(weighted=True))
        return self._turn(a["lease_ms"], now, weighted=True)

    def _most(self, group: str, weighted: bool) -> int:
        """How many heads a turn on ``group`` serves at most: 1, or its weight for a
        weighted claim, never past its limit's headroom (LANE-5, LANE-6)."""
        most = self.lanes.weight(group) if weighted else 1
        if group in self.lanes.glimit:
            most = min(most, self.lanes.glimit[group] - self.lanes.gactive.get(group, 0))
        return most

    def claim_plan(self, *, weighted: bool) -> list[str | tuple[str, str]]:
        """The keys a grouped claim types before its first write (CC-8, "lanes"): the
        ring walked from its head as the turns will, each lane and the rows of the
        members a turn would meet, until a lane that serves a job (or a spoiled key,
        where the walk stops)."""
        keys: list[str | tuple[str, str]] = []
        for group in self.lanes.ring:
            keys.append(("lane", group))
            if ("lane", group) in self.spoiled:
                return keys
            found, most = 0, self._most(group, weighted)
            for job_id in self.lanes.members(group):
                if found >= most:
                    break
                keys.append(("row", job_id))
                if ("row", job_id) in self.spoiled:
                    return keys
                row = self.rows.get(job_id)
                found += row is not None and row.get("group") == group.encode()
            if found:
                return keys
        return keys

    def _turn(self, lease_ms: int, now: int, *, weighted: bool) -> list[LaneClaimed]:
        """One turn of the ring (T-lane_claim-1..4): a lane that yields nothing but orphans
        is emptied, leaves the ring, and the next turn is taken."""
        dropped: list[str] = []
        jobs: list[LaneClaimed] = []
        while not jobs:
            group = self.lanes.turn()
            if group is None:
                break
            most = self.lanes.weight(group) if weighted else 1
            while len(jobs) < most and self.lanes.serviceable(group):
                job_id = self.lanes.head(group)
                row = self.rows.get(job_id)
                if row is None or row.get("group") != group.encode():  # an orphan (T-lane_claim-2)
                    self.lanes.discard(group, job_id)
                    dropped.append(job_id)
                    continue
                row["attempts"] = str(int(row["attempts"]) + 1).encode()
                self._move(job_id, ACTIVE, now + lease_ms)
                jobs.append(LaneClaimed(job_id, row["payload"], int(row["attempts"]), group))
            self.lanes.settle(group)
        self.last_dropped = tuple(dropped)
        return jobs

    def _configured(self, op: str, args: dict[str, Any]) -> dict[str, Any]:
        """A lane config call's checked arguments, its keys typed (CC-8)."""
        a = spec.check_args(op, args)
        self._typed(op, group=a["group"])
        return a

    def lane_pause(self, group: str) -> str:
        """T-lane_pause: the lane is served no more and leaves the ring."""
        self.lanes.pause(self._configured("lane_pause", {"group": group})["group"])
        return "ok"

    def lane_resume(self, group: str) -> str:
        """T-lane_resume: the lane may be served again; it joins the ring's tail if it is
        serviceable."""
        self.lanes.resume(self._configured("lane_resume", {"group": group})["group"])
        return "ok"

    def lane_limit(self, group: str, n: int) -> str:
        """T-lane_limit: at most ``n`` jobs of the lane active at once (0: no limit)."""
        a = self._configured("lane_limit", {"group": group, "n": n})
        self.lanes.limit(a["group"], a["n"])
        return "ok"

    def lane_weight(self, group: str, w: int) -> str:
        """T-lane_weight: a weighted claim serves up to ``w`` heads of the lane per turn."""
        a = self._configured("lane_weight", {"group": group, "w": w})
        self.lanes.set_weight(a["group"], a["w"])
        return "ok"

    # -- batches: the per-item loop of the op (lifecycle.md §6, "Batches") -------------

    def enqueue_many(self, jobs: Iterable[tuple[str, bytes | str]]) -> list[str]:
        """B-enqueue: ``enqueue`` for each ``(id, payload)``, in order; every item is
        checked before the first one runs (B-1)."""
        items = spec.check_items("enqueue_many", jobs)
        self._typed("enqueue", rows=[item["id"] for item in items])
        return [self.enqueue(**item) for item in items]

    def claim_many(self, n: int, lease_ms: int, *, now: int) -> list[Claimed]:
        """B-claim: ``claim`` up to ``n`` times, stopping at the first ``None``; the jobs
        in claim order. ``last_dropped`` holds every orphan dropped on the way."""
        a = spec.check_args("claim_many", {"n": n, "lease_ms": lease_ms})
        now = spec.check_now(now)
        return self._claim(a["n"], a["lease_ms"], now)

    def complete_many(self, jobs: Iterable[tuple[str, int]]) -> list[str | errors.EmqError]:
        """B-complete: ``complete`` for each ``(id, token)``, in order. An item that is
        refused (``EMQSTALE``) answers its refusal in place, changes nothing, and the next
        item runs (B-2)."""
        items = spec.check_items("complete_many", jobs)
        self._typed("complete", rows=[item["id"] for item in items])
        out: list[str | errors.EmqError] = []
        for item in items:
            try:
                out.append(self.complete(**item))
            except errors.EmqError as err:
                out.append(err)
        return out

    # -- fault injection (not a transition) -------------------------------------------

    def forget_row(self, id: str) -> None:
        """Delete a row's key as an operator would by hand, leaving its member an orphan,
        whatever holds the id (FLT-3): a row spoiled by ``spoil`` goes with the value
        written over it, and a later ``mend`` of it puts nothing back."""
        key = ("row", spec.check_value("job_id", "id", id))
        if key in self.spoiled:
            self.spoiled.discard(key)
            self._lost.pop(key, None)
        self.rows.pop(key[1], None)

    def unspoiled(self, name: str | tuple[str, str]) -> Any:
        """What the key ``name`` holds (``("row", id)`` a row or None, a location's
        members and scores), or held before an operator spoiled it: the queue as it
        is under the operator's damage."""
        if name in self.spoiled:
            return self._lost[name]
        return self._content(name)

    def spoil(self, name: str, id: str | None = None, group: str | None = None) -> None:
        """An operator overwrites a key with another type (``SET``, ``LPUSH``...): its
        content is lost and it is stray until ``mend``; a call touching it is refused
        (CC-8). ``name`` is a key of ``transitions.json`` (``pending``, ``completed``,
        ``ring``...; ``row`` with ``id``, ``lane`` with ``group``)."""
        key = self._spoilable(name, id, group)
        if key in self.spoiled:
            return
        self.spoiled.add(key)
        if name in self.sets:  # moved aside whole, not copied: a deep location costs no more (INC-1)
            settled = self.settled
            self._shown[name] = settled.location(name) if settled is not None else None
            self._lost[key], self.sets[name] = self.sets[name], _Written(self._noted)
            self._whole[name] = ()
            return
        self._lost[key] = copy.deepcopy(self._content(key))
        if name == "row":
            self.rows.pop(key[1], None)
        elif name == "lane":
            self._last = None  # a lane went whole: the next snapshot is built whole
            self.lanes.pending.pop(key[1], None)
        elif name in ("completed", "failed"):
            setattr(self, name, 0)
        else:
            getattr(self.lanes, name).clear()

    def mend(self, name: str, id: str | None = None, group: str | None = None) -> None:
        """The operator puts a spoiled key's content back (DEL, then RESTORE of what was
        there): the key is of its type again, holding what ``spoil`` overwrote."""
        key = self._spoilable(name, id, group)
        if key not in self.spoiled:
            return
        self.spoiled.discard(key)
        lost = self._lost.pop(key)
        if name == "row":
            if lost is not None:
                self.rows[key[1]] = lost
        elif name == "lane":
            self._last = None  # a lane came back whole: the next snapshot is built whole
            if lost:
                self.lanes.pending[key[1]] = lost
        elif name in self.sets:
            shown = self._shown.pop(name)
            if self.sets[name]:  # written while spoiled (no call can: CC-8): each member put back
                self.sets[name].update(lost)
            else:  # the very set put back: the location is what the last snapshot before the spoil showed
                self.sets[name] = lost
                self._whole[name] = shown
        elif name in ("completed", "failed"):
            setattr(self, name, lost)
        elif name == "ring":
            self.lanes.ring[:] = lost
        else:
            held = getattr(self.lanes, name)
            held.clear()
            held.update(lost)

    def write_stray(self, key: str) -> None:
        """An operator writes the key ``emq:{q}:<key>``, which the grammar does not name
        (``ArgError`` for a key it does name): every snapshot reports it as stray, and no
        call reads or changes it, until ``drop_stray``."""
        self.strays.add(self._outside(key))

    def drop_stray(self, key: str) -> None:
        """The operator deletes the stray key ``emq:{q}:<key>``."""
        self.strays.discard(self._outside(key))

    def _outside(self, key: str) -> str:
        if not isinstance(key, str) or not outside(self.queue, prefix(self.queue) + key):
            raise errors.ArgError(f"a stray key is a suffix under {prefix(self.queue)} that the grammar does not "
                                  f"name, not {key!r}")
        return key

    def ids(self) -> set[str]:
        """Every id the queue holds: a row, a member of a location or of a lane."""
        return {*self.rows, *(m for loc in self.sets.values() for m in loc),
                *(m for lane in self.lanes.pending.values() for m in lane)}

    def _spoilable(self, name: str, id: str | None, group: str | None) -> str | tuple[str, str]:
        if name not in KEY_TYPES or (name == "row") != (id is not None) or (name == "lane") != (group is not None):
            raise errors.ArgError(f"spoil takes a key name of {sorted(KEY_TYPES)}, an id with row only "
                                  "and a group with lane only")
        if name == "row":
            return ("row", spec.check_value("job_id", "id", id))
        if name == "lane":
            return ("lane", spec.check_value("group", "group", group))
        return name

    def _content(self, key: str | tuple[str, str]) -> Any:
        if isinstance(key, tuple):
            return (self.rows if key[0] == "row" else self.lanes.pending).get(key[1])
        if key in self.sets:
            return self.sets[key]
        if key in ("completed", "failed"):
            return getattr(self, key)
        return getattr(self.lanes, key)

    # -- reads -----------------------------------------------------------------------

    def browse(self, n: int) -> list[str]:
        """R-browse: the ``n`` newest pending ids, newest first."""
        a = spec.check_args("browse", {"n": n})
        self._typed("browse")
        members = sorted(self.sets[PENDING], key=lambda m: m.encode(), reverse=True)
        return members[: a["n"]]

    def counts(self) -> dict[str, int]:
        """R-counts: the cardinality of each location."""
        self._typed("counts")
        return {loc: len(members) for loc, members in self.sets.items()}

    def state(self, id: str) -> str:
        """R-state: the location holding the id, ``unknown`` or ``absent``."""
        a = spec.check_args("state", {"id": id})
        self._typed("state", a["id"], lanes=self._groups([a["id"]]))
        loc = self._where(a["id"])
        if loc is not None:
            return loc
        return "unknown" if a["id"] in self.rows else "absent"

    def job(self, id: str) -> dict[str, bytes] | None:
        """R-job: the row's fields, or ``None``."""
        a = spec.check_args("job", {"id": id})
        self._typed("job", a["id"])
        row = self.rows.get(a["id"])
        return dict(row) if row is not None else None

    def snapshot(self) -> Snapshot:
        """The whole queue as an immutable value (the type emq_live reads too): the last
        one brought up to date by the ids written since (INC-3), equal to ``built()``."""
        if self._last is None:
            snap, self.last_change = self.built(), None
            self._recent.clear()
        else:
            made = self._change(self._last)
            snap = apply(self._last, made)
            self.last_change = (self._last, dataclasses.replace(made, sizes=sizes_of(snap)), snap)
            self._recent.append((weakref.ref(self._last), self.last_change[1]))  # not kept alive by it
        self._last = snap
        self._noted.clear()
        self._whole.clear()
        return snap

    def changes_since(self, at: Snapshot) -> list[Change] | None:
        """The changes that brought the snapshot ``at`` (by identity) up to the last one,
        in order, when they are among the last ``RECENT``; else None."""
        out: list[Change] = []
        for before, change in reversed(self._recent):
            out.append(change)
            if before() is at:
                return out[::-1]
        return [] if self._last is at else None

    @property
    def settled(self) -> Snapshot | None:
        """The last snapshot when nothing was written since (the model is in it), else
        None."""
        return self._last if not self._noted and not self._whole else None

    def built(self) -> Snapshot:
        """The whole queue built from scratch: what ``snapshot`` must equal."""
        return Snapshot.build(self.queue, {k: v.items() for k, v in self.sets.items()}, self.rows,
                              self.completed, self.failed, self._stray(),
                              {g: m.items() for g, m in self.lanes.pending.items()}, self.lanes.ring,
                              self.lanes.paused, self.lanes.hashes())

    def _stray(self) -> list[str]:
        """The keys a snapshot lists as stray: the spoiled ones and the operator's own."""
        if not self.spoiled and not self.strays:  # as in most steps: no key to name
            return []
        return [*(self._key_name(k) for k in self.spoiled), *(prefix(self.queue) + k for k in self.strays)]

    def _change(self, last: Snapshot) -> Change:
        """The change since ``last``: every id written since, at its places and row now."""
        members: dict[tuple[Place, str], Score | None] = {}
        rows: dict[str, Row | None] = {}
        whole = {loc: self._replaced(loc, shown) for loc, shown in self._whole.items()}
        was = [(place, held) for place, held in last.index.items() if place not in whole]
        sets = [(loc, held) for loc, held in self.sets.items() if loc not in whole]
        lanes, held_rows = self.lanes.pending.items(), self.rows
        for job_id in self._noted:  # plain loops: a step notes a few ids, each looked up in a few places
            for place, held in was:
                if job_id in held:
                    members[(place, job_id)] = None
            for loc, in_set in sets:
                if job_id in in_set:
                    members[(loc, job_id)] = norm_score(in_set[job_id])
            for g, in_lane in lanes:
                if job_id in in_lane:
                    members[(("lane", g), job_id)] = norm_score(in_lane[job_id])
            row = held_rows.get(job_id)
            rows[job_id] = None if row is None else tuple(sorted(row.items()))
        small = small_of(self.completed, self.failed, self._stray(), self.lanes.ring, self.lanes.paused,
                         self.lanes.hashes())
        return Change(self.queue, members, rows, {}, small, whole)  # sizes: ``snapshot`` adds them after

    def _replaced(self, loc: str, shown: Entries | None) -> Entries:
        """The entries of ``loc``, replaced whole since the last snapshot: ``shown`` (what
        the spoil left or the mend put back) unless a member was written since."""
        held = self.sets[loc]
        if shown is not None and len(shown) == len(held) and not any(job in held for job in self._noted):
            return shown
        return zset_order((m, norm_score(score)) for m, score in held.items())

    def __repr__(self) -> str:
        return f"QueueModel({self.queue!r}, counts={self.counts()})"


"""A recorded history of one queue, and the queue's sequential model for checking it.

``Event`` is one call as a soak records it: the op, its arguments, its answer, its real
time interval (``time.monotonic_ns``, one clock for every process of a machine) and, for
ops that read the server clock, the window ``[TIME before, TIME after]`` (ms) that holds
the ``now`` the script used. A ``snapshot`` event is a read of the whole queue (the
read-only snapshot script, atomic), an observation of every job at one instant.

The check (specs/soak.md says why each part is sound):

- **per job**, linearizability (``emq_kit.soak.linearize``) of each job's own ops plus the
  global ops that may move it — reap and promote, whose per-job effect the history does
  not show, so the model lets them move the job or not, as long as its lease or run-at
  may have passed within the server clock windows — and the snapshots that observe it;
- **globally**, claim order: no claim answered another job above, or ``empty`` while, a
  job that was certainly pending and lower during the claim's whole interval.

Pure: no I/O.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from emq_kit.soak import linearize
from emq_kit.soak.linearize import Op
from emq_model import errors, spec
from emq_model.snapshot import Snapshot, canonical_int

PENDING, ACTIVE, SCHEDULE, DEAD = spec.LOCATIONS
ABSENT = "absent"
STALE = errors.STALE

JobState = tuple[str, int, bytes, int, int]
"""(location or ``absent``, attempts, payload, lo, hi): ``[lo, hi]`` holds the score of
an active (lease deadline) or scheduled (run-at) job, in ms; 0, 0 elsewhere."""

INIT: JobState = (ABSENT, 0, b"", 0, 0)

SNAPSHOT = "snapshot"
"""The op name of a recorded snapshot read."""

CLAIMS = ("claim", "lane_claim")
"""The ops that answer a claimed job: the plain claim, and the grouped claim of a lane
(whose choice of job is the ring's, so claim order checks only the plain one)."""


@dataclass(frozen=True)
class Event:
    """One recorded call. ``output`` is the answer in plain data: a string answer or a
    refusal code (``EMQSTALE``), an integer count, ``[id, payload, token]`` or ``None``
    for claim, a ``Snapshot`` for a snapshot read. ``now`` is the server clock window
    of an op that reads the clock (``clock: true`` in transitions.json), else ``None``."""

    process: str
    op: str
    args: dict[str, Any]
    output: Any
    invoke: int
    ret: int
    now: tuple[int, int] | None = None

    def to_json(self) -> dict[str, Any]:
        """A JSON-able form (not for snapshot events)."""
        return {"process": self.process, "op": self.op, "args": self.args, "output": self.output,
                "invoke": self.invoke, "ret": self.ret, "now": list(self.now) if self.now else None}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Event":
        """The inverse of ``to_json``."""
        now = data.get("now")
        return cls(data["process"], data["op"], data["args"], data["output"], data["invoke"], data["ret"],
                   (now[0], now[1]) if now else None)


def payload_text(value: bytes) -> str:
    """Bytes as JSON text, every byte kept (latin-1, as ``Snapshot.to_json``)."""
    return value.decode("latin-1")


def _bytes(value: str | bytes) -> bytes:
    return value if isinstance(value, bytes) else value.encode("latin-1")


# -- events to ops --------------------------------------------------------------------------


INPUTS = {
    "enqueue": ("id", "payload"),
    "schedule": ("id", "payload", "run_at_lo", "run_at_hi"),
    "claim": ("lease_ms", "now_lo", "now_hi"),
    "lane_enqueue": ("id", "payload", "group"),  # a lane's jobs count as pending (INV-1, lifecycle.md §10)
    "lane_claim": ("lease_ms", "now_lo", "now_hi"),  # its group is the lanes report's business
    "complete": ("id", "token"),
    "retry": ("id", "token", "delay_ms", "max_attempts", "now_lo", "now_hi"),
    "extend": ("id", "token", "lease_ms", "now_lo", "now_hi"),
    "reap": ("limit", "max_attempts", "now_lo", "now_hi"),
    "promote": ("limit", "now_lo", "now_hi"),
    "observe": ("serial",),
}
"""The fields of each op's input tuple after its name (``now_*``: the server clock
window, ms)."""


def to_op(event: Event, serial: int) -> Op:
    """The checker's ``Op`` for an event. Inputs carry the server clock window; a
    snapshot's input is ``("observe", serial)`` and its output stays the Snapshot. The
    input tuple is the op's name and its ``INPUTS`` fields, in that order."""
    a, lo_hi = event.args, event.now or (0, 0)
    name, out = event.op, event.output
    if name == SNAPSHOT:
        return Op(event.process, ("observe", serial), out, event.invoke, event.ret)
    if name not in INPUTS or name == "observe":
        raise ValueError(f"no history model for op {name!r}")
    fields: dict[str, Any] = {**a, "now_lo": lo_hi[0], "now_hi": lo_hi[1]}
    if name == "schedule":  # the run-at window
        at = (a["run_at"], a["run_at"]) if a.get("run_at") is not None else (lo_hi[0] + a["delay_ms"], lo_hi[1] + a["delay_ms"])
        fields["run_at_lo"], fields["run_at_hi"] = at
    elif name == "reap":  # a reap may have no cap
        fields.setdefault("max_attempts", None)
    inp = (name, *(_bytes(fields[k]) if k == "payload" else fields[k] for k in INPUTS[name]))
    if name in CLAIMS:  # the claimed payload as bytes
        out = None if out is None else (out[0], _bytes(out[1]), out[2])
    return Op(event.process, inp, out, event.invoke, event.ret)


def _inputs(op: Op) -> tuple[Any, ...]:
    """An op's input tuple: ``to_op`` makes every one a tuple, the op's name first
    (the checker's ``Op`` only needs it hashable)."""
    assert isinstance(op.input, tuple), op.input
    return op.input


def job_of(op: Op) -> str | None:
    """The job an op names (a claim names the job it answered), else ``None``."""
    name = _inputs(op)[0]
    if name in CLAIMS:
        return op.output[0] if op.output is not None else None
    if name in ("enqueue", "lane_enqueue", "schedule", "complete", "retry", "extend"):
        return _inputs(op)[1]
    return None


# -- the per-job model ---------------------------------------------------------------------


def _stale(state: JobState, out: Any) -> tuple[JobState, ...]:
    return (state,) if out == STALE else ()


def _settleable(state: JobState, token: int) -> bool:
    """The token names the live attempt of an active or pending job (T-complete-2/3)."""
    loc, attempts = state[0], state[1]
    return loc in (ACTIVE, PENDING) and token == attempts


def _new(state: JobState, out: Any, answer: str, after: JobState) -> tuple[JobState, ...]:
    """enqueue/schedule: a new job, or ``duplicate`` (T-enqueue-1, T-schedule-2)."""
    if state[0] == ABSENT:
        return (after,) if out == answer else ()
    return (state,) if out == "duplicate" else ()


def step(state: JobState, inp: tuple[Any, ...], out: Any) -> tuple[JobState, ...]:
    """The states one job can be in after ``inp`` answered ``out`` (none: impossible)."""
    loc, attempts, payload, lo, hi = state
    name = inp[0]
    if name in ("enqueue", "lane_enqueue"):
        return _new(state, out, "enqueued", (PENDING, 0, inp[2], 0, 0))
    if name == "schedule":
        return _new(state, out, "scheduled", (SCHEDULE, 0, inp[2], inp[3], inp[4]))
    if name in CLAIMS:  # T-claim-3: this job was the one taken (a plain claim's choice is checked globally)
        lease, now_lo, now_hi = inp[1], inp[2], inp[3]
        _, got_payload, token = out
        if loc == PENDING and token == attempts + 1 and got_payload == payload:
            return ((ACTIVE, token, payload, now_lo + lease, now_hi + lease),)
        return ()
    if name == "complete":
        if loc == ABSENT:
            return (state,) if out == "gone" else ()
        if not _settleable(state, inp[2]):
            return _stale(state, out)
        return (INIT,) if out == "ok" else ()
    if name == "retry":
        _, _, token, delay, cap, now_lo, now_hi = inp
        if loc == ABSENT or not _settleable(state, token):
            return _stale(state, out)
        if attempts < cap:
            return ((SCHEDULE, attempts, payload, now_lo + delay, now_hi + delay),) if out == "scheduled" else ()
        return ((DEAD, attempts, payload, 0, 0),) if out == "dead" else ()
    if name == "extend":
        _, _, token, lease, now_lo, now_hi = inp
        if loc == ACTIVE and token == attempts:
            return ((ACTIVE, attempts, payload, now_lo + lease, now_hi + lease),) if out == "ok" else ()
        return _stale(state, out)
    if name == "reap":  # T-reap: may move this job iff its lease may have expired
        cap, now_hi = inp[2], inp[4]
        if loc == ACTIVE and lo <= now_hi and out >= 1:
            dead = cap is not None and attempts >= cap
            return (state, (DEAD if dead else PENDING, attempts, payload, 0, 0))
        return (state,)
    if name == "promote":  # T-promote: may move this job iff its run-at may have come
        now_hi = inp[3]
        if loc == SCHEDULE and lo <= now_hi and out >= 1:
            return (state, (PENDING, attempts, payload, 0, 0))
        return (state,)
    if name == "observe":
        return (state,) if _observed(state, out) else ()
    return ()


def _observed(state: JobState, seen: Any) -> bool:
    """Does a snapshot's view of the job (``observation``) agree with ``state``?"""
    loc, attempts, _, lo, hi = state
    if seen is None:
        return loc == ABSENT
    seen_loc, seen_attempts, score = seen
    if seen_loc != loc or seen_attempts != attempts:
        return False
    return lo <= score <= hi if loc in (ACTIVE, SCHEDULE) else score == 0


def observations(snapshot: Snapshot) -> dict[str, Any]:
    """Each job of a snapshot as ``(location, attempts, score)``; a job in two sets, in
    none with a row, or without a well-formed row is ``("broken", ...)``, which no state
    matches. Jobs not listed are absent."""
    held: dict[str, list[tuple[str, Any]]] = {}
    for loc, member, score in snapshot.members():
        held.setdefault(member, []).append((loc, score))
    rows = snapshot.row_map()
    out: dict[str, Any] = {}
    for job in held.keys() | rows.keys():
        where, row = held.get(job, []), rows.get(job)
        raw = row.get("attempts") if row else None
        attempts = canonical_int(raw)
        if len(where) == 1 and attempts is not None:  # a broken form is INV-5's business
            out[job] = (where[0][0], attempts, where[0][1])
        else:
            out[job] = ("broken", tuple(where), raw)
    return out


# -- partitions ------------------------------------------------------------------------------

_MOVES_FROM = {"reap": CLAIMS, "promote": ("schedule", "retry")}
"""The own ops that can put a job where a global op may move it from (active, schedule)."""

_SETTLED = (None, PENDING, DEAD)
"""What no reap or promote moves: once observed so after a job's last own op, later
global ops cannot touch it (nothing in a soak history reprocesses or claims it then)."""


def partition(ops: Sequence[Op]) -> list[tuple[str, list[Op]]]:
    """One sub-history per job: its own ops; every reap (promote) that may run while it
    is active (scheduled); every snapshot from its first op until the first one after
    its last op that shows it settled, and the last snapshot (projected on the job)."""
    own: dict[str, list[Op]] = {}
    moves: dict[str, list[Op]] = {"reap": [], "promote": []}
    reads: list[Op] = []
    for op in ops:
        job, name = job_of(op), _inputs(op)[0]
        if job is not None:
            own.setdefault(job, []).append(op)
        elif name in moves:
            moves[name].append(op)
        elif name == "observe":
            reads.append(op)
    reads.sort(key=lambda o: o.invoke)
    seen = [observations(r.output) for r in reads]
    out = []
    for job, mine in own.items():
        first = min(o.invoke for o in mine)
        last = max(o.ret for o in mine)
        end = float("inf")
        sub = list(mine)
        for i, read in enumerate(reads):
            if read.ret < first:
                continue
            view = seen[i].get(job)
            if read.invoke > last and (view is None or view[0] in _SETTLED):
                sub.append(_projected(read, view))
                end = read.ret
                break
            sub.append(_projected(read, view))
        if reads and reads[-1].ret >= first and end != float("inf") and reads[-1].invoke > end:
            sub.append(_projected(reads[-1], seen[-1].get(job)))
        for name, from_ops in _MOVES_FROM.items():
            since = min((o.invoke for o in mine if _inputs(o)[0] in from_ops), default=None)
            if since is not None:
                sub.extend(m for m in moves[name] if m.ret >= since and m.invoke <= end)
        out.append((job, sorted(sub, key=lambda o: o.invoke)))
    return out


def _projected(read: Op, view: Any) -> Op:
    return Op(read.process, read.input, view, read.invoke, read.ret)


QUEUE = linearize.Model(init=INIT, step=step, partition=partition)
"""The queue as a product of per-job models (an over-approximation: specs/soak.md)."""


# -- claim order --------------------------------------------------------------------------------


@dataclass(frozen=True)
class OrderViolation:
    """A claim that answered ``got`` (an id, or ``None`` for empty) while ``lower`` was
    pending, with a row, throughout the claim's interval."""

    claim: Op
    lower: str

    def __str__(self) -> str:
        got = self.claim.output[0] if self.claim.output else "empty"
        return (f"T-claim-1: {self.claim.process} claimed {got} while {self.lower} was pending throughout "
                f"[{self.claim.invoke}, {self.claim.ret}] ns")


def claim_order(ops: Sequence[Op]) -> list[OrderViolation]:
    """Claims that skipped a job that was certainly pending and lower. A job is certainly
    pending from the return of its enqueue until the invoke of its next own op (only an
    own op — claim, complete, retry — takes a job out of pending)."""
    entered: dict[str, Op] = {}
    for op in sorted(ops, key=lambda o: o.invoke):
        job = job_of(op)
        if job is not None and job not in entered and _inputs(op)[0] == "enqueue" and op.output == "enqueued":
            entered[job] = op
    leaves = {job: float("inf") for job in entered}
    for op in ops:
        job = job_of(op)
        if job in entered and op is not entered[job]:
            leaves[job] = min(leaves[job], op.invoke)
    births = sorted((op.ret, job) for job, op in entered.items())
    claims = sorted((o for o in ops if _inputs(o)[0] == "claim"), key=lambda o: o.invoke)
    live: list[tuple[str, float]] = []  # (id, leaves), by id: the candidates
    found, b = [], 0
    for claim in claims:
        while b < len(births) and births[b][0] < claim.invoke:
            job = births[b][1]
            bisect.insort(live, (job, leaves[job]))
            b += 1
        i = 0
        while i < len(live):
            job, gone = live[i]
            if gone <= claim.invoke:  # left pending before this claim, so before every later one
                del live[i]
            elif gone <= claim.ret:  # may have left during the claim
                i += 1
            else:  # the lowest job certainly pending throughout the claim
                if claim.output is None or job < claim.output[0]:
                    found.append(OrderViolation(claim, job))
                break
    return found


# -- the whole check -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Checked:
    """Both parts of the check; ``verdict`` is ``illegal`` if either found a violation."""

    linearizability: linearize.Result
    order: tuple[OrderViolation, ...]

    @property
    def verdict(self) -> str:
        return linearize.ILLEGAL if self.order else self.linearizability.verdict


def ops_of(events: Iterable[Event]) -> list[Op]:
    """The checker's ops for recorded events, in invoke order."""
    ordered = sorted(events, key=lambda e: (e.invoke, e.ret))
    return [to_op(e, i) for i, e in enumerate(ordered)]


def check_history(events: Iterable[Event], *, seconds: float = 60.0, max_states: int = 2_000_000) -> Checked:
    """Check a queue's history: per-job linearizability within ``seconds``, and claim
    order."""
    ops = ops_of(events)
    return Checked(linearize.check_linearizable(QUEUE, ops, seconds=seconds, max_states=max_states), tuple(claim_order(ops)))


def describe(op: Op, origin: int = 0) -> str:
    """One op as a line: times in ms from ``origin``, process, call and answer."""
    inp = _inputs(op)
    call = f"{inp[0]}({', '.join(f'{k}={v!r}' for k, v in zip(INPUTS[inp[0]], inp[1:]))})"
    span = f"[{(op.invoke - origin) / 1e6:.3f}, {(op.ret - origin) / 1e6:.3f}] ms"
    return f"{span} {op.process}: {call} -> {op.output!r}"


def explain(verdict: linearize.PartitionVerdict) -> list[str]:
    """An illegal (or unknown) partition in words: its ops in time order, and the
    longest order of them the model could explain."""
    ops = sorted(verdict.ops, key=lambda o: o.invoke)
    origin = ops[0].invoke if ops else 0
    lines = [f"job {verdict.key}: {verdict.verdict} ({verdict.reason})"]
    lines += ["  " + describe(o, origin) for o in ops]
    if verdict.longest:
        lines.append("  longest explainable order:")
        lines += ["    " + describe(verdict.ops[i], origin) for i in verdict.longest]
    return lines

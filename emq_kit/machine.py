"""The conformance machine: a Hypothesis rule-based state machine that drives the model
and a target side by side, on two queues, and after every step demands equal answers
(INV-8), equal snapshots (INV-8) and clean invariants (INV-1..7) on both sides.

Vocabulary: a *rule* is one call of an op; a *step* is one rule with its checks; the
*clock* is virtual (the model's ``now`` passed to both sides) or the server's
(``emq_kit/clock.py``); a *claim* in the bundle
keeps its token forever, so stale and foreign tokens come back after reaps, retries and
reclaims.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

from hypothesis import event, strategies as st
from hypothesis.control import currently_in_test_context
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, invariant, multiple, precondition, rule

from emq_model import branded_id, spec
from emq_model.errors import EmqError
from emq_model.invariants import Violation, check
from emq_model.model import Claimed, QueueModel
from emq_model.snapshot import Snapshot, diff

from .clock import Clock, VirtualClock
from .coverage import Coverage, classify
from .targets import Target

# Two queues per run so a leak across queues shows; the second name carries glob
# metacharacters and non-ASCII so a snapshot that scans keys without escaping, or that
# mangles UTF-8, diverges.
QUEUES = ("alpha", "β*[x]")

# A small id pool makes duplicates, foreign tokens and re-enqueues after completion common.
POOL = tuple(branded_id.encode("JOB", branded_id.snowflake(branded_id.EPOCH_MS + 1000 * i, 1, i)) for i in range(1, 9))

# Malformed and foreign ids: each must be refused with EMQKIND before anything else.
BAD_IDS = (
    "", "JOB", "JOBzzzzzzzzzzz", "ORD0KHTOWnGLuC", "job0KHTOWnGLuC", "J0B0KHTOWnGLuC",
    "JOB0KHTOWnGLu", "JOB0KHTOWnGLuCC", "JOB0KHTOWnGL-C", "JOBé0KHTOWnGL", " JOB0KHTOWnGLu",
    42, None, b"JOB0KHTOWnGLuC",
)
BAD_QUEUES = ("", "a{b", "a}b", "a b", "tab\tq", "nl\n", "nul\x00", "del\x7f", "x" * 129, 7)

START = 1_750_000_000_000  # the virtual clock's first reading (ms)
# Strategies are kept to one draw each where possible (an integer mapped to what the rule
# needs): Hypothesis's per-draw cost is most of a step's cost on a fast server.
PAYLOADS = st.sampled_from([b"", b"p", "ü", b"\x00\xff", bytes(range(9))])
LEASES = st.integers(1, 12)  # short, so leases expire within a few ticks
LIMITS = st.sampled_from([1, 2, 100])
# Most steps go to the first queue, so one queue's lifecycle gets deep; the second sees
# enough traffic for a cross-queue leak to show.
queues = st.sampled_from(QUEUES[:1] * 3 + QUEUES[1:])
ids = st.sampled_from(POOL)
SETTLES = st.sampled_from(["complete", "retry", "extend"])
# A pump may first move the clock to a boundary of the location it pumps: (which score,
# offset -1/0/+1). None runs it at the current clock.
At = tuple[int, int] | None
AT = st.integers(0, 47).map(lambda v: None if v < 16 else ((v - 16) // 3, (v - 16) % 3 - 1))
# A spoil makes one argument (or the clock) of a call bad: (which argument, which bad
# value), both taken modulo what the op has. Most calls are unspoiled.
Spoil = tuple[int, int] | None
SPOIL = st.integers(0, 127).map(lambda v: None if v < 96 else ((v - 96) % 8, (v - 96) // 8))
# (delay_ms, max_attempts, lease_ms) of a settle, in one draw; shrinks to (0, 1, 1).
Knobs = tuple[int, int, int]
KNOBS = st.integers(0, 21 * 2 * 12 - 1).map(lambda k: (k % 21, 1 + (k // 21) % 2, 1 + (k // 42) % 12))
MAYBE_PICK = st.integers(0, 8).map(lambda v: None if v == 0 else v - 1)


class Divergence(AssertionError):
    """The target left the model: ``kind`` is answer, snapshot or invariant; ``rule`` the
    spec rule it cites; ``lines`` the evidence in plain words."""

    def __init__(self, kind: str, rule: str, step: "Step", lines: list[str]) -> None:
        self.kind, self.rule, self.step, self.lines = kind, rule, step, lines
        super().__init__(f"{kind} diverges at step {step.index} {step.call()} ({rule}):\n  " + "\n  ".join(lines))


@dataclass
class Step:
    """One call as it ran on both sides."""

    index: int
    queue: str
    op: str
    args: dict[str, Any]
    model: Any = None
    target: Any = None

    def call(self) -> str:
        body = ", ".join(f"{k}={v!r}" for k, v in self.args.items())
        return f"{self.op}({self.queue!r}, {body})"


@dataclass
class Run:
    """What a whole run accumulates across examples (the machine is rebuilt per example)."""

    coverage: Coverage = field(default_factory=Coverage)
    examples: int = 0
    steps: int = 0
    checks: int = 0
    last: list[Step] = field(default_factory=list)
    progress: Callable[["Run"], None] | None = None
    started: float = field(default_factory=time.perf_counter)
    first_failure: float | None = None  # when the first divergence was seen (time-to-kill)


def outcome(fn: Callable[[], Any]) -> Any:
    """A call's answer, or the refusal it raised (refusals compare by code)."""
    try:
        return fn()
    except EmqError as err:
        return err


class Crash:
    """A target call that raised something other than a refusal (a script error, a bad
    reply): always a divergence, never equal to an answer."""

    def __init__(self, exc: Exception) -> None:
        self.exc = exc

    def __repr__(self) -> str:
        return f"raised {type(self.exc).__name__}: {self.exc}"


def target_outcome(fn: Callable[[], Any]) -> Any:
    """``outcome`` for the target side: unexpected exceptions become a ``Crash``, except
    a lost connection, which is the environment's problem and propagates."""
    try:
        return outcome(fn)
    except (ConnectionError, OSError, *_connection_errors()):
        raise
    except Exception as exc:  # noqa: BLE001 - anything a broken implementation raises
        return Crash(exc)


def _connection_errors() -> tuple[type[Exception], ...]:
    import redis

    return (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)


class Conformance(RuleBasedStateMachine):
    """Model vs target, step by step. Build with ``Conformance.factory(target, run)``."""

    claims = Bundle("claims")

    target: Target
    run: Run
    clock: Clock

    def __init__(self) -> None:
        super().__init__()
        self.target.reset()
        self.run.examples += 1
        self.run.last = self.steps = []
        self.now = self.clock.start(START)
        self.models = {q: QueueModel(q) for q in QUEUES}
        self.impls = {q: self.target.queue(q) for q in QUEUES}
        self.previous: dict[str, Snapshot] = {}
        self.orphans: dict[str, set[str]] = {q: set() for q in QUEUES}
        if self.run.progress:
            self.run.progress(self.run)

    @classmethod
    def factory(cls, target: Target, run: Run, clock: Clock | None = None) -> Callable[[], "Conformance"]:
        """A zero-argument factory for ``run_state_machine_as_test`` (the virtual clock
        unless ``clock`` says otherwise)."""
        machine = type(cls.__name__, (cls,), {"target": target, "run": run, "clock": clock or VirtualClock()})
        return machine

    # -- the one way a step runs --------------------------------------------------------

    def diverge(self, kind: str, rule: str, step: Step, lines: list[str]) -> Divergence:
        """The divergence to raise; the run notes when it first saw one."""
        if self.run.first_failure is None:
            self.run.first_failure = time.perf_counter()
        return Divergence(kind, rule, step, lines)

    def step(self, queue: str, op: str, args: dict[str, Any], *, spoil: Spoil = None) -> Any:
        """Run ``op`` on both sides (with the virtual clock when the op reads one, and one
        argument spoiled if asked), then check answers, snapshots and invariants."""
        if spec.entry(op)["clock"]:
            args = self.clock.stamp(args, self.now)
        if spoil is not None:
            args = _spoiled(op, args, spoil)
        return self.execute(queue, op, args)

    def execute(self, queue: str, op: str, args: dict[str, Any]) -> Any:
        """Run ``op`` with exactly ``args`` on both sides and check everything (the part
        of a step that ``emq replay`` repeats from a trace)."""
        model = self.models[queue]
        was = model.state(args["id"]) if op == "complete" and branded_id.is_valid(args.get("id"), "JOB") else None
        failed_before = model.failed
        step = Step(len(self.steps) + 1, queue, op, args)
        self.steps.append(step)
        self.run.steps += 1
        step.model, step.target = self.clock.call(
            op, model, args, lambda m, a: outcome(lambda: getattr(m, op)(**a)),
            lambda a: target_outcome(lambda: getattr(self.impls[queue], op)(**a)), lambda: self.target.snapshot(queue))
        if step.model != step.target or type(step.model) is not type(step.target):
            raise self.diverge("answer", spec.entry(op)["rule"], step,
                             [f"model answered {step.model!r}", f"target answered {step.target!r}"])
        if op in ("claim", "claim_many") and model.last_dropped != self.impls[queue].last_dropped:
            raise self.diverge("answer", "T-claim-5", step, [f"model dropped {model.last_dropped}",
                                                           f"target dropped {self.impls[queue].last_dropped}"])
        if op in spec.TRANSITIONS:
            for name in classify(op, step.model, was=was, dropped=bool(model.last_dropped) if op == "claim" else False,
                                 dead_before=failed_before, dead_after=model.failed):
                self.run.coverage.add(op, name)
                if currently_in_test_context():
                    event(f"{op}/{name}")
        self.verify(queue, step)
        return step.model

    def verify(self, queue: str, step: Step) -> None:
        """INV-8 (snapshots equal), then INV-1..7 against the previous step. Once the two
        snapshots are equal, one ``check`` judges both sides: it is a pure function of the
        snapshot and the previous one, and the previous ones were equal too."""
        mine, theirs = self.models[queue].snapshot(), self.target.snapshot(queue)
        if mine != theirs:
            raise self.diverge("snapshot", "INV-8", step, diff(mine, theirs))
        self.orphans[queue] &= {m for _, m, _ in mine.members()}
        found = [v for v in check(mine, self.previous.get(queue)) if not self._expected(queue, v)]
        self.run.checks += 8  # INV-1..7 on the shared snapshot, and INV-8
        if found:
            raise self.diverge("invariant", found[0].invariant, step, [str(v) for v in found])
        self.previous[queue] = mine

    def _expected(self, queue: str, v: Violation) -> bool:
        """An orphan member the machine itself made (``vandalize``) is not a violation."""
        return v.invariant == "INV-2" and v.id in self.orphans[queue] and "orphan member" in v.seen

    # -- rules: producers --------------------------------------------------------------

    @initialize(jobs=st.lists(ids, max_size=4, unique=True))
    def backlog(self, jobs: list[str]) -> None:
        """Start most examples with work waiting, so claims find jobs early."""
        for job in jobs:
            self.step(QUEUES[0], "enqueue", {"id": job, "payload": b"backlog"})

    @rule(q=queues, job=ids, payload=PAYLOADS, spoil=SPOIL)
    def enqueue(self, q: str, job: str, payload: bytes, spoil: Spoil) -> None:
        self.step(q, "enqueue", {"id": job, "payload": payload}, spoil=spoil)

    @rule(q=queues, job=ids, payload=PAYLOADS, when=st.integers(-10, 20),
          how=st.sampled_from(["delay_ms", "run_at", "delay_ms", "run_at", "both", "neither"]), spoil=SPOIL)
    def schedule(self, q: str, job: str, payload: bytes, when: int, how: str, spoil: Spoil) -> None:
        """Both and neither of run_at and delay_ms are refused (T-schedule-1)."""
        at = {"delay_ms": {"delay_ms": max(when, 0)}, "run_at": {"run_at": max(self.now + when, 0)},
              "both": {"delay_ms": 1, "run_at": self.now}, "neither": {}}[how]
        self.step(q, "schedule", {"id": job, "payload": payload, **at}, spoil=spoil)

    # -- rules: workers ----------------------------------------------------------------

    @rule(target=claims, q=queues, lease=LEASES, spoil=SPOIL)
    def claim(self, q: str, lease: int, spoil: Spoil) -> Any:
        got = self.step(q, "claim", {"lease_ms": lease}, spoil=spoil)
        return multiple((q, got.id, got.token)) if isinstance(got, Claimed) else multiple()

    @rule(c=claims, op=SETTLES, foreign=st.sampled_from([False, False, False, True]), knobs=KNOBS, spoil=SPOIL)
    def settle(self, c: tuple[str, str, int], op: str, foreign: bool, knobs: Knobs, spoil: Spoil) -> None:
        """A worker settles a claim it kept, maybe long after it went stale, maybe
        against the other queue."""
        q, job, token = c
        self.step(self._other(q) if foreign else q, op, self._settle_args(op, job, token, knobs), spoil=spoil)

    @precondition(lambda self: self._holders())
    @rule(op=SETTLES, pick=st.integers(0, 15), skew=st.sampled_from([0, 0, 0, -1, 1]), knobs=KNOBS, spoil=SPOIL)
    def work(self, op: str, pick: int, skew: int, knobs: Knobs, spoil: Spoil) -> None:
        """The holder of a job's latest token settles it: from active, late from pending
        after a reap, or too late from schedule or dead. A skewed token is the previous holder's (-1) or one never
        handed out (+1): both must be refused while the job is live (EMQSTALE)."""
        q, job, token = self._holders()[pick % len(self._holders())]
        self.step(q, op, self._settle_args(op, job, max(token + skew, 1), knobs), spoil=spoil)

    # -- rules: batches (one script call for many items; the model's loop is the oracle) -
    # A target without them (``batches = False``: a port's driver, B-4) never gets them.

    @precondition(lambda self: getattr(self.target, "batches", True))
    @rule(q=queues, jobs=st.lists(st.tuples(ids, PAYLOADS), min_size=1, max_size=4))
    def enqueue_many(self, q: str, jobs: list[tuple[str, bytes]]) -> None:
        self.step(q, "enqueue_many", {"jobs": jobs})

    @precondition(lambda self: getattr(self.target, "batches", True))
    @rule(target=claims, q=queues, n=st.integers(1, 4), lease=LEASES)
    def claim_many(self, q: str, n: int, lease: int) -> Any:
        got = self.step(q, "claim_many", {"n": n, "lease_ms": lease})
        return multiple(*((q, c.id, c.token) for c in got)) if isinstance(got, list) else multiple()

    @precondition(lambda self: getattr(self.target, "batches", True))
    @rule(kept=st.lists(claims, min_size=1, max_size=3))
    def complete_many(self, kept: list[tuple[str, str, int]]) -> None:
        """Settle several kept claims in one call, on the first one's queue: the others'
        tokens may be stale, or foreign."""
        self.step(kept[0][0], "complete_many", {"jobs": [(job, token) for _, job, token in kept]})

    # -- rules: pumps and operators ----------------------------------------------------

    @rule(q=queues, limit=LIMITS, at=AT, spoil=SPOIL)
    def promote(self, q: str, limit: int, at: At, spoil: Spoil) -> None:
        self._advance(q, "schedule", at)
        self.step(q, "promote", {"limit": limit}, spoil=spoil)

    @rule(q=queues, limit=LIMITS, cap=st.integers(0, 3).map(lambda v: v or None), at=AT, spoil=SPOIL)
    def reap(self, q: str, limit: int, cap: int | None, at: At, spoil: Spoil) -> None:
        self._advance(q, "active", at)
        self.step(q, "reap", {"limit": limit, "max_attempts": cap}, spoil=spoil)

    @rule(q=queues, job=ids, pick=MAYBE_PICK, spoil=SPOIL)
    def reprocess(self, q: str, job: str, pick: int | None, spoil: Spoil) -> None:
        self.step(q, "reprocess", {"id": self._pick(q, "dead", pick, job)}, spoil=spoil)

    @rule(q=queues, job=ids, pick=MAYBE_PICK,
          where=st.sampled_from(spec.LOCATIONS), spoil=SPOIL)
    def remove(self, q: str, job: str, pick: int | None, where: str, spoil: Spoil) -> None:
        self.step(q, "remove", {"id": self._pick(q, where, pick, job)}, spoil=spoil)

    @rule(q=queues, which=st.sampled_from(["browse", "counts", "state", "job"]), job=ids, n=st.integers(1, 4),
          spoil=SPOIL)
    def read(self, q: str, which: str, job: str, n: int, spoil: Spoil) -> None:
        args = {"browse": {"n": n}, "counts": {}, "state": {"id": job}, "job": {"id": job}}[which]
        self.step(q, which, args, spoil=spoil)

    @precondition(lambda self: any(m.sets["pending"] for m in self.models.values()))
    @rule(q=queues, pick=st.integers(0, 7))
    def vandalize(self, q: str, pick: int) -> None:
        """An operator deletes a pending job's row by hand: claim must drop the orphan
        (T-claim-2), never resurrect it."""
        pending = sorted(self.models[q].sets["pending"])
        if not pending:
            return
        self.forget(q, pending[pick % len(pending)])

    def forget(self, queue: str, job: str) -> None:
        """Delete ``job``'s row by hand on both sides, then check (a trace step too)."""
        step = Step(len(self.steps) + 1, queue, "forget_row", {"id": job}, None, None)
        self.steps.append(step)
        self.models[queue].forget_row(job)
        self.target.forget_row(queue, job)
        self.orphans[queue].add(job)
        self.verify(queue, step)

    # -- rules: the clock ----------------------------------------------------------------

    @rule(delta=st.integers(0, 25))
    def tick(self, delta: int) -> None:
        self.now = self.clock.advance(self.now + delta)

    # -- rules: hostile callers ----------------------------------------------------------

    @rule(name=st.sampled_from(BAD_QUEUES))
    def bad_queue(self, name: Any) -> None:
        """KS-3: a bad queue name is refused before any key exists, on both sides."""
        self.open_queue(name)

    def open_queue(self, name: Any) -> None:
        """Open a queue by a name KS-3 refuses: both sides must refuse it (a trace step too)."""
        model = outcome(lambda: QueueModel(name))
        target = target_outcome(lambda: self.target.queue(name))
        step = Step(len(self.steps) + 1, "", "queue", {"name": name}, model, target)
        self.steps.append(step)
        if not (isinstance(model, EmqError) and model == target):
            raise self.diverge("answer", "KS-3", step, [f"model: {model!r}", f"target: {target!r}"])

    # -- helpers -------------------------------------------------------------------------

    def _pick(self, q: str, loc: str, pick: int | None, fallback: str) -> str:
        """A member of the model's ``loc`` chosen by ``pick`` (so the op meets the state
        it cares about), or ``fallback`` when ``pick`` is None or the location is empty."""
        members = sorted(self.models[q].sets[loc])
        return members[pick % len(members)] if members and pick is not None else fallback

    def _holders(self) -> list[tuple[str, str, int]]:
        """(queue, id, token) of every job whose latest token a worker may still hold
        (attempts >= 1): active ones; pending ones (a reap's leftovers, a late ack); and
        ones already settled into schedule or dead, whose holder must now be refused
        (the reference's defect: complete or retry from schedule/dead)."""
        return [
            (q, job, int(model.rows[job]["attempts"]))
            for q, model in self.models.items()
            for loc in ("active", "pending", "schedule", "dead")
            for job in sorted(model.sets[loc])
            if job in model.rows and model.rows[job]["attempts"] != b"0"
        ]

    def _advance(self, q: str, loc: str, at: At) -> None:
        """Move the clock forward to a score of ``loc`` (a lease deadline or a run-at)
        minus one, on it, or one past it: the boundaries where `<` and `<=` differ."""
        marks = sorted(set(self.models[q].sets[loc].values()))
        if at is not None and marks:
            pick, offset = at
            self.now = self.clock.advance(max(self.now, marks[pick % len(marks)] + offset))

    @staticmethod
    def _settle_args(op: str, job: str, token: int, knobs: Knobs) -> dict[str, Any]:
        delay, cap, lease = knobs
        extra = {"complete": {}, "retry": {"delay_ms": delay, "max_attempts": cap, "error": "boom"},
                 "extend": {"lease_ms": lease}}[op]
        return {"id": job, "token": token, **extra}

    def _other(self, q: str) -> str:
        return QUEUES[1 - QUEUES.index(q)]

    @invariant()
    def clock_is_valid(self) -> None:
        assert 0 <= self.now <= spec.LIMITS["ms_max"]


def _spoiled(op: str, args: dict[str, Any], spoil: tuple[int, int]) -> dict[str, Any]:
    """``args`` with one argument (the clock counts as one) replaced by a value outside
    its type from the spec table: the refusal must be that type's code."""
    table = spec.OPS[op]["args"] + ([{"name": "now", "type": "time", "optional": True}] if "now" in args else [])
    if not table:
        return args
    victim = table[spoil[0] % len(table)]
    bad = _bad_values(victim)
    return {**args, victim["name"]: bad[spoil[1] % len(bad)]}


def _bad_values(arg: dict[str, Any]) -> list[Any]:
    """Values outside an argument's type, from the spec table."""
    t = spec.TYPES[arg["type"]]
    if arg["type"] == "job_id":
        return list(BAD_IDS)
    if arg["type"] in ("payload", "text"):
        too_long = [b"x" * (spec.bound(t["max_bytes"]) + 1)] if "max_bytes" in t else []
        return [7, 1.5, ["list"]] + too_long
    lo, hi = spec.bound(t["min"]), spec.bound(t["max"])
    bad = [lo - 1, hi + 1, 1.5, str(lo + 1), True]
    return bad if arg.get("optional") else bad + [None]

"""The conformance machine: a Hypothesis rule-based state machine that drives the model
and a target side by side, on two queues, and after every step demands equal answers
(INV-8), equal snapshots (INV-8) and clean invariants (INV-1..7) on both sides.

Vocabulary: a *rule* is one call of an op; a *step* is one call with its checks (a
*checked step* once the target's snapshot was read and judged); the *clock* is virtual
(the model's ``now`` passed to both sides) or the server's (``emq_kit/clock.py``); a
*kept claim* keeps its token forever, so stale and foreign tokens come back after reaps,
retries and reclaims. Rules draw their arguments packed in one choice (``Draw``) and
``Selection`` (emq_kit/check/base.py) picks the rule with one choice: Hypothesis's
per-choice cost was most of a step's (docs/engine.md).
"""

from __future__ import annotations

import time
from typing import Any, Callable

from hypothesis import event
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context
from hypothesis.stateful import (
    initialize,
    precondition,
    rule,
)

from emq_kit._signals import Quiet
from emq_kit.check import faults
from emq_kit.check.base import Machine
from emq_kit.check.coverage import classify
from emq_kit.check.draws import Draw
from emq_kit.check.hang import RULE as HANG_RULE
from emq_kit.check.hang import is_hang
from emq_kit.check.lanes import CELLS as LANE_CELLS
from emq_kit.check.lanes import PREPARES as LANE_PREPARES
from emq_kit.check.lanes import RULE_OPS as LANE_RULE_OPS
from emq_kit.check.lanes import LaneRules
from emq_kit.check.orders import Orders, pick_of_union
from emq_kit.check.pools import BAD_IDS, BAD_QUEUES, POOL, QUEUES, background, bad_values
from emq_kit.check.raw.rule import RawCalls
from emq_kit.check.step import SLEEP, Crash, ModelBroken, Step, died, outcome, target_outcome
from emq_kit.check.window import Pending, Window, window_size
from emq_kit.errors import KitBug, ScriptHang, TargetFault
from emq_kit.targets.protocol import Target
from emq_live.client import BadReply
from emq_model import branded_id, spec
from emq_model.change import Change, agree, between, change_from, composed
from emq_model.errors import TYPE, EmqError
from emq_model.invariants import Carried, Since, Violation, check_step, check_whole, of_all
from emq_model.model import Claimed, QueueModel
from emq_model.snapshot import Snapshot, diff

BADS = range(len(BAD_IDS))  # the longest list of bad values an argument has

START = 1_750_000_000_000  # the virtual clock's first reading (ms)

# Each rule draws its arguments as one packed choice (``emq_kit/draws.py``): Hypothesis's
# per-choice cost was most of a step's cost on a fast server. Every field lists its simplest
# option first, so a shrunk counterexample reads plainly.
QUEUE = QUEUES[:1] * 3 + QUEUES[1:]  # most steps on the first queue, so its lifecycle gets deep
PAYLOADS = (b"", b"p", "ü", b"\x00\xff", bytes(range(9)))
ITEMS = tuple((job, payload) for payload in PAYLOADS for job in POOL)
LEASES = range(1, 13)  # short, so leases expire within a few ticks
LIMITS = (1, 2, 100)
SETTLES = ("complete", "retry", "extend")
WHEN = (*range(0, 21), *range(-1, -11, -1))  # a schedule's offset from now (ms)
DELAYS = range(21)
PICKS = range(64)  # which kept claim, newest first, modulo how many are kept
MAYBE_PICK = (None, *range(8))  # None: use the drawn id, whatever its location
# A spoil makes one argument (or the clock) of a call bad: (which argument, which bad
# value), both taken modulo what the op has. Two fields of a draw carry it: ``spoil``
# (whether, and which argument: three calls in four are unspoiled) and ``bad`` (which
# value), each ranging over the largest count any op has, so every bad value of every
# argument is reachable (the bad index is not tied to the argument index).
Spoil = tuple[int, int] | None
ARGS_MAX = max(len(d["args"]) for d in spec.OPS.values()) + 1  # the clock counts as one
SPOILS: tuple[tuple[bool, int], ...] = tuple((s, v) for s in (False, False, False, True) for v in range(ARGS_MAX))
# A pump may first move the clock to a boundary of the location it pumps: (which score,
# offset -1/0/+1). None runs it at the current clock.
At = tuple[int, int] | None
ATS: tuple[At, ...] = (None,) * 16 + tuple((i // 3, i % 3 - 1) for i in range(32))

FILL = 500  # background jobs an enqueue_many of a deep run's fill carries (DEPTH-1)
BACKLOG = Draw("Backlog", n=range(5), first=range(len(POOL)))
ENQUEUE = Draw("Enqueue", q=QUEUE, job=POOL, payload=PAYLOADS, spoil=SPOILS, bad=BADS)
SCHEDULE = Draw("Schedule", q=QUEUE, job=POOL, payload=PAYLOADS, when=WHEN, spoil=SPOILS, bad=BADS,
                how=("delay_ms", "run_at", "delay_ms", "run_at", "both", "neither"))
CLAIM = Draw("Claim", q=QUEUE, lease=LEASES, spoil=SPOILS, bad=BADS)
SETTLE = Draw("Settle", pick=PICKS, op=SETTLES, foreign=(False, False, False, True), delay=DELAYS,
              cap=(1, 2), lease=LEASES, spoil=SPOILS, bad=BADS)
WORK = Draw("Work", pick=range(16), op=SETTLES, skew=(0, 0, 0, -1, 1), delay=DELAYS, cap=(1, 2),
            lease=LEASES, spoil=SPOILS, bad=BADS)
ENQUEUE_MANY = Draw("EnqueueMany", q=QUEUE, n=range(1, 5), item0=ITEMS, item1=ITEMS, item2=ITEMS, item3=ITEMS)
CLAIM_MANY = Draw("ClaimMany", q=QUEUE, n=range(1, 5), lease=LEASES)
COMPLETE_MANY = Draw("CompleteMany", n=range(1, 4), pick0=PICKS, pick1=PICKS, pick2=PICKS)
PROMOTE = Draw("Promote", q=QUEUE, limit=LIMITS, at=ATS, spoil=SPOILS, bad=BADS)
REAP = Draw("Reap", q=QUEUE, limit=LIMITS, cap=(None, 1, 2, 3), at=ATS, spoil=SPOILS, bad=BADS)
REPROCESS = Draw("Reprocess", q=QUEUE, job=POOL, pick=MAYBE_PICK, spoil=SPOILS, bad=BADS)
REMOVE = Draw("Remove", q=QUEUE, job=POOL, pick=MAYBE_PICK, where=spec.LOCATIONS, spoil=SPOILS, bad=BADS)
READS = ("browse", "counts", "state", "job")
READ = Draw("Read", q=QUEUE, which=READS, job=POOL, n=range(1, 5), spoil=SPOILS, bad=BADS)
VANDALIZE = Draw("Vandalize", q=QUEUE, pick=range(8))
Kept = tuple[str, str, int]  # (queue, id, token) of a claim a worker kept
CLAIMS = ("claim", "claim_many", "lane_claim", "lane_wclaim")  # the ops that drop orphans (T-claim-5)
DOUBTS = frozenset(("raw",))  # steps whose snapshots are compared whole (INC-4): a raw call names no ids
# The ops a window may hold: the script calls of a queue (browse and job are answered
# outside scripts by the built-in client: the window is sent before them). The lane ops
# too: LANE-F is judged on the model's own ring and answers as each turn is made.
# An ``Ahead`` takes the operator's faults too (``inject``).
WINDOWED = frozenset((*spec.TRANSITIONS, *spec.BATCHES, *spec.LANE_OPS, "counts", "state"))
RULE_OPS: dict[str, tuple[str, ...]] = {
    "enqueue": ("enqueue",), "schedule": ("schedule",), "claim": ("claim",), "settle": SETTLES, "work": SETTLES,
    "enqueue_many": ("enqueue_many",), "claim_many": ("claim_many",), "complete_many": ("complete_many",),
    "promote": ("promote",), "reap": ("reap",), "reprocess": ("reprocess",), "remove": ("remove",),
    "read": READS, "vandalize": ("forget_row",), "spoil_key": ("spoil_key",), "bad_queue": ("queue",), "raw_call": ("raw",), **LANE_RULE_OPS,
}
"""The ops each rule may send: a rule none of whose ops the focus allows is off."""
LIFECYCLE = ("claim", "settle", "work", "promote", "reap")
"""The rules of the lifecycle ops: on in every example (the swarm turns only the other
rules off), so they are about half of a run's calls whatever the swarm draws (COV-2)."""
WEIGHTS = {"claim": 11, "settle": 9, "work": 8, "promote": 5, "reap": 5, "enqueue": 5, "schedule": 3, "tick": 4,
           "remove": 2, "read": 2, "reprocess": 2, "bad_queue": 3, "enqueue_many": 2, "claim_many": 2,
           "complete_many": 2, "vandalize": 2, "lane_enqueue": 4, "lane_claim": 4, "lane_config": 2, "lane_scene": 2, "raw_call": 3, "spoil_key": 5,
           "stray_keys": 2}
"""How often ``Selection`` picks each rule among those on: the lifecycle (claim, the
settles, the pumps) about half the steps (COV-2), bad queue names a few per cent; the lanes
often enough that a lane grows deep under a weight (``lane_wclaim/several``). A rule
not named weighs 1."""

def aimed_rules(aim: frozenset[tuple[str, str]]) -> frozenset[str]:
    """The rules that can send a cell of ``aim``: those whose ops include the cell's op,
    those that prepare it (``lanes.PREPARES``), and for a refusal of a spoiled key
    (``EMQTYPE``, CC-8) the operator's spoil episode."""
    ops = {op for op, outcome in aim if outcome != TYPE}
    spoil = {"spoil_key"} if any(outcome == TYPE for _, outcome in aim) else set()
    prepare = {name for name, cells in LANE_PREPARES.items() if aim & set(cells)}
    return frozenset({name for name, sent in RULE_OPS.items() if ops & set(sent)} | spoil | prepare)


def _given(answer: Any) -> Any:
    """``answer``, raised when it is an exception (a batch reply, for ``target_outcome``)."""
    if isinstance(answer, BaseException):
        raise answer
    return answer


def _any_waiting(model: QueueModel) -> bool:
    """Whether an id waits in ``model``'s plain pending set or in its lanes (a
    precondition, asked every step: an empty lane is no entry)."""
    return bool(model.sets["pending"] or model.lanes.pending)


class Conformance(RawCalls, LaneRules, faults.KeyFaultRules, Machine):
    """Model vs target, step by step. Build with ``Conformance.factory(target, run)``.
    The lane rules are ``LaneRules``'s (emq_kit/check/lanes.py), the raw calls
    ``RawCalls``'s (emq_kit/check/raw/rule.py); the bookkeeping, divergences and endings
    ``Machine``'s (emq_kit/check/base.py)."""

    target: Target
    queues, pool = QUEUES, POOL  # for LaneRules
    weights, rule_ops, always_on = WEIGHTS, RULE_OPS, LIFECYCLE
    hostile_rules = ("bad_queue", "raw_call")

    def begin(self) -> None:
        """Two fresh models at the clock's start, the target's two queues, no claim kept."""
        with self._ends_the_run():
            self._clock_to(self.clock.start(START))
        self.models = {q: QueueModel(q) for q in QUEUES}
        self.orders: dict[str, Orders] = {}  # the rules' draws, see _orders
        # DEPTH-3: a deep queue's snapshot is read by what each step wrote, where the
        # target can (before its queues are handed out: they are read one step at a time)
        read_changes = getattr(self.target, "read_changes", None)
        self.by_change = bool(read_changes is not None and read_changes(self.run.focus.depth > 0))
        self.impls = {q: self.target.queue(q) for q in QUEUES}
        self.previous: dict[str, Snapshot] = {}
        self.damage = {q: faults.Damage() for q in QUEUES}  # the operator's (FLT-3..5)
        self.kept: list[Kept] = []
        self.turns: dict[str, list[tuple[tuple[str, ...], tuple[str, ...], str]]] = {}  # LANE-F, LaneRules
        if self._lanes_on():
            self.run.coverage.include(LANE_CELLS)
        self._prepared: tuple[Snapshot, list[Violation]] | None = None  # see _call_target
        self._mended = False  # the step being judged mends a spoiled key (see inject)
        self._carried: dict[str, tuple[Snapshot, Carried | Since]] = {}  # see _judge
        self._agreed: dict[str, tuple[Snapshot, Snapshot]] = {}  # the last (mine, theirs) found equal: _same
        self._aside: BaseException | None = None
        self._filled: tuple[float, int] | None = None  # perf_counter() and run.steps once filled (DEPTH-5)
        # Deferred verification (emq_kit/check/window.py), shrinking included.
        size = window_size(self.target, self.clock.mode, self.run.focus.depth) if self.windowed else 0
        self.window = Window(self.target, size) if size else None
        # Under the server clock a target that reads TIME around its own calls saves the
        # clock two round trips a clock op (ServerClock.call); off under the virtual one.
        timed = self.target.time_calls(self.clock.mode == "server")
        self.bracket = self.target.bracket if timed else None

    @classmethod
    def aimed(cls, aim: frozenset[tuple[str, str]]) -> frozenset[str]:
        """The rules that can send a cell of ``aim`` (COV-2): ``aimed_rules``."""
        return aimed_rules(aim)

    # -- the one way a step runs --------------------------------------------------------

    def count(self, op: str) -> None:
        """One more call of ``op`` in the run's op mix (the search's calls only)."""
        if not self.run.shrinking:
            self.run.op_mix[op] += 1

    def _spoil(self, a: Any) -> Spoil:
        """The spoil a draw asks for under the run's focus (HOSTILE)."""
        hostile = self.run.focus.hostile
        spoiled, victim = a.spoil
        if hostile == "off" or (hostile == "both" and not spoiled):
            return None
        return (victim, a.bad)

    def step(self, queue: str, op: str, args: dict[str, Any], *, spoil: Spoil = None) -> Any:
        """Run ``op`` on both sides (with the virtual clock when the op reads one, and one
        argument spoiled if asked), then check answers, snapshots and invariants."""
        with self._ends_the_run():
            return self._step(queue, op, args, spoil)

    def _step(self, queue: str, op: str, args: dict[str, Any], spoil: Spoil) -> Any:
        if self.stopped:
            return None
        absent = self.run.focus.absent.get(op, ())
        args = {k: v for k, v in args.items() if k not in absent}
        if spec.entry(op)["clock"]:
            args = self.clock.stamp(args, self.now)
        if spoil is not None:
            args = _spoiled(op, args, spoil, absent)
            self.count("spoiled")
        self.count(op)
        try:
            return self.execute(queue, op, args)
        except Quiet:
            return self._absorb(queue)

    def _absorb(self, queue: str) -> Any:
        """After a known difference: when both keyspaces still agree (an answer that
        differed and changed nothing, a bad value accepted without a write) the example
        goes on from the model's answer; otherwise it ends, quietly, with no more calls."""
        step = self.steps[-1]
        if step.op == "queue":
            return None
        if isinstance(step.target, Crash):  # a driver that died has no keyspace to compare
            self.stopped = True
            return None
        mine, theirs = self.models[queue].snapshot(), self._theirs(queue, step)
        if mine != theirs:
            self.stopped = True
            return None
        self.previous[queue], self._agreed[queue] = mine, (mine, theirs)
        return step.model

    def execute(self, queue: str, op: str, args: dict[str, Any]) -> Any:
        """Run ``op`` with exactly ``args`` on both sides and check everything (the part
        of a step that ``emq replay`` repeats from a trace)."""
        if spec.entry(op)["clock"] and "now" not in args:
            # CLK-3: the virtual clock travels on every clock op; a step written without
            # one (a server-clock trace replayed on the virtual clock) runs at the machine's
            args = self.clock.stamp(args, self.now)
        model = self.models[queue]
        # (a spoiled key refuses the read too: then the complete is refused, not late)
        was = outcome(lambda: model.state(args["id"])) if op == "complete" and branded_id.is_valid(
            args.get("id"), "JOB") else None
        failed_before = model.failed
        deferred = self.window is not None and op in WINDOWED
        if not deferred:
            self.drain()
            if self.stopped:  # a known difference in the window ended the example
                return None
        step = self._record(queue, op, args)
        self._prepared = None
        if deferred:
            step.model = outcome(lambda: getattr(model, op)(**args))
        else:
            read: list[Snapshot | BadReply] = []  # the target's snapshot, if the clock read it: verify's too

            def read_target() -> Snapshot | BadReply:
                if not read:
                    read.append(self.target.snapshot(queue))
                return read[0]

            step.model, step.target = self.clock.call(
                op, model, args, lambda m, a: outcome(lambda: getattr(m, op)(**a)),
                lambda a, meanwhile=None: target_outcome(lambda: self._call_target(queue, op, a, meanwhile)),
                read_target, self.bracket)
            if self._aside is not None:  # the model's side failed while the call was on the wire
                error, self._aside = self._aside, None
                raise error
            window = getattr(self.clock, "window", None)  # the server clock's (SC-2)
            if window is not None and spec.entry(op)["clock"]:
                step.at = window[2]
            self.judge_answer(step, model.last_dropped, self.target.dropped(queue))
        if op in spec.TRANSITIONS or op in spec.LANE_OPS:
            names = classify(op, step.model, was=was, dropped=bool(model.last_dropped), dead_before=failed_before,
                             dead_after=model.failed, args=args)
            for name in names:
                self.run.coverage.add(op, name)
                if currently_in_test_context():
                    event(f"{op}/{name}")
        if deferred:
            self._defer(step, model.last_dropped if op in CLAIMS else ())
        else:
            self.verify(queue, step, read[0] if read else None)
        return step.model

    def judge_answer(self, step: Step, mine: tuple[str, ...], theirs: tuple[str, ...]) -> None:
        """The step's answers equal (INV-8), and for a claim that ran the orphans it
        dropped (``mine`` the model's, ``theirs`` the target's; T-claim-5)."""
        if step.model != step.target or type(step.model) is not type(step.target):
            if (is_hang(step.target) and step.target.exc.stuck) or died(step.target):
                self.run.halt = True  # the server runs it still, or the driver died: no step follows
            raise self.diverge("answer", HANG_RULE if is_hang(step.target) else spec.entry(step.op)["rule"], step,
                               [f"model answered {step.model!r}", f"target answered {step.target!r}"])
        if step.op in CLAIMS and not isinstance(step.model, EmqError) and mine != theirs:
            raise self.diverge("answer", "T-claim-5", step, [f"model dropped {mine}", f"target dropped {theirs}"])

    def _defer(self, step: Step, dropped: tuple[str, ...]) -> None:
        """Hold the step in the window, its model side judged now (the model's snapshot
        and its invariants against the previous one); send the window when it is full, or
        when the model's snapshot breaks an invariant (the verdict is due at this step)."""
        assert self.window is not None
        mine, found = prepared = self._prepare(step.queue)
        self.previous[step.queue] = mine
        if self.window.add(Pending(step, dropped, prepared)) or found:
            self.drain()

    def drain(self) -> None:
        """Send the window's steps and judge them in order, exactly as step-by-step
        verification would: the first diverging step raises, a known difference is
        absorbed (see ``step``)."""
        if not self.window:
            return
        for done in self.window.flush():
            step = done.pending.step
            self._prepared = done.pending.prepared  # what verify takes of the model's side
            if step.op in faults.ARGS and not isinstance(done.answer, TargetFault):  # a hung window is judged as a call's
                if not self._check_fault(step, done.answer, done.snapshot):
                    return
                continue
            step.target = target_outcome(lambda: _given(done.answer))
            try:
                self.judge_answer(step, done.pending.dropped, done.dropped)
                self.verify(step.queue, step, done.snapshot)
            except Quiet:
                # As ``_absorb`` does step by step: the window goes on while both
                # keyspaces agree after the step; otherwise the example ends here, and
                # the steps generated after it are never judged.
                theirs = done.snapshot if done.snapshot is not None else self.target.snapshot(step.queue)
                if isinstance(step.target, Crash) or done.pending.prepared[0] != theirs:
                    self.stopped = True
                    return

    def teardown(self) -> None:
        """The example ended: judge what its window still holds and the queues whole
        (unless it already diverged); a deep run's steps after the fill and its end are
        timed apart (DEPTH-5), a diverging window's steps counted too."""
        diverged = self._diverged
        with self._ends_the_run():
            try:
                if not diverged:
                    self.drain()
            finally:  # DEPTH-5: the checked steps with the queues filled, the window's last too
                ended = time.perf_counter()
                if self._filled is not None:
                    deep, (since, steps) = self.run.deep, self._filled
                    deep.steps += self.run.steps - steps
                    deep.seconds += ended - since
            if not diverged:
                self.read_whole()
        if not self._diverged and not self.stopped:
            self._judge_whole()
        if self._filled is not None:
            self.run.deep.end_seconds += time.perf_counter() - ended

    def read_whole(self) -> None:
        """DEPTH-4: where snapshots were read by change, each queue is read whole once
        the example ended and held against the model's, so the verdict stays exact (a
        member swapped for one no candidate named keeps every cardinality)."""
        if not self.by_change or self.stopped or not self.steps:
            return
        for queue in QUEUES:
            if self.target.read_whole(queue):  # type: ignore[attr-defined]
                mine, theirs = self.models[queue].snapshot(), self._theirs(queue, self.steps[-1])
                if mine != theirs:
                    raise self.diverge("snapshot", "INV-8", self.steps[-1], diff(mine, theirs))

    def _call_target(self, queue: str, op: str, args: dict[str, Any], meanwhile: Callable[[], None] | None) -> Any:
        """``op`` on the target (``Target.call``); ``meanwhile`` (the model's side of the
        step) runs once, while the call is on the wire where the target can overlap them,
        followed by the model's half of ``verify``. Whatever that raises is kept aside
        for ``execute`` to raise: it is never the target's outcome."""
        if meanwhile is None:
            return self.target.call(queue, op, args)

        def aside() -> None:
            try:
                meanwhile()
                self._prepared = self._prepare(queue)
            except BaseException as exc:  # noqa: BLE001 - re-raised by execute
                self._aside = exc

        return self.target.call(queue, op, args, aside)

    def verify(self, queue: str, step: Step, theirs: Snapshot | BadReply | None = None) -> None:
        """INV-8 (snapshots equal), then INV-1..7 against the previous step. Once the two
        snapshots are equal, one ``check`` judges both sides: it is a pure function of the
        snapshot and the previous one, and the previous ones were equal too. Each call of
        ``verify`` is one checked step of the run. The model's snapshot and its ``check``
        may have been made while the target's call was on the wire (``_call_target``);
        ``theirs``, the target's snapshot when a window brought it back."""
        self.run.steps += 1
        prepared, self._prepared = self._prepared, None  # made for this step's queue
        mine, found = prepared if prepared else self._prepare(queue)
        theirs = self._theirs(queue, step, theirs)
        if not self._same(queue, step, mine, theirs):
            raise self.diverge("snapshot", "INV-8", step, diff(mine, theirs))
        self._agreed[queue] = (mine, theirs)
        self.run.checks += 8  # INV-1..7 on the shared snapshot, and INV-8
        if found:
            raise self.model_broke(step, [str(v) for v in found])
        self.previous[queue] = mine

    def _prepare(self, queue: str) -> tuple[Snapshot, list[Violation]]:
        """The model's side of a step's verification, made as soon as the model's step
        ran (a windowed step's long before its target's side is read): ``queue``'s
        snapshot and the violations of it that no fault of the operator explains
        (``_judge``, then ``Damage.excuses`` as the faults stand at this step)."""
        mine = self.models[queue].snapshot()
        judged = self._judge(queue, mine)
        model, damage = self.models[queue], self.damage[queue]
        if not model.spoiled:  # a spoiled location hides its members until mended
            damage.settle(mine)
        return mine, [v for v in judged if not damage.excuses(v, mine, model)]

    def _same(self, queue: str, step: Step, mine: Snapshot, theirs: Snapshot) -> bool:
        """INV-8: whether the two snapshots after ``step`` are equal. By the two sides'
        changes (``agree``, INC-4) when each brought the pair last found equal up to
        ``mine`` and ``theirs``; whole on any doubt: a raw call judged by every key, a
        first step, a read of the target's that was whole (an operator's fault is judged
        by its change, as a call is: the model notes every id it writes, the target's
        read names every key; a raw call judged by change too, DEPTH-6)."""
        if step.op in DOUBTS and not self.by_change:  # a run that reads by change judges a raw call so (DEPTH-6)
            return mine == theirs
        return self._same_now(queue, mine, theirs)

    def _same_now(self, queue: str, mine: Snapshot, theirs: Snapshot) -> bool:
        """INV-8 of ``queue``'s two snapshots now: by the two sides' changes when each
        brought the pair last found equal up to them (INC-4), else whole; a pair found
        equal is the one the next judgement starts from. A raw call's judge holds its
        call's snapshots to it (DEPTH-6); a queue beyond the machine's (a raw call's
        edge) is compared whole."""
        if queue not in self.models:
            return mine == theirs
        same = self._by_changes(queue, mine, theirs)
        if same is None:
            same = mine == theirs
        if same:
            self._agreed[queue] = (mine, theirs)
        return same

    def _by_changes(self, queue: str, mine: Snapshot, theirs: Snapshot) -> bool | None:
        """``agree`` of the two sides' changes from the pair last found equal to ``mine``
        and ``theirs``; None when either does not join it."""
        agreed = self._agreed.get(queue)
        if agreed is None:
            return None
        made = change_from(self.models[queue].last_change, agreed[0], mine)
        read = getattr(self.target, "last_change", None)
        got = change_from(read(queue), agreed[1], theirs) if read is not None and made is not None else None
        if made is None or got is None:
            return None
        return agree(agreed[0], made, got)

    def _judge(self, queue: str, mine: Snapshot) -> list[Violation]:
        """INV-1..7 and INV-9..14 of ``mine`` against the queue's previous snapshot: by
        what the step changed (``check_step``, INC-1) when the per-id violations of that
        previous snapshot are known, else whole (the example's first step, a step after a
        known difference: INC-4). A mended key ends the operator's episode: that step is
        judged against no step before it (FLT-4). Keeps ``mine``'s per-id violations."""
        previous, kept = self.previous.get(queue), self._carried.get(queue)
        carried: Carried | Since
        if previous is not None and kept is not None and kept[0] is previous:
            # the model's own change when it brought ``previous`` up to ``mine``, else the
            # reference diff of the two (INC-3)
            change = change_from(self.models[queue].last_change, previous, mine) or self._change_since(queue, previous, mine)
            if self.models[queue].spoiled:
                # FLT-4: while a key is spoiled every violation is the operator's; the ids
                # are judged again once it is mended, by what changed since (a deep
                # location's spoil and mend cost what they named, not its members)
                carried = kept[1] if isinstance(kept[1], Since) else Since(previous, kept[1])
                carried.add(change)
                judged: list[Violation] = []
            else:
                judged, carried = check_step(mine, previous, change, kept[1], against=not self._mended)
        else:
            judged, carried = check_whole(mine, None if self._mended else previous)
        self._carried[queue] = (mine, carried)
        return judged

    def _change_since(self, queue: str, previous: Snapshot, mine: Snapshot) -> Change:
        """The change from ``previous`` to ``mine``: the model's changes since composed
        when they lead there (a raw call's judge took a snapshot between), else the
        reference diff of the two (INC-3)."""
        model = self.models[queue]
        made = model.changes_since(previous) if model.last_change is not None and model.last_change[2] is mine else None
        return (composed(made) if made else None) or between(previous, mine)

    def _judge_whole(self) -> None:
        """The end of an example (INC-3, INC-4): each model's snapshot, kept up to date
        step by step, is the one built whole, the last two snapshots INV-8 found equal
        (by their changes, ``_same``) are equal whole, and each queue's last per-id
        violations, carried step by step, are the whole check's of its last snapshot
        (none are carried while a key is spoiled: ``Since``)."""
        for queue, model in self.models.items():
            previous, kept, agreed = self.previous.get(queue), self._carried.get(queue), self._agreed.get(queue)
            if model.snapshot() != model.built():
                wrong = "the model's snapshot kept step by step is not the one built whole"
            elif agreed is not None and agreed[0] != agreed[1]:
                wrong = "INV-8 by the two changes disagrees with the whole comparison"
            elif (previous is not None and kept is not None and kept[0] is previous
                    and not isinstance(kept[1], Since) and kept[1] != of_all(previous)):
                wrong = "the step check disagrees with the whole check"
            else:
                continue
            bug = KitBug(ModelBroken(f"queue {queue!r}: {wrong}"), "the step check")
            self.run.fatal = self.run.fatal or bug
            raise bug

    def model_broke(self, step: Step, lines: list[str]) -> KitBug:
        """The invariants (or LANE-F) broken in a keyspace the target shares with the
        model, and no fault explains it: the model's defect, never the target's
        (FLT-2)."""
        bug = KitBug(ModelBroken(f"after step {step.index} {step.call()}, in the keyspace the target shares "
                                 f"with the model: {'; '.join(lines)}"), "the model")
        self.run.fatal = self.run.fatal or bug  # raised from invariants too, outside _ends_the_run
        return bug

    def _theirs(self, queue: str, step: Step, given: Any = None) -> Snapshot:
        """The target's snapshot of ``queue`` after ``step`` (``given``: the one a window
        brought back). One that cannot be read — a reply of another shape, from a port's
        own snapshot.lua or a server answering ours wrongly — or that never returns (CC-9)
        is the step's snapshot divergence, never a kit error; so is a serverless driver's
        own snapshot that breaks the protocol, or its driver's death right after the step
        (an environment's exit 2, without a seed or a trace)."""
        try:
            theirs = self.target.snapshot(queue) if given is None else given
            if isinstance(theirs, BadReply):
                raise theirs
            return theirs
        except BadReply as exc:
            raise self.diverge("snapshot", "INV-8", step, [f"the target's snapshot cannot be read: {exc}"]) from None
        except ScriptHang as exc:  # a port's snapshot.lua that never returns (CC-9)
            self.run.halt = self.run.halt or exc.stuck  # the server runs it still: no step follows
            raise self.diverge("snapshot", HANG_RULE, step, [f"the target's snapshot did not return: {exc}"]) from None
        except TargetFault as exc:  # a serverless driver's own snapshot: malformed, or its driver died (DP-17)
            crash = Crash(exc)
            self.run.halt = self.run.halt or died(crash)
            raise self.diverge("snapshot", "INV-8", step, [f"the target's snapshot cannot be read: {crash!r}"]) from None

    # -- rules: producers --------------------------------------------------------------

    @initialize(a=BACKLOG.strategy)
    def backlog(self, a: Any) -> None:
        """Start most examples with work waiting, so claims find jobs early; a deep run
        first fills every queue with its background jobs (DEPTH-1), in the same
        initializer, so a depth draws nothing more."""
        depth = self.run.focus.depth
        started, steps = time.perf_counter(), self.run.steps
        for queue in QUEUES:
            self.fill(queue, depth)
        if depth:  # DEPTH-5: the fill's steps judged, timed and counted apart from those after it
            with self._ends_the_run():
                self.drain()
            for queue in QUEUES:
                self._orders(queue).prepare()  # the draws' orders of the filled queues, part of the fill
            deep, self._filled = self.run.deep, (time.perf_counter(), self.run.steps)
            deep.fill_steps += self.run.steps - steps
            deep.fill_seconds += self._filled[0] - started
            deep.jobs += depth * len(QUEUES)
        for i in range(a.n):
            self.step(QUEUES[0], "enqueue", {"id": POOL[(a.first + i) % len(POOL)], "payload": b"backlog"})

    def fill(self, queue: str, depth: int) -> None:
        """``depth`` background jobs into ``queue`` through the target's own ops, each call
        a step checked as any other (DEPTH-1): ``enqueue_many`` of ``FILL`` jobs where
        the target takes batches, else one ``enqueue`` a job."""
        jobs = [(job, b"") for job in background(depth)]
        if self.target.capabilities.batches and self.run.focus.allows("enqueue_many"):
            for at in range(0, depth, FILL):
                self.step(queue, "enqueue_many", {"jobs": jobs[at:at + FILL]})
        else:
            for job, payload in jobs:
                self.step(queue, "enqueue", {"id": job, "payload": payload})

    @rule(a=ENQUEUE.strategy)
    def enqueue(self, a: Any) -> None:
        self.step(a.q, "enqueue", {"id": a.job, "payload": a.payload}, spoil=self._spoil(a))

    @rule(a=SCHEDULE.strategy)
    def schedule(self, a: Any) -> None:
        """Both and neither of run_at and delay_ms are refused (T-schedule-1)."""
        how = a.how
        absent = self.run.focus.absent.get("schedule", ())
        if how in absent or (how in ("both", "neither") and (absent or self.run.focus.hostile == "off")):
            how = "run_at" if "run_at" not in absent else "delay_ms"  # the form the port has
        at = {"delay_ms": {"delay_ms": max(a.when, 0)}, "run_at": {"run_at": max(self.now + a.when, 0)},
              "both": {"delay_ms": 1, "run_at": self.now}, "neither": {}}[how]
        self.step(a.q, "schedule", {"id": a.job, "payload": a.payload, **at}, spoil=self._spoil(a))

    # -- rules: workers ----------------------------------------------------------------
    # A claim is kept forever (``self.kept``), so its token comes back stale after reaps,
    # retries and reclaims, and foreign when sent to the other queue.

    @rule(a=CLAIM.strategy)
    def claim(self, a: Any) -> None:
        got = self.step(a.q, "claim", {"lease_ms": a.lease}, spoil=self._spoil(a))
        if isinstance(got, Claimed):
            self.kept.append((a.q, got.id, got.token))

    @precondition(lambda self: self.kept)
    @rule(a=SETTLE.strategy)
    def settle(self, a: Any) -> None:
        """A worker settles a claim it kept, maybe long after it went stale, maybe
        against the other queue."""
        q, job, token = self._kept(a.pick)
        op = self._offered(a.op, SETTLES)
        self.step(self._other(q) if a.foreign else q, op, self._settle_args(op, a, job, token), spoil=self._spoil(a))

    @precondition(lambda self: self._any_holder())
    @rule(a=WORK.strategy)
    def work(self, a: Any) -> None:
        """The holder of a job's latest token settles it: from active, late from pending
        after a reap, or too late from schedule or dead. A skewed token is the previous holder's (-1) or one never
        handed out (+1): both must be refused while the job is live (EMQSTALE)."""
        q, job, token = self._holder(a.pick)
        op = self._offered(a.op, SETTLES)
        self.step(q, op, self._settle_args(op, a, job, max(token + a.skew, 1)), spoil=self._spoil(a))

    # -- rules: batches (one script call for many items; the model's loop is the oracle) -
    # A target without them (``batches = False``: a port's driver, B-4) never gets them.

    @precondition(lambda self: self.target.capabilities.batches)
    @rule(a=ENQUEUE_MANY.strategy)
    def enqueue_many(self, a: Any) -> None:
        self.step(a.q, "enqueue_many", {"jobs": [a.item0, a.item1, a.item2, a.item3][: a.n]})

    @precondition(lambda self: self.target.capabilities.batches)
    @rule(a=CLAIM_MANY.strategy)
    def claim_many(self, a: Any) -> None:
        got = self.step(a.q, "claim_many", {"n": a.n, "lease_ms": a.lease})
        if isinstance(got, list):
            self.kept.extend((a.q, c.id, c.token) for c in got)

    @precondition(lambda self: self.kept and self.target.capabilities.batches)
    @rule(a=COMPLETE_MANY.strategy)
    def complete_many(self, a: Any) -> None:
        """Settle several kept claims in one call, on the first one's queue: the others'
        tokens may be stale, or foreign."""
        kept = [self._kept(p) for p in (a.pick0, a.pick1, a.pick2)[: a.n]]
        self.step(kept[0][0], "complete_many", {"jobs": [(job, token) for _, job, token in kept]})

    # -- rules: pumps and operators ----------------------------------------------------

    @rule(a=PROMOTE.strategy)
    def promote(self, a: Any) -> None:
        self._advance(a.q, "schedule", a.at)
        self.step(a.q, "promote", {"limit": a.limit}, spoil=self._spoil(a))

    @rule(a=REAP.strategy)
    def reap(self, a: Any) -> None:
        self._advance(a.q, "active", a.at)
        self.step(a.q, "reap", {"limit": a.limit, "max_attempts": a.cap}, spoil=self._spoil(a))

    @rule(a=REPROCESS.strategy)
    def reprocess(self, a: Any) -> None:
        self.step(a.q, "reprocess", {"id": self._pick(a.q, "dead", a.pick, a.job)}, spoil=self._spoil(a))

    @rule(a=REMOVE.strategy)
    def remove(self, a: Any) -> None:
        """A remove of a member of the drawn location; a scheduled one is scheduled first
        when there is none (jobs leave schedule soon, promoted as the clock moves on: a
        seeded run of 25,000 steps removed no scheduled job)."""
        if a.where == "schedule" and a.pick is not None and not self.models[a.q].sets["schedule"]:
            job = self._free(a.q)
            if job is not None and self.run.focus.allows("schedule"):
                when = {"run_at": self.now + 50} if "delay_ms" in self.run.focus.absent.get("schedule", ()) \
                    else {"delay_ms": 50}
                self.step(a.q, "schedule", {"id": job, "payload": b"s", **when})
        self.step(a.q, "remove", {"id": self._pick(a.q, a.where, a.pick, a.job)}, spoil=self._spoil(a))

    @rule(a=READ.strategy)
    def read(self, a: Any) -> None:
        which = self._offered(a.which, READS)
        args = {"browse": {"n": a.n}, "counts": {}, "state": {"id": a.job}, "job": {"id": a.job}}[which]
        self.step(a.q, which, args, spoil=self._spoil(a))

    @precondition(lambda self: any(_any_waiting(m) for m in self.models.values()))
    @rule(a=VANDALIZE.strategy)
    def vandalize(self, a: Any) -> None:
        """An operator deletes the row of a waiting member's id by hand, plain or in a
        lane: claim must drop the orphan (T-claim-2, T-lane_claim-2), never resurrect it;
        an id reused meanwhile (the pool is small) must not be served from the lane
        (lifecycle.md §8). A lane's orphan may share its id with a job elsewhere, even an
        active one: its row goes then (FLT-3, FLT-6)."""
        lanes = [m for lane in self.models[a.q].lanes.pending.values() for m in lane]
        pending = self._orders(a.q).sorted_members("pending")
        if pending or lanes:
            self.forget(a.q, pick_of_union(pending, lanes, a.pick))

    def forget(self, queue: str, job: str) -> None:
        """Delete ``job``'s row by hand on both sides, then check (a trace step too)."""
        self.inject(queue, "forget_row", {"id": job})

    def inject(self, queue: str, op: str, args: dict[str, Any]) -> None:
        """Inject the fault ``op`` (emq_kit/check/faults.py) on both sides after every call
        before it, then check (a trace step too). Putting a spoiled key back ends the
        operator's episode: the next step is judged against the mended keyspace only.

        A target that takes calls ahead takes the fault in the window, as a call: its
        commands follow the calls before it on the same connection. A mend judges first
        a window that holds a spoil: it puts back what the spoil read (DUMP), which comes
        back when the window is judged."""
        with self._ends_the_run():
            self._inject(queue, op, args)

    def _inject(self, queue: str, op: str, args: dict[str, Any]) -> None:
        if self.stopped:
            return
        ahead = self.window is not None and self.target.capabilities.ahead
        if not ahead or (op == "mend_key" and self.window is not None and self.window.holds("spoil_key")):
            self.drain()
            if self.stopped:
                return
        self.count(op)
        step = self._record(queue, op, args)
        self._prepared = None
        self.damage[queue].note(self.models[queue], op, args)
        faults.on_model(self.models[queue], op, args)
        self._mended = op == "mend_key"  # FLT-4: judged against no step before it
        try:
            if ahead:
                self._defer(step, ())
            else:
                faults.on_target(self.target, queue, op, args)
                self._check_fault(step, None, None)
        finally:
            self._mended = False

    def _check_fault(self, step: Step, error: Exception | None, theirs: Snapshot | BadReply | None) -> bool:
        """Check the fault ``step`` (``verify``; ``theirs``, the snapshot a window brought
        back), or raise ``error``, what its commands met, as they would have raised it
        sent one by one. Whether the example goes on (no: the keyspaces disagree)."""
        if error is not None:
            raise error
        try:
            self.verify(step.queue, step, theirs)
        except Quiet:
            self.stopped = True  # the keyspaces disagree
        return not self.stopped

    def sleep(self, ms: int) -> None:
        """A trace's ``sleep_ms`` step (specs/trace.md TR-2): the clock moves on ``ms``
        past the last clock op's (under the server clock a real wait, ``Clock.sleep``)."""
        if self.stopped:
            return
        self.drain()
        self._record("", SLEEP, {"ms": ms})
        with self._ends_the_run():
            self._clock_to(self.clock.sleep(self.now, ms))

    # -- rules: the clock ----------------------------------------------------------------

    @rule(delta=st.integers(0, 25))
    def tick(self, delta: int) -> None:
        if self.stopped:
            return
        with self._ends_the_run():  # the server clock waits on TIME
            self._clock_to(self.clock.advance(min(self.now + delta, spec.LIMITS["ms_max"])))

    # -- rules: hostile callers ----------------------------------------------------------

    @rule(name=st.sampled_from(BAD_QUEUES))
    def bad_queue(self, name: Any) -> None:
        """KS-3: a bad queue name is refused before any key exists, on both sides."""
        self.open_queue(name)

    def open_queue(self, name: Any) -> None:
        """Open a queue by name (the rule draws names KS-3 refuses): both sides refuse it
        alike, or both accept it (a trace's step may name any)."""
        if self.stopped:
            return
        self.count("queue")
        model = outcome(lambda: QueueModel(name))
        target = target_outcome(lambda: self.target.queue(name))
        step = self._record("", "queue", {"name": name})
        step.model, step.target = model, target
        accepted = not isinstance(model, EmqError) and not isinstance(target, (EmqError, Crash))
        if not (accepted or isinstance(model, EmqError) and model == target):
            self.drain()  # a refused name touches no key: only a divergence waits for the window
            if self.stopped:
                return
            try:
                raise self.diverge("answer", "KS-3", step, [f"model: {model!r}", f"target: {target!r}"])
            except Quiet:
                self._absorb("")

    # -- helpers -------------------------------------------------------------------------

    def _pick(self, q: str, loc: str, pick: int | None, fallback: str) -> str:
        """A member of the model's ``loc`` chosen by ``pick`` (so the op meets the state
        it cares about), or ``fallback`` when ``pick`` is None or the location is empty."""
        members = self._orders(q).sorted_members(loc)
        return members[pick % len(members)] if members and pick is not None else fallback

    def _orders(self, q: str) -> Orders:
        """The kept orders of ``q``'s model (made anew for a model that replaced it)."""
        kept = self.orders.get(q)
        if kept is None or kept.model is not self.models[q]:
            kept = self.orders[q] = Orders(self.models[q])
        return kept

    def _holder(self, pick: int) -> tuple[str, str, int]:
        """(queue, id, token) of the ``pick``-th (modulo their number) job whose latest
        token a worker may still hold (attempts >= 1), by queue, then location (active
        ones; pending ones: a reap's leftovers, a late ack; ones already settled into
        schedule or dead, whose holder must now be refused: the reference's defect,
        complete or retry from schedule/dead), then id."""
        held = [(q, order) for q in self.models for order in self._holding(q)]
        n = pick % sum(len(order) for _, order in held)
        for q, order in held:
            if n < len(order):
                return q, order[n], int(self.models[q].rows[order[n]]["attempts"])
            n -= len(order)
        raise AssertionError("a holder picked past the last")

    def _holding(self, q: str) -> list[list[str]]:
        """The holders of ``q`` by location, each sorted (see ``_holder``)."""
        orders = self._orders(q)
        return [orders.sorted_holders(loc) for loc in ("active", "pending", "schedule", "dead")]

    def _any_holder(self) -> bool:
        """Whether a job has a holder (a precondition, asked every step)."""
        return any(order for q in self.models for order in self._holding(q))

    def _advance(self, q: str, loc: str, at: At) -> None:
        """Move the clock forward to a score of ``loc`` (a lease deadline or a run-at)
        minus one, on it, or one past it: the boundaries where `<` and `<=` differ."""
        marks = self._orders(q).sorted_marks(loc)
        if at is not None and marks and not self.stopped:
            pick, offset = at
            # a raw call's edge may leave a score at the clock's last ms: never step past it
            to = min(marks[pick % len(marks)] + offset, spec.LIMITS["ms_max"])
            with self._ends_the_run():
                self._clock_to(self.clock.advance(max(self.now, to)))

    def _kept(self, pick: int) -> Kept:
        """A kept claim: 0 is the newest."""
        return self.kept[-1 - pick % len(self.kept)]

    def _offered(self, op: str, family: tuple[str, ...]) -> str:
        """``op``, or the op of its family the focus allows in its place (a rule with
        no allowed op of its family is off, see ``Selection``)."""
        allowed = [o for o in family if self.run.focus.allows(o)]
        return op if op in allowed else allowed[family.index(op) % len(allowed)]

    @staticmethod
    def _settle_args(op: str, a: Any, job: str, token: int) -> dict[str, Any]:
        """The arguments of the settle ``op`` (``a`` carries its delay, cap and lease)."""
        extra = {"complete": {}, "retry": {"delay_ms": a.delay, "max_attempts": a.cap, "error": "boom"},
                 "extend": {"lease_ms": a.lease}}[op]
        return {"id": job, "token": token, **extra}

    def _other(self, q: str) -> str:
        return QUEUES[1 - QUEUES.index(q)]

    def _clock_to(self, now: int) -> None:
        """The machine's clock moves to ``now``, a time the ops accept (0 to ``ms_max``):
        checked where it moves, the only places it does, rather than after every step."""
        assert 0 <= now <= spec.LIMITS["ms_max"], f"the machine's clock left its range: {now}"
        self.now = now


def _spoiled(op: str, args: dict[str, Any], spoil: tuple[int, int], absent: tuple[str, ...] = ()) -> dict[str, Any]:
    """``args`` with one argument (the clock counts as one) replaced by a value outside
    its type from the spec table: the refusal must be that type's code. An argument the
    target declared ``absent`` is never sent, so never spoiled."""
    table = [a for a in spec.entry(op)["args"] if a["name"] not in absent]
    table += [{"name": "now", "type": "time", "optional": True}] if "now" in args else []
    if not table:
        return args
    victim = table[spoil[0] % len(table)]
    bad = bad_values(victim)
    return {**args, victim["name"]: bad[spoil[1] % len(bad)]}

"""The BullMQ layout (specs/layouts/bullmq.md) behind the kit's layout boundary: its
target (BullMQ's unmodified scripts on a server, ``emq_live/layouts/bullmq.py``), its
conformance machine (``BullConformance``: the ``BullModel`` and the scripts side by side,
after every step equal replies, equal projections and BQ-INV-1..4 on the scripts'
projection), its coverage cells (op x outcome of bullmq.json) and its replay.

The machine is Hypothesis's, like the four-set one: rules draw their arguments packed
in one choice (``Draw``) and ``Selection`` picks the rule, so a counterexample shrinks
field by field; the draws are those of ``emq_model/layouts/bullmq_steps.py`` (ids mostly
from the location the op needs, tokens mostly the holder's, the no-lock token ``"0"``
only on a job that holds no lock: on a locked one it is finding F-2, reproduced by its
own test). The run's retention is drawn per example and recorded as the trace's first
step (``retention``), so a replay meets the same settings.
"""

from __future__ import annotations

from typing import Any

from hypothesis import event
from hypothesis.control import currently_in_test_context
from hypothesis.stateful import initialize, precondition, rule

from emq_kit._signals import Quiet
from emq_kit.check.base import Machine
from emq_kit.check.coverage import Coverage
from emq_kit.check.draws import Draw
from emq_kit.check.step import Divergence, Step, outcome, target_outcome
from emq_kit.check.tally import Run
from emq_kit.check.target import unavailable
from emq_kit.errors import AuditError, BadArgument, TargetUnavailable
from emq_kit.layouts import Layout
from emq_kit.targets.protocol import Capabilities
from emq_model.layouts.bullmq import NO_LOCK, BullModel, Retention, arg_ok, check_projection, diff, table
from emq_model.layouts.bullmq_steps import CUSTOM_LOW, UNKNOWN_ID

QUEUE = table()["queue"]  # the one queue a run drives; every step names it
LOGICAL = QUEUE[1:-1]  # its name inside the braces: on a server, the run's own (OWN-2)
START = 1_000_000  # the virtual clock's first reading (ms)
CONTRACT = "specs/layouts/bullmq.json"
RETENTION_OP = "retention"  # the pseudo-op that sets the example's retention (a trace step)

# Where a drawn id comes from: the location the op needs (mostly), any id the model
# knows, or one never added. A token: the holder's (mostly), an old one (a late worker),
# or the no-lock token, drawn only for a job that holds no lock.
WHOSE = ("pool",) * 16 + ("known",) * 3 + ("unknown",)
TOKEN = ("holder",) * 17 + ("old",) * 2 + ("nolock",)
PICK = range(64)
KEEP = (-1, 0, 2)

RETAIN = Draw("Retain", completed=KEEP, failed=KEEP, backlog=range(5))
ADD = Draw("Add", custom=(None,) * 84 + tuple(range(21)), delay=(0, 0, 0, 100, 500), priority=(0, 0, 0, 1, 2),
           lifo=(False,) * 4 + (True,))
TAKE = Draw("Take", nolock=(False,) * 32 + (True,))
SETTLE = Draw("Settle", op=("complete", "fail", "retry", "backoff", "extend"), whose=WHOSE, pick=PICK,
              token=TOKEN, old=PICK, delay=(0, 100, 500))
CHOOSE = Draw("Choose", whose=WHOSE, pick=PICK)
REPROCESS = Draw("Reprocess", state=("failed", "completed"), whose=WHOSE, pick=PICK,
                 reset=(False,) * 7 + (True,) * 3)
TICK = Draw("Tick", ms=(0, 1, 50, 400))


class BullCheckTarget:
    """BullMQ's scripts on one server as the kit's target: the ops are ``bull``'s
    (``BullTarget``), ``reset`` empties the queue's keys, ``describe`` names the server,
    the layout and the bullmq version (printed in every report and trace header)."""

    # another calling convention: no raw calls of ours (emq_kit/check/raw/rule.py), no windows
    capabilities = Capabilities()
    conn = None
    notes: tuple[str, ...] = ()
    stuck = False

    def __init__(self, url: str, scripts: str | None = None, name: str = LOGICAL) -> None:
        import redis

        from emq_live.layouts.bullmq import BullTarget

        self.url, self.name = url, name
        self.client = redis.Redis.from_url(url)
        self.bull = BullTarget(self.client, scripts=scripts, name=name)

    def reset(self) -> None:
        self.bull.wipe()

    def describe(self) -> dict[str, Any]:
        from emq_live.urls import redact

        info = self.client.info("server")
        name = "valkey" if "valkey_version" in info else "redis"
        version = info.get("valkey_version") or info.get("redis_version")
        return {
            "target": redact(self.url),
            "server": f"{name} {version}",
            "layout": "bullmq",
            "bullmq": self.bull.version,
            "scripts": f"bullmq {self.bull.version} " + (self.bull.scripts_dir or "(package)"),
            "contract": CONTRACT,
            "queues": {LOGICAL: self.name},
        }

    def close(self) -> None:
        self.client.close()


def open_target(url: str | None = None, scripts: str | None = None, driver: str | None = None, *,
                clock: str = "virtual", timeout: float | None = None, observe: bool = True,
                partial: bool = False, names: Any = None) -> BullCheckTarget:
    """BullMQ's scripts on ``url``. No server (the embedded fakeredis) is refused with the
    reason (its Lua has no cmsgpack, BQ-17), as are a driver and the server clock (BullMQ
    takes every timestamp as an argument: the virtual clock is the only one). Every way
    it can fail is a ``TargetUnavailable`` or ``BadArgument``, one line."""
    import redis

    from emq_live.layouts.bullmq import NO_CMSGPACK, LayoutUnavailable

    if driver is not None:
        raise BadArgument("the bullmq layout has no driver: it runs BullMQ's scripts itself")
    if clock != "virtual":
        raise BadArgument("the bullmq layout runs on the virtual clock only (its scripts take timestamps)")
    if url is None:
        raise TargetUnavailable(NO_CMSGPACK)
    try:
        return BullCheckTarget(url, scripts, LOGICAL if names is None else names.server(LOGICAL))
    except LayoutUnavailable as exc:
        raise TargetUnavailable(exc.reason) from None
    except (FileNotFoundError, ConnectionError, redis.exceptions.ConnectionError, redis.exceptions.TimeoutError,
            redis.exceptions.InvalidResponse, redis.exceptions.RedisClusterException, ValueError) as exc:
        # InvalidResponse: a server that does not speak RESP answered (an HTTP server, say)
        raise unavailable(exc, url) from None


def cells() -> list[tuple[str, str]]:
    """Every (op, outcome) cell of bullmq.json, in table order."""
    return [(op, o) for op, d in table()["ops"].items() for o in d["outcomes"]]


def classify(model: BullModel, op: str, args: dict[str, Any], answer: Any, duplicate: bool) -> str:
    """The outcome of one call: its cell's name (bullmq.json, ``outcomes``)."""
    if op == "add":
        if duplicate:
            return "duplicate"
        return ("delayed" if args["delay"] else "prioritized" if args["priority"]
                else "lifo" if args["lifo"] else "wait")
    if op == "take":
        return "empty" if answer[0] is None else "unlocked" if args["token"] == NO_LOCK else "taken"
    if op == "check_stalled":
        if not answer:
            return "none"
        past = any(int(model.hashes[j].get("stc", "0")) > model.max_stalled for j in answer if j in model.hashes)
        return "deferred" if past else "moved"
    return str(answer)


RULE_OPS: dict[str, tuple[str, ...]] = {
    "add": ("add",), "take": ("take",), "settle": ("complete", "fail", "retry", "backoff", "extend"),
    "promote": ("promote",), "check_stalled": ("check_stalled",), "lapse": ("lapse",), "remove": ("remove",),
    "reprocess": ("reprocess",),
}
"""The ops each rule may send (``Machine.rule_ops``)."""
WEIGHTS = {"add": 5, "take": 8, "settle": 8, "check_stalled": 4, "lapse": 3, "tick": 3, "promote": 2,
           "reprocess": 2, "remove": 1}
"""How often ``Selection`` picks each rule: takes as often as settles, so most settles
find an active job with a lock (a wrong token then meets the lock: the -6 cells); the
stalled-job checker and lapsing locks often enough that one job stalls twice
(``check_stalled/deferred``); removals rare (each one empties a location)."""


class BullConformance(Machine):
    """``BullModel`` vs BullMQ's scripts, step by step. Build with ``factory`` (the clock
    is always virtual: ``open_target`` refused any other). The bookkeeping, divergences
    and endings are ``Machine``'s (emq_kit/check/base.py)."""

    target: BullCheckTarget
    weights, rule_ops = WEIGHTS, RULE_OPS

    def begin(self) -> None:
        """A fresh model at ``START``; no token handed out yet."""
        self.now = START
        self.model = BullModel(max_stalled=table()["run"]["max_stalled"])
        self.tokens: list[str] = []

    # -- the one way a step runs ----------------------------------------------------

    def call(self, op: str, args: dict[str, Any]) -> None:
        """A rule's step (``execute``); a known difference ends the example quietly (no
        more calls), a lost server the run."""
        if self.stopped:
            return
        with self._ends_the_run():
            try:
                self.execute(op, args)
            except Quiet:
                self.stopped = True

    def execute(self, op: str, args: dict[str, Any]) -> Any:
        """Run ``op`` with exactly ``args`` on the model and the scripts, then check the
        replies, the projections and the invariants (what ``emq replay`` repeats)."""
        step = self._record(QUEUE, op, args)
        if op == RETENTION_OP:
            self.model.retention = self.target.bull.retention = Retention(**args)
        else:
            duplicate = op == "add" and bool(args["job_id"]) and args["job_id"] in self.model.hashes
            step.model = outcome(lambda: getattr(self.model, op)(**args))
            step.target = target_outcome(lambda: getattr(self.target.bull, op)(**args))
            rule_id = table()["ops"][op]["rule"]
            if step.model != step.target or type(step.model) is not type(step.target):
                raise self.diverge("answer", rule_id, step,
                                   [f"model answered {step.model!r}", f"target answered {step.target!r}"])
            cell = classify(self.model, op, args, step.model, duplicate)
            self.run.coverage.add(op, cell)
            if currently_in_test_context():
                event(f"{op}/{cell}")
        self.verify(step)
        return step.model

    def verify(self, step: Step) -> None:
        """The projections equal, then BQ-INV-1..4 on the scripts' projection."""
        self.run.steps += 1
        mine, theirs = self.model.projection(), self.target.bull.projection()
        if mine != theirs:
            raise self.diverge("snapshot", "BQ-projection", step, diff(mine, theirs))
        self.run.checks += 5  # the projection, BQ-INV-1..4
        bad = check_projection(theirs)
        if bad:
            raise self.diverge("invariant", bad[0].split()[0], step, bad)

    # -- rules ------------------------------------------------------------------------

    @initialize(a=RETAIN.strategy)
    def retention(self, a: Any) -> None:
        """keepJobs.count of each finished set for the example (keep all, remove, keep 2),
        then most examples start with work waiting, so takes find jobs early."""
        self.call(RETENTION_OP, {"completed": a.completed, "failed": a.failed})
        for _ in range(a.backlog):
            self.call("add", {"job_id": "", "now": self.now, "delay": 0, "priority": 0, "lifo": False})

    @rule(a=ADD.strategy)
    def add(self, a: Any) -> None:
        custom = "" if a.custom is None else str(CUSTOM_LOW + a.custom)
        self.call("add", {"job_id": custom, "now": self.now, "delay": a.delay, "priority": a.priority,
                             "lifo": a.lifo})

    @rule(a=TAKE.strategy)
    def take(self, a: Any) -> None:
        if a.nolock:
            token = NO_LOCK
        else:
            self.tokens.append(f"t{len(self.tokens) + 1}")
            token = self.tokens[-1]
        self.call("take", {"token": token, "now": self.now})

    @rule(a=SETTLE.strategy)
    def settle(self, a: Any) -> None:
        """A worker finishes, fails, retries, backs off or extends: mostly an active job
        with its holder's token."""
        job = self._id(a.whose, a.pick, self.model.active)
        token = self._token(job, a.token, a.old)
        args: dict[str, Any] = {"job_id": job, "token": token}
        if a.op != "extend":
            args["now"] = self.now
        if a.op == "backoff":
            args["delay"] = a.delay
        if a.op in ("complete",):
            args["value"] = f"{a.op}-{self.now}"
        elif a.op != "extend":
            args["reason"] = f"{a.op}-{self.now}"
        self.call(a.op, args)

    @rule(a=CHOOSE.strategy)
    def promote(self, a: Any) -> None:
        self.call("promote", {"job_id": self._id(a.whose, a.pick, self._ordered("delayed"))})

    @rule()
    def check_stalled(self) -> None:
        self.call("check_stalled", {"now": self.now})

    @precondition(lambda self: self.model.locks)
    @rule(a=CHOOSE.strategy)
    def lapse(self, a: Any) -> None:
        """A holder dies: its lock's TTL runs out."""
        self.call("lapse", {"job_id": self._id(a.whose, a.pick, sorted(self.model.locks))})

    @rule(a=CHOOSE.strategy)
    def remove(self, a: Any) -> None:
        self.call("remove", {"job_id": self._id(a.whose, a.pick, sorted(self.model.hashes))})

    @rule(a=REPROCESS.strategy)
    def reprocess(self, a: Any) -> None:
        job = self._id(a.whose, a.pick, self._ordered(a.state))
        self.call("reprocess", {"job_id": job, "state": a.state, "reset": a.reset})

    @rule(a=TICK.strategy)
    def tick(self, a: Any) -> None:
        self.now += a.ms

    # -- helpers ----------------------------------------------------------------------

    def _ordered(self, loc: str) -> list[str]:
        return sorted(self.model.zsets[loc])

    def _id(self, whose: str, pick: int, pool: list[str]) -> str:
        """An id of ``pool`` (the location the op needs), else any known id, else one
        never added."""
        known = sorted(self.model.hashes)
        if whose == "pool" and pool:
            return pool[pick % len(pool)]
        if whose != "unknown" and known:
            return known[pick % len(known)]
        return UNKNOWN_ID

    def _token(self, job: str, how: str, old: int) -> str:
        held = self.model.locks.get(job)
        if held is not None and how == "holder":
            return held
        if held is None and how == "nolock":
            return NO_LOCK
        # A late worker's token: one handed out before, never the holder's (that one
        # is "holder"), so a lock held under another token answers -6.
        others = [t for t in self.tokens if t != held]
        return others[-1 - old % len(others)] if others else "t0"


def replay(steps: list[Step], target: BullCheckTarget, clock: Any = None) -> Any:
    """Re-run a trace's steps on a fresh model and ``target`` (reset first)."""
    from emq_kit.check.step import Replayed

    machine = BullConformance.factory(target, Run(coverage=Coverage(cells())))()
    done: list[Step] = []
    for s in steps:
        try:
            machine.execute(s.op, s.args)
        except Divergence as d:
            done.append(Step(s.queue, s.op, s.args, d.step.model, d.step.target, index=len(done) + 1))
            return Replayed(done, d, len(done))
        last = machine.steps[-1]
        done.append(Step(s.queue, s.op, s.args, last.model, last.target, index=len(done) + 1))
    return Replayed(done)


def step_args(op: str) -> tuple[set[str], set[str]] | None:
    """The (required, allowed) arguments of a trace step's ``op``: the table's op
    arguments (the machine sends every one), or the retention pseudo-op's."""
    if op == RETENTION_OP:
        return {"completed", "failed"}, {"completed", "failed"}
    entry = table()["ops"].get(op)
    return None if entry is None else (set(entry["args"]), set(entry["args"]))


def check_values(where: str, op: str, queue: str, encoded: dict[str, Any]) -> None:
    """Every argument of a trace step at ``where`` (``steps/3``) against what the run
    sends for it (``arg_ok``: the adapter refuses anything else before sending it, so a
    replay of another value would judge a call BullMQ never received): ``TraceError``
    naming the first that is not."""
    from emq_kit.errors import TraceError

    for name, value in encoded.items():
        if not arg_ok(op, name, value):
            raise TraceError(f"{where}/args/{name}: {value!r:.80} is no {name} the bullmq layout sends "
                             f"({op}'s arguments as its adapter checks them)")


def audit(url: str) -> tuple[dict[str, int], list[str]]:
    """A read-only audit of the layout's queue on ``url``: each location's size and
    BQ-INV-1..4 on the projection of every job the keys show. Nothing is written (the
    scripts are never called; only SCAN and reads)."""
    import re

    import redis

    from emq_live.urls import redact

    target = open_target(url)
    try:
        target.bull.discover()
        seen = target.bull.projection()
    except redis.exceptions.ResponseError as exc:
        if "WRONGTYPE" not in str(exc):
            raise
        # BQ-20: emq:{q}: is also the prefix of a user's EchoMQ queue named q; a key of
        # another type than the layout's is no projection to judge, and no kit bug.
        read = re.search(r"\((\S+) (\S+)", str(exc))
        key = f"{read.group(2)} (read with {read.group(1)})" if read else "a key"
        raise AuditError(f"{redact(url)}: {key} holds another type than the bullmq layout gives it: the keys "
                         f"under {target.bull.base} are not the layout's queue") from None
    finally:
        target.close()
    from emq_model.layouts.bullmq import LOCATIONS

    return {loc: len(seen.location(loc)) for loc in LOCATIONS}, check_projection(seen)


LAYOUT = Layout(
    name="bullmq",
    contract=CONTRACT,
    cells=cells,
    open_target=open_target,
    machine=BullConformance.factory,
    replay=replay,
    step_args=step_args,
    check_values=check_values,
    queues=(QUEUE,),
    logical=lambda: (LOGICAL,),
    audit=audit,
    settings=(RETENTION_OP,),
)

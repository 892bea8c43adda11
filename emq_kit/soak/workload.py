"""``emq soak``: many processes on one queue of a real server, then the accounting of
every job, the invariants of every snapshot and the linearizability of the history.

The run (specs/soak.md is the contract; this module is the I/O shell around the pure
``history``, ``ledger`` and ``linearize``):

- producers enqueue (and schedule some) jobs at a steady rate; workers claim and then,
  by a seeded die, complete, fail (retry, dead past ``max_attempts``), extend a long job,
  overrun the lease, or crash — the process exits holding the claim and is restarted, so
  the reaper must recover the job; a reaper (with ``max_attempts``) and a promoter tick;
- every process is a separate OS process (``multiprocessing``, forked: a crashed worker
  is back in milliseconds; call ``run_soak`` from a process without other threads) with
  its own connection; every call is recorded with ``time.monotonic_ns`` (CLOCK_MONOTONIC: one
  clock for every process of the machine) and, for ops that read the clock, the server's
  ``TIME`` just before and after — the window holding the ``now`` the script used. No
  call passes a clock: the server's clock decides leases;
- the coordinator (this process) reads snapshots with the read-only snapshot script as it
  goes and checks INV-1..6 on each, INV-5/7 against the previous one;
- at the end: the final snapshot, the ledger accounting, the history check.

Without ``--url`` a throwaway ``valkey-server`` is started (emq_kit.server): fakeredis
lives inside one process and cannot be shared by worker processes.

Processes are always cleaned up: children die with the coordinator (PR_SET_PDEATHSIG on
Linux), every loop is bounded in count and time, and shutdown joins, then terminates,
then kills.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import random
import shutil
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from emq_kit import bounds, interrupts
from emq_kit.check.names import new_suffix
from emq_kit.errors import SoakError
from emq_kit.forks import StopFlag, die_with_parent, interrupts_deferred
from emq_kit.redaction import open_text, write_text
from emq_kit.report.verdicts import verdict
from emq_kit.soak import history, lanes, linearize
from emq_kit.soak.history import SNAPSHOT, Event, payload_text
from emq_kit.soak.ledger import Accounting, account
from emq_model import invariants, spec
from emq_model.branded_id import MAX_NODE, Minter
from emq_model.errors import EmqError
from emq_model.lanes import LaneClaimed
from emq_model.model import Claimed
from emq_model.snapshot import Snapshot

QUEUE = "soak"
"""The run's one queue, by its logical name (on the server ``soak-<suffix>``, SOAK-2)."""

CRASHED = 86
"""Exit code of a worker that crashes on purpose (it is restarted)."""

FAILURE = b"soak: simulated failure"


FATES = ("crash", "fail", "overrun", "long")
"""What a worker may do with a claim besides completing it at once (``SoakConfig``)."""


DEFAULTS: dict[str, Any] = json.loads(spec.text("soak.json"))["defaults"]
"""The defaults of every knob, from specs/soak.json (its ``help`` says what each does)."""


@dataclass(frozen=True)
class SoakConfig:
    """What a soak does (specs/soak.json). Probabilities are per claim and exclusive (the
    rest complete at once)."""

    workers: int = DEFAULTS["workers"]
    jobs: int = DEFAULTS["jobs"]
    seconds: float = DEFAULTS["seconds"]
    producers: int = DEFAULTS["producers"]
    rate: float = DEFAULTS["rate"]
    scheduled: float = DEFAULTS["scheduled"]
    schedule_delay_ms: int = DEFAULTS["schedule_delay_ms"]
    lease_ms: int = DEFAULTS["lease_ms"]
    max_attempts: int = DEFAULTS["max_attempts"]
    crash: float = DEFAULTS["crash"]
    fail: float = DEFAULTS["fail"]
    overrun: float = DEFAULTS["overrun"]
    long: float = DEFAULTS["long"]
    jobs_per_crash: int = DEFAULTS["jobs_per_crash"]
    retry_delay_ms: int = DEFAULTS["retry_delay_ms"]
    limit: int = DEFAULTS["limit"]
    tick: float = DEFAULTS["tick"]
    snapshot_every: float = DEFAULTS["snapshot_every"]
    check_seconds: float = DEFAULTS["check_seconds"]
    seed: int = DEFAULTS["seed"]
    lanes: int = DEFAULTS["lanes"]
    busy: float = DEFAULTS["busy"]

    def __post_init__(self) -> None:
        for name in ("workers", "jobs", "producers", "lease_ms", "max_attempts", "jobs_per_crash", "limit"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.limit > spec.LIMITS["limit_max"]:
            raise ValueError(f"limit must be at most {spec.LIMITS['limit_max']}, got {self.limit}")
        if self.producers > MAX_NODE + 1:  # each producer mints ids on its own node
            raise ValueError(f"at most {MAX_NODE + 1} producers, got {self.producers}")
        for name in ("seconds", "rate", "tick", "snapshot_every", "check_seconds"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.lanes < 0:
            raise ValueError(f"lanes must be at least 0, got {self.lanes}")
        for name in ("workers", "producers", "jobs", "seconds", "check_seconds", "lanes", "seed"):  # BD-1
            why = bounds.bound(f"soak --{name.replace('_', '-')}").refusal(getattr(self, name))
            if why is not None:
                raise ValueError(f"{name} {why}")
        dice = [getattr(self, n) for n in (*FATES, "scheduled", "busy")]
        if any(not 0 <= p <= 1 for p in dice) or sum(getattr(self, n) for n in FATES) > 1:
            raise ValueError("probabilities must be in [0, 1], and the fates' sum at most 1")

    @property
    def crash_budget(self) -> int:
        """At most this many crashes in a run (so restarts stay bounded)."""
        return max(1, self.jobs // self.jobs_per_crash)


# -- recording ------------------------------------------------------------------------------


def _answer(value: Any) -> Any:
    """An answer as history data (``Event.output``)."""
    if isinstance(value, EmqError):
        return value.code
    if isinstance(value, Claimed):
        return [value.id, payload_text(value.payload), value.token]
    if isinstance(value, LaneClaimed):
        return [value.id, payload_text(value.payload), value.token, value.group]
    return value


class Recorder:
    """Runs ops on a queue and hands each to ``sink`` as an ``Event``. ``call`` returns
    the answer, or the ``EmqError`` of a refusal (it does not raise it)."""

    def __init__(self, queue: Any, process: str, sink: Callable[[Event], object]) -> None:
        self.queue, self.process, self.sink = queue, process, sink

    def server_ms(self) -> int:
        """The server clock as the scripts read it (CLK-1)."""
        from emq_live.scripts import ms_of

        return ms_of(self.queue.conn.redis.time())

    def call(self, op: str, **args: Any) -> Any:
        clocked = spec.entry(op)["clock"]
        lo = self.server_ms() if clocked else None
        invoke = time.monotonic_ns()
        try:
            answer = getattr(self.queue, op)(**args)
        except EmqError as exc:
            answer = exc
        ret = time.monotonic_ns()
        window = (lo, self.server_ms()) if lo is not None else None
        data = {k: payload_text(v) if isinstance(v, bytes) else v for k, v in args.items()}
        self.sink(Event(self.process, op, data, _answer(answer), invoke, ret, window))
        return answer

    def snapshot(self) -> Snapshot:
        invoke = time.monotonic_ns()
        snap = self.queue.snapshot()
        self.sink(Event(self.process, SNAPSHOT, {}, snap, invoke, time.monotonic_ns()))
        return snap


# -- the processes -----------------------------------------------------------------------------


@dataclass
class Shared:
    """What the coordinator and its children share: the stop flag and counters."""

    stop: StopFlag
    invoked: Any  # creations sent (counted before the call)
    acked: Any  # creations answered (counted after the reply)
    crashes: Any

    @classmethod
    def make(cls, ctx: Any) -> "Shared":
        return cls(StopFlag(), ctx.Value("q", 0), ctx.Value("q", 0), ctx.Value("q", 0))


def _bump(value: Any) -> None:
    with value.get_lock():
        value.value += 1


@dataclass(frozen=True)
class Child:
    """One process of the run: its role, name and index, and where it writes."""

    role: str
    name: str
    index: int
    url: str
    queue: str
    run_dir: str
    config: SoakConfig
    deadline: float  # time.monotonic() after which it stops, whatever happens
    parent: int = field(default_factory=os.getpid)


def _child_main(child: Child, shared: Shared) -> None:
    """Entry point of every child process: connect, record into ``<name>.jsonl`` (one
    line per call, written at once, so a crash loses nothing), run the role."""
    die_with_parent(child.parent)
    shared.stop.forked()
    from emq_live.client import connect

    base = Path(child.run_dir) / child.name
    try:
        with connect(child.url) as conn, open_text(f"{base}.jsonl") as out:
            rec = Recorder(conn.queue(child.queue), child.name, lambda e: out.write(json.dumps(e.to_json()) + "\n"))
            rng = random.Random(f"{child.config.seed}:{child.name}")
            ROLES[child.role](rec, child, shared, rng)
    except BaseException:  # noqa: BLE001 - reported to the coordinator, which fails the run
        write_text(f"{base}.err", traceback.format_exc())
        raise SystemExit(1)


def _running(child: Child, shared: Shared) -> bool:
    return not shared.stop.is_set() and time.monotonic() < child.deadline


def _wait(child: Child, shared: Shared, seconds: float) -> bool:
    """Sleep up to ``seconds`` (work, pacing, a tick); False if the run is stopping."""
    shared.stop.wait(max(0.0, min(seconds, child.deadline - time.monotonic())))
    return _running(child, shared)


def _producer(rec: Recorder, child: Child, shared: Shared, rng: random.Random) -> None:
    cfg = child.config
    minter = Minter(node=child.index)
    start, every = time.monotonic(), cfg.producers / cfg.rate
    for n in range(len(range(child.index, cfg.jobs, cfg.producers))):  # this producer's share
        if not _wait(child, shared, start + n * every - time.monotonic()):
            return
        job = minter.mint()
        payload = f"soak {job}"
        _bump(shared.invoked)
        if rng.random() < cfg.scheduled:
            rec.call("schedule", id=job, payload=payload, delay_ms=rng.randint(0, cfg.schedule_delay_ms))
        elif cfg.lanes:
            rec.call("lane_enqueue", id=job, payload=payload, group=lane_group(rng.random(), cfg))
        else:
            rec.call("enqueue", id=job, payload=payload)
        _bump(shared.acked)


def lane_group(die: float, config: SoakConfig) -> str:
    """The group a die roll in [0, 1) puts a job on: the busy group ``g0`` with
    probability ``busy``, else one of ``g1``.. evenly (``g0`` alone with one lane)."""
    if config.lanes == 1 or die < config.busy:
        return "g0"
    return f"g{1 + int((die - config.busy) / (1 - config.busy) * (config.lanes - 1))}"


def _crash(shared: Shared, budget: int) -> bool:
    with shared.crashes.get_lock():
        if shared.crashes.value >= budget:
            return False
        shared.crashes.value += 1
        return True


def fate(die: float, config: SoakConfig) -> str:
    """The fate a die roll in [0, 1) picks: one of ``FATES`` by its probability, else
    ``complete``."""
    for name in FATES:
        if die < getattr(config, name):
            return name
        die -= getattr(config, name)
    return "complete"


def _worker(rec: Recorder, child: Child, shared: Shared, rng: random.Random) -> None:
    cfg = child.config
    lease = cfg.lease_ms / 1000
    # Each turn either claims a job (at most jobs * max_attempts claims succeed in a run)
    # or waits a tick; so this bounds the loop as well as the deadline does.
    for _ in range(int(cfg.seconds / cfg.tick) + cfg.jobs * cfg.max_attempts + 1):
        if not _running(child, shared):
            return
        job = rec.call("lane_claim", lease_ms=cfg.lease_ms) if cfg.lanes else None
        if job is None:  # no lane served: the plain pending set (scheduled jobs, or no lanes)
            job = rec.call("claim", lease_ms=cfg.lease_ms)
        if job is None:
            _wait(child, shared, cfg.tick)
            continue
        doom = fate(rng.random(), cfg)
        if doom == "crash" and _crash(shared, cfg.crash_budget):
            os._exit(CRASHED)  # holding the claim: only the reaper can bring the job back
        if doom == "fail":
            if not _wait(child, shared, rng.uniform(0, 0.002)):
                return
            rec.call("retry", id=job.id, token=job.token, delay_ms=rng.randint(0, cfg.retry_delay_ms),
                     max_attempts=cfg.max_attempts, error=FAILURE)
            continue
        if doom == "overrun":  # past the lease: reaped, maybe claimed again, before this ack
            working = _wait(child, shared, 1.5 * lease)
        elif doom == "long":  # 1.2 leases of work, the lease extended before each third
            for _ in range(3):
                rec.call("extend", id=job.id, token=job.token, lease_ms=cfg.lease_ms)
                working = _wait(child, shared, 0.4 * lease)
                if not working:
                    break
        else:
            working = _wait(child, shared, rng.uniform(0, 0.002))
        if not working:  # the run is over: nobody waits for this job any more
            return
        rec.call("complete", id=job.id, token=job.token)


def _every_tick(child: Child, shared: Shared, call: Callable[[], Any]) -> None:
    for _ in range(int(child.config.seconds / child.config.tick) + 1):
        if not _running(child, shared):
            return
        call()
        _wait(child, shared, child.config.tick)


def _reaper(rec: Recorder, child: Child, shared: Shared, rng: random.Random) -> None:
    _every_tick(child, shared, lambda: rec.call("reap", limit=child.config.limit, max_attempts=child.config.max_attempts))


def _promoter(rec: Recorder, child: Child, shared: Shared, rng: random.Random) -> None:
    _every_tick(child, shared, lambda: rec.call("promote", limit=child.config.limit))


ROLES: dict[str, Callable[[Recorder, Child, Shared, random.Random], None]] = {
    "producer": _producer,
    "worker": _worker,
    "reaper": _reaper,
    "promoter": _promoter,
}


class Fleet:
    """The child processes: start, watch, restart crashed workers, shut down."""

    def __init__(self, ctx: Any, shared: Shared, make: Callable[[str, str, int], Child]) -> None:
        self.ctx, self.shared, self.make = ctx, shared, make
        self.procs: dict[str, Any] = {}
        self.children: dict[str, Child] = {}
        self.restarts = 0

    def start(self, role: str, name: str, index: int) -> None:
        interrupts.check()  # no more children once Ctrl-C was pressed (INT-2)
        child = self.make(role, name, index)
        proc = self.ctx.Process(target=_child_main, args=(child, self.shared), name=f"emq-soak-{name}", daemon=True)
        with interrupts_deferred():  # a Ctrl-C during the fork would be lost in an at-fork handler
            proc.start()
            self.procs[name], self.children[name] = proc, child  # known to shutdown before a Ctrl-C is raised

    def exited(self) -> list[tuple[Child, int]]:
        """Children that exited since the last call, with their exit codes."""
        out = []
        for name, proc in list(self.procs.items()):
            if proc.exitcode is not None:
                proc.join()
                out.append((self.children[name], proc.exitcode))
                del self.procs[name]
        return out

    def tend(self, restart: bool) -> int:
        """Deal with the children that exited: restart crashed workers (if ``restart``:
        the same slot, next incarnation), raise ``SoakError`` for a child that failed.
        Returns how many producers finished."""
        finished = 0
        for child, code in self.exited():
            if child.role == "worker" and code == CRASHED:
                if restart:
                    slot, _, n = child.name.rpartition(".")
                    self.restarts += 1
                    self.start(child.role, f"{slot}.{int(n) + 1}", child.index)
            elif code != 0:
                err = Path(child.run_dir) / f"{child.name}.err"
                detail = err.read_text().strip().splitlines()[-1] if err.exists() else "no error recorded"
                raise SoakError(f"{child.name} exited with code {code}: {detail}")
            elif child.role == "producer":
                finished += 1
        return finished

    def shutdown(self, grace: float) -> None:
        """Stop every child: ask, wait up to ``grace`` seconds, then terminate, then kill.
        Asking never waits on a child (``StopFlag``): one may be dead already."""
        self.shared.stop.set()
        until = time.monotonic() + grace
        for proc in self.procs.values():
            proc.join(max(0.0, until - time.monotonic()))
        for sig in ("terminate", "kill"):
            alive = [p for p in self.procs.values() if p.is_alive()]
            for proc in alive:
                getattr(proc, sig)()
            for proc in alive:
                proc.join(2.0)


# -- the run -----------------------------------------------------------------------------------


@dataclass
class SoakReport:
    """The figures of a run (see ``figures``) and what went wrong, if anything."""

    config: SoakConfig
    server: str
    queue: str
    run_seconds: float
    accounting: Accounting
    violations: list[str]
    snapshots: int
    events: list[Event]
    checked: history.Checked
    restarts: int
    timed_out: bool
    history_dir: Path | None = None
    """Where a failed run's history was kept (a JSONL file per process); None after a pass."""

    @property
    def ok(self) -> bool:
        """The run passed: nothing shown wrong, and nothing left unproved (SOAK-5, §5.1)."""
        return self.detail == "clean"

    @property
    def detail(self) -> str:
        """The soak's word for its verdict (specs/verdicts.json): ``violations`` when the
        run showed something wrong; else ``unproved`` when it proved too little (jobs not
        settled or not created when its time ran out, partitions the check could not
        decide in its budget: none of these is a fault of the queue); else ``clean``."""
        acc = self.accounting
        if (self.violations or acc.lost or acc.duplicated or acc.problems or self.checked.verdict == linearize.ILLEGAL
                or lanes.mismatches(self.events)):
            return "violations"
        if not acc.clean or self.checked.verdict != linearize.OK or self.timed_out:  # clean but for unsettled jobs
            return "unproved"
        return "clean"

    def figures(self) -> dict[str, Any]:
        """Everything ``--json`` prints."""
        acc, lin = self.accounting, self.checked.linearizability
        ops: dict[str, int] = {}
        for e in self.events:
            ops[e.op] = ops.get(e.op, 0) + 1
        return {
            "verdict": verdict("soak", self.detail),
            "server": self.server,
            "queue": self.queue,
            "jobs": acc.created,
            "workers": self.config.workers,
            "producers": self.config.producers,
            "restarts": self.restarts,
            "completed": acc.completed,
            "dead": acc.dead,
            "lost": len(acc.lost),
            "duplicated": len(acc.duplicated),
            "unsettled": len(acc.unsettled),
            "violations": len(self.violations) + len(acc.problems),
            "snapshots": self.snapshots,
            "history": len(self.events),
            "ops": ops,
            "stale": sum(e.output == "EMQSTALE" for e in self.events),
            "linearizability": lin.verdict,
            "partitions": len(lin.partitions),
            "illegal": len(lin.illegal),
            "unknown": len(lin.unknown),
            "claim_order": len(self.checked.order),
            "check_seconds": round(lin.seconds, 3),
            "run_seconds": round(self.run_seconds, 3),
            "timed_out": self.timed_out,
            "seed": self.config.seed,
            "lanes": [s.to_json() for s in lanes.service(self.events)],
            "problems": self.problems(),
        }

    def problems(self, limit: int = 10) -> list[str]:
        """What failed, in words (at most ``limit`` lines per kind)."""
        acc, out = self.accounting, []
        out += self.violations[:limit] + list(acc.problems) + lanes.mismatches(self.events)[:limit]
        for name in ("lost", "duplicated", "unsettled"):
            jobs = getattr(acc, name)
            if jobs:
                out.append(f"{len(jobs)} {name}: {', '.join(jobs[:limit])}")
        out += [str(v) for v in self.checked.order[:limit]]
        for part in self.checked.linearizability.illegal[:limit]:
            out += history.explain(part)
        if self.checked.linearizability.unknown:
            out.append(f"{len(self.checked.linearizability.unknown)} partitions unknown within the check budget")
        if self.timed_out:
            out.append(f"the jobs were not all created and settled within the run's {self.config.seconds:g} s")
        return out


class Watch:
    """The coordinator's snapshots (SOAK-12, SOAK-13): INV-1..6 on each, INV-5/7 against
    the previous one, allowing for the jobs that may have been born in between."""

    def __init__(self, rec: Recorder, shared: Shared) -> None:
        self.rec, self.shared = rec, shared
        self.snapshots: list[Snapshot] = []
        self.violations: list[str] = []
        self.acked_before = 0  # creations answered before the previous snapshot was read

    def look(self, label: str) -> Snapshot:
        acked = self.shared.acked.value
        snap = self.rec.snapshot()
        born = self.shared.invoked.value - self.acked_before
        previous = self.snapshots[-1] if self.snapshots else None
        # many calls ran between two snapshots: the one-transition rules (INV-12..14) do not apply
        found = invariants.check_invariants(snap, previous, born=born, one_step=False)
        self.violations += [f"{label}: {v}" for v in found]
        self.snapshots.append(snap)
        self.acked_before = acked
        return snap


def _settled(snap: Snapshot) -> bool:
    return not (snap.pending or snap.active or snap.schedule)


def _events(run_dir: Path) -> list[Event]:
    out = []
    for path in sorted(run_dir.glob("*.jsonl")):
        with open(path) as f:
            out += [Event.from_json(json.loads(line)) for line in f if line.endswith("\n")]
    return out


def refuse_cluster(url: str | None) -> None:
    """``SoakError`` for a cluster URL: the clock windows must be read (TIME) on the
    primary that runs the queue's scripts, and a Recorder reads TIME on whichever node
    the client picks."""
    from emq_live.client import CLUSTER_SCHEMES

    if url is not None and url.startswith(CLUSTER_SCHEMES):
        raise SoakError("a cluster URL is not supported: the soak reads TIME on a single server")


def run_soak(url: str | None, config: SoakConfig, names: Any = None,
             running: Callable[[str], None] | None = None) -> SoakReport:
    """Run a soak against ``url`` (a throwaway valkey-server when ``None``) and judge it,
    on the queue ``soak-<suffix>`` (``names``' name of ``soak``, the run's claim on a
    server: emq_kit.claim); ``running`` is told the queue's name once every process has
    started. Its keys are deleted however the run ends (SOAK-2); a failed run keeps its
    history and its final snapshot in a directory. Raises ``SoakError`` when the run
    itself fails (a process died, the server left)."""
    import redis

    from emq_kit.server import ServerError, ServerProcess
    from emq_live.client import connect
    from emq_live.urls import ConnectError, redact

    refuse_cluster(url)
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        if url is None:
            try:
                server = stack.enter_context(ServerProcess("valkey-server"))
            except ServerError as exc:
                raise SoakError(str(exc)) from None
            url, where = server.url, f"throwaway valkey-server {server.version()}"
        else:
            where = url
        try:
            conn = stack.enter_context(connect(url))
        except ConnectError as exc:  # names the URL already, redacted
            raise SoakError(str(exc)) from None
        except (ValueError, EmqError, redis.exceptions.RedisError) as exc:
            raise SoakError(f"cannot use {redact(url)}: {exc}") from None
        name = names.server(QUEUE) if names is not None else f"{QUEUE}-{new_suffix()}"
        stack.callback(_drop, conn, name)  # SOAK-2: nothing left on the server, however the run ends
        events: list[Event] = []
        rec = Recorder(conn.queue(name), "coordinator", events.append)
        # A failed run keeps its history (a JSONL file per process) for the reader; a
        # passed one, or one that could not finish, leaves nothing behind.
        run_dir = Path(tempfile.mkdtemp(prefix="emq-soak-"))
        keep = False

        def tidy() -> None:
            if not keep:
                shutil.rmtree(run_dir, ignore_errors=True)

        stack.callback(tidy)
        ctx = multiprocessing.get_context("fork")
        shared = Shared.make(ctx)
        stack.callback(shared.stop.close)  # after the fleet's shutdown (registered below)
        deadline = started + config.seconds

        def make(role: str, child_name: str, index: int) -> Child:
            return Child(role, child_name, index, url, name, str(run_dir), config, deadline + 5 * config.lease_ms / 1000)

        fleet = Fleet(ctx, shared, make)
        stack.callback(fleet.shutdown, 2 * config.lease_ms / 1000 + 1)
        for i in range(config.producers):
            fleet.start("producer", f"p{i}", i)
        for i in range(config.workers):
            fleet.start("worker", f"w{i}.0", i)
        fleet.start("reaper", "reaper", 0)
        fleet.start("promoter", "promoter", 0)

        producing, timed_out = config.producers, True
        watch = Watch(rec, shared)
        if running is not None:
            running(name)
        for n in range(int(config.seconds / config.snapshot_every) + 2):
            interrupts.check()  # a turn of the coordinator is a stopping point (INT-2)
            producing -= fleet.tend(restart=time.monotonic() < deadline)
            snap = watch.look(f"snapshot {n + 1}")
            if producing == 0 and _settled(snap):
                timed_out = False
                break
            if time.monotonic() >= deadline:
                break
            time.sleep(config.snapshot_every)
        fleet.shutdown(2 * config.lease_ms / 1000 + 1)
        for child, code in fleet.exited():
            if code not in (0, CRASHED):  # killed mid-call: its last call may be missing
                raise SoakError(f"{child.name} exited with code {code} at shutdown; the history is incomplete")
        final = watch.look("final snapshot")
        run_seconds = time.monotonic() - started
        events += _events(run_dir)
        accounting = account(events, final, watch.snapshots)
        checked = history.check_history(events, seconds=config.check_seconds)
        report = SoakReport(config, where, name, run_seconds, accounting, watch.violations, len(watch.snapshots),
                            events, checked, fleet.restarts, timed_out)
        if not report.ok:
            from emq_kit import redaction
            from emq_kit.trace.format import snapshot_json

            redaction.write_text(run_dir / FINAL, json.dumps(snapshot_json(final), indent=1) + "\n")
            keep, report.history_dir = True, run_dir
        return report


FINAL = "final-snapshot.json"
"""A failed run's last snapshot of its queue, beside its history (the keys are deleted)."""


def _drop(conn: Any, queue: str) -> None:
    """Delete every key of the run's queue (SCAN of its glob-escaped prefix); a server
    already gone keeps them for the claim's record (``emq clean``)."""
    import redis

    from emq_model.keyspace import pattern

    try:
        keys = list(conn.redis.scan_iter(match=pattern(queue), count=1000))
        for i in range(0, len(keys), 500):
            conn.redis.delete(*keys[i : i + 500])
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
        return

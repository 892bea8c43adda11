"""``emq bench``: how fast the kit verifies and the live implementation runs, measured in
one run next to the ceilings of the same machine (benchmarks/README.md records a run).

Figures (a ``Figure``: value, the ceiling it is held against, their ratio, the goal for
the value or for the ratio):

- ``model``: transitions per second of ``QueueModel`` (enqueue -> claim -> complete).
- ``rtt.*``: redis-py round trips per second (EVALSHA of ``return 1``), the unit every
  live figure is made of. Ceiling on Valkey: ``valkey-benchmark`` doing the same over
  one connection.
- ``hypothesis.floor``: steps per second of an empty Hypothesis machine under the kit's
  settings, the same examples and steps: what Hypothesis alone costs a step, the
  ceiling of ``check.model``.
- ``check.*``: checked steps per second of the conformance machine (the call on both
  sides, the snapshot, the comparison, the invariants), with the model as target (the
  machine alone), on fakeredis and on Valkey. A step reads the target's snapshot as
  ``emq check`` does: on Valkey a window of steps goes as one pipeline, each call
  followed by snapshot.lua's (emq_kit/check/window.py), on fakeredis it is read from the
  server's memory (``LiveTarget``). Ceiling of a live target: the machine alone; goal,
  a ratio to it (``goal_ratio``). ``check.valkey.server_clock``: the same on Valkey
  under ``--clock server``; ``check.node.valkey``: the Node port through its driver
  (batches on), held against the built-in client on the same server.
  ``check.valkey.depth``: the same on Valkey once ``--depth`` background jobs are in
  each queue (10,000 by default; ``--depth-examples`` examples), the checked steps after
  the fill only, held against the same at depth 10 (specs/lifecycle.md DEPTH-5): whether
  a step's cost grows with the jobs already queued. Beside it ``check.valkey.depth.fill``
  and ``check.valkey.depth.end``: the milliseconds per 1,000 background jobs of the fill's
  checked steps and of the examples' ends (each queue read and checked whole, DEPTH-4).
- ``lifecycle.*``: jobs per second through enqueue -> claim -> complete from one Python
  process, one call per op (single) or one script call per op per batch (batched).
  Ceiling on Valkey: the server replaying the identical EVALSHA stream with no client
  work (``valkey-cli --pipe``). ``valkey-benchmark`` repeats one command with fixed
  arguments (its only variable, ``__rand_int__``, is 12 digits and cannot form a 14-byte
  JOB id), so it cannot replay a lifecycle; it measures ``claim_many`` on a full queue,
  where the repeated call does the same work each time.
- ``audit.valkey.*``: ``emq audit`` of one queue of n pending jobs (``--audit-jobs``,
  10^6 with ``--million``): its time, and its peak Python memory (tracemalloc, a second
  run), which stays at a batch's worth however large n is (emq_kit/audit.py).
- ``check.driver.*``: checked steps per second through a port's driver (the machine,
  the driver protocol's pipe, the port): the model driver (``emq driver --model``,
  serverless) and the Node port on Valkey (ports/node, in a source checkout with its
  ``node_modules``; left out otherwise). Ceiling: the machine alone.
- ``foreign.*``: the foreign port (tests/drivers/foreign.py, a source checkout): seconds
  to its first difference and to the full report of one run (every distinct difference,
  each shrunk), ``examples`` x ``steps``, the dev profile.
- ``coverage.ci.examples``: examples the ci profile runs until every cell is reached,
  on fakeredis, seeds 1 to ``--coverage-seeds``: the most of them (goal: near the
  profile's nominal count).
- ``shrink.fakeredis.*``: the median and the longest time from a selftest mutant's first
  divergence to its shrunk trace (Hypothesis's shrinking on its budget of steps and the
  minimizer), over an evenly spaced sample of the mutants, on fakeredis.
- ``scale.*``: claim and complete latency (one call, median) and memory per job
  (100-byte payload) with n jobs pending, for each n; ``scale.*.growth`` is the latency
  at the largest n over the latency at the smallest.
- ``lanes.valkey.*``: with L lanes on the ring (lifecycle.md §10), for each L (10, 10^3,
  10^5 by default): the latency of a grouped claim (``lane_claim``, one call, median) and
  of a ``lane_enqueue`` onto a lane already on the ring; ``lanes.valkey.*.growth`` is the
  latency at the most lanes over the fewest (a claim rotates the ring one step: no scan
  of the lanes, so it stays flat).

Without ``--url`` a throwaway valkey-server is started (``emq_kit.server``); fakeredis
runs in-process. Queues are emptied through ``LiveTarget`` (their keys only), so a
server given by ``--url`` keeps its other data. Nothing here judges a timing: the numbers
are reported, and a run only fails if a queue answers wrongly.
"""

from __future__ import annotations

import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from dataclasses import replace
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Iterator
from urllib.parse import unquote, urlparse

from emq_kit import interrupts
from emq_kit.check import collector
from emq_kit.check.clock import Clock, ServerClock
from emq_kit.check.live import LiveTarget
from emq_kit.check.names import Names
from emq_kit.check.profiles import PROFILES
from emq_kit.check.run import run_check, search_settings
from emq_kit.check.target import open_target
from emq_kit.errors import BadArgument, ToolMissing, Wrong
from emq_kit.figures import QUEUE, Bench, Figure, Params
from emq_kit.ports import bundle
from emq_model import branded_id, keyspace
from emq_model.model import QueueModel

PAYLOAD = b"p" * 100
LEASE_MS = 600_000  # longer than any run: no lease expires while we measure
NOW = 1_750_000_000_000  # the model's clock
SHALLOW = 10
"""The background jobs of ``check.valkey.depth``'s ceiling run."""
NODE_DRIVER = Path(__file__).resolve().parent.parent / "ports" / "node" / "driver.js"
"""The Node port's driver (a source checkout with the port installed; ``check.node.valkey`` is left out without it)."""


# -- the machine and the versions --------------------------------------------------------


def machine() -> dict[str, Any]:
    """nproc, CPU model, memory, OS and load: what the figures were measured on."""
    cpu = platform.processor() or "?"
    memory = None
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
        with open("/proc/meminfo") as f:
            kb = next((int(line.split()[1]) for line in f if line.startswith("MemTotal:")), None)
            memory = round(kb / 1024**2, 1) if kb else None
    except OSError:
        pass
    return {"nproc": os.cpu_count(), "cpu": cpu, "memory_gib": memory, "os": platform.platform(),
            "load_before": os.getloadavg()[0] if hasattr(os, "getloadavg") else None}


def versions(valkey: LiveTarget) -> dict[str, str]:
    out = {"python": platform.python_version(), "server": valkey.describe()["server"]}
    for name in ("emq", "redis", "fakeredis", "lupa", "hypothesis"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "?"
    return out


# -- building blocks ------------------------------------------------------------------


class Ids:
    """Fresh, increasing JOB ids: no two parts of a run share one."""

    def __init__(self) -> None:
        self.next = 1

    def take(self, n: int) -> list[str]:
        first, self.next = self.next, self.next + n
        return [branded_id.encode(branded_id.JOB, k) for k in range(first, first + n)]


def fresh(target: LiveTarget, name: str = QUEUE) -> Any:
    """The queue ``name`` on ``target``, emptied (its keys only)."""
    target.reset()
    return target.queue(name)


def rate(n: int, fn: Callable[[], Any]) -> float:
    """``n`` divided by the seconds ``fn`` takes."""
    started = time.perf_counter()
    fn()
    return n / (time.perf_counter() - started)


def best(repeat: int, measure: Callable[[], float]) -> float:
    """The highest of ``repeat`` measurements of a rate: the one the machine's other work
    disturbed least (a shared 2-core machine swings by several times between runs)."""
    return max(measure() for _ in range(repeat))


def chunks(items: list[Any], size: int) -> Iterator[list[Any]]:
    return (items[i : i + size] for i in range(0, len(items), size))


def expect(got: Any, want: Any, what: str) -> None:
    if got != want:
        raise Wrong(f"{what}: expected {want!r}, got {got!r}")


# -- the model, round trips, the conformance machine -----------------------------------


def bench_model(ids: list[str], depth: int = 100) -> Figure:
    """Transitions per second of QueueModel: enqueue ``depth`` jobs, then claim and
    complete each, over and over."""
    m = QueueModel(QUEUE)

    def run() -> None:
        for chunk in chunks(ids, depth):
            for job in chunk:
                m.enqueue(job, PAYLOAD)
            for _ in chunk:
                got = m.claim(LEASE_MS, now=NOW)
                assert got is not None  # the chunk's jobs were just enqueued
                m.complete(got.id, got.token)

    return Figure("model", rate(3 * len(ids), run), "transitions/s", note=f"pending depth {depth}")


def bench_rtt(target: LiveTarget, calls: int) -> float:
    """redis-py EVALSHA round trips per second of a script that returns at once."""
    r = target.conn.redis
    sha = r.script_load("return 1")
    return rate(calls, lambda: [r.evalsha(sha, 0) for _ in range(calls)])


def hypothesis_floor(params: Params) -> float:
    """Steps per second of an empty Hypothesis machine (one rule that draws and does
    nothing) run as the kit runs its own: the same settings, examples and steps. What
    Hypothesis costs a step is the floor under every ``check.*`` figure."""
    from hypothesis import seed as hseed
    from hypothesis.stateful import RuleBasedStateMachine, rule, run_state_machine_as_test

    done = [0]

    class Empty(RuleBasedStateMachine):
        @rule()
        def step(self) -> None:
            done[0] += 1

    factory = hseed(params.seed)(Empty)
    config = search_settings(params.examples, params.steps)
    with collector.spaced():  # the collector's schedule of a check's run, as every figure it floors
        started = time.perf_counter()
        run_state_machine_as_test(factory, settings=config)
        return done[0] / (time.perf_counter() - started)


def bench_check(target: Any, params: Params, clock: Clock | None = None) -> float:
    """Checked steps per second of the conformance machine on ``target`` (under
    ``clock``, the virtual one by default)."""
    return checked(target, params, clock).steps_per_second


def bench_deep(target: Any, params: Params, depth: int) -> dict[str, float]:
    """A run with ``depth`` background jobs in each queue, by part (DEPTH-5): ``rate``, the
    checked steps per second once the queues are filled; ``fill`` and ``end``, the
    milliseconds per 1,000 background jobs of the fill's steps and of the examples' ends
    (their whole reads and checks); ``fill_steps``."""
    part = checked(target, params, depth=depth).phases["depth"]
    per = 1_000_000 / part["jobs"]
    return {"rate": part["steps"] / part["seconds"] if part["seconds"] else 0.0, "fill": part["fill_seconds"] * per,
            "end": part["end_seconds"] * per, "fill_steps": part["fill_steps"]}


def checked(target: Any, params: Params, clock: Clock | None = None, depth: int = 0) -> Any:
    """The report of a dev run of ``params``'s examples and seed on ``target``; ``Wrong``
    unless it conforms."""
    from emq_kit.check.focus import Focus

    report = run_check(target, PROFILES["dev"], examples=params.examples, steps=params.steps, seed=params.seed,
                       clock=clock, focus=Focus(depth=depth))
    if not report.ok:
        raise Wrong(f"the conformance run on {report.target.get('target')} did not conform: {report.verdict} ({report.detail})")
    return report


# -- the lifecycle ---------------------------------------------------------------------


def lifecycle_single(q: Any, ids: list[str]) -> float:
    """Jobs per second, one call per op."""

    def run() -> None:
        for job in ids:
            expect(q.enqueue(job, PAYLOAD), "enqueued", "enqueue")
            got = q.claim(LEASE_MS)
            expect(got.id, job, "claim")
            expect(q.complete(job, got.token), "ok", "complete")

    return rate(len(ids), run)


def lifecycle_batched(q: Any, ids: list[str], batch: int) -> tuple[float, float]:
    """Jobs per second with one script call per op per batch, and claims per second
    inside the ``claim_many`` calls alone."""
    claiming = 0.0

    def run() -> None:
        nonlocal claiming
        for chunk in chunks(ids, batch):
            expect(q.enqueue_many([(job, PAYLOAD) for job in chunk]), ["enqueued"] * len(chunk), "enqueue_many")
            started = time.perf_counter()
            got = q.claim_many(len(chunk), LEASE_MS)
            claiming += time.perf_counter() - started
            expect([c.id for c in got], chunk, "claim_many")
            expect(q.complete_many([(c.id, c.token) for c in got]), ["ok"] * len(chunk), "complete_many")

    jobs_per_s = rate(len(ids), run)
    return jobs_per_s, len(ids) / claiming


# -- the server's own ceilings (valkey-cli --pipe, valkey-benchmark) -------------------


def tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise ToolMissing(f"{name} is not installed (Debian package valkey-tools; bash scripts/install-valkey.sh)")
    return found


def server_args(url: str, dbnum: str = "-n") -> list[str]:
    """valkey-cli options naming the server, user and database of a redis:// URL
    (valkey-benchmark names the database with ``--dbnum``). Never its password: a
    command line is every local user's to read (SEC-1); ``run_tool`` hands it to
    valkey-cli in its environment."""
    u = urlparse(url.replace("valkey://", "redis://", 1))
    if u.scheme == "unix":
        out = ["-s", u.path]
    elif u.scheme == "redis":
        out = ["-h", u.hostname or "127.0.0.1", "-p", str(u.port or 6379)]
    else:
        raise BadArgument(f"cannot point valkey-cli at {url!r} (redis://, valkey:// or unix:// only)")
    if u.username:
        out += ["--user", unquote(u.username)]
    db = u.path.strip("/") if u.scheme == "redis" else ""
    return out + ([dbnum, db] if db not in ("", "0") else [])


def resp(*args: bytes | str | int) -> bytes:
    """One command in RESP, as a client sends it."""
    parts = [a if isinstance(a, bytes) else str(a).encode() for a in args]
    return b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%s\r\n" % (len(p), p) for p in parts)


def evalsha(q: Any, name: str, keys: list[str], args: list[Any]) -> bytes:
    return resp("EVALSHA", q.conn.scripts[name].sha, len(keys), *keys, *args)


def single_stream(q: Any, ids: list[str]) -> bytes:
    """The EVALSHA calls ``lifecycle_single`` makes for ``ids`` (fresh ids on an empty
    queue: every claim takes the job just enqueued, with token 1)."""
    out = []
    for job in ids:
        row = q.keys + [keyspace.job_key(q.name, job)]
        out += [evalsha(q, "enqueue", row, [job, PAYLOAD]), evalsha(q, "claim", q.keys, [LEASE_MS]),
                evalsha(q, "complete", row, [job, 1])]
    return b"".join(out)


def batched_stream(q: Any, ids: list[str], batch: int) -> bytes:
    """The EVALSHA calls ``lifecycle_batched`` makes for ``ids``."""
    out = []
    for chunk in chunks(ids, batch):
        out += [evalsha(q, "enqueue_many", q.keys, [x for job in chunk for x in (job, PAYLOAD)]),
                evalsha(q, "claim_many", q.keys, [len(chunk), LEASE_MS]),
                evalsha(q, "complete_many", q.keys, [x for job in chunk for x in (job, 1)])]
    return b"".join(out)


def run_tool(argv: list[str], url: str, input: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    """``argv`` (a server tool on ``url``) run to its end, its output captured, the
    URL's password in its environment (``REDISCLI_AUTH``, which valkey-cli reads), never
    on its command line (SEC-1). A Ctrl-C meanwhile reached the tool too (the terminal
    signals the whole group) and cut its output: raised here, never judged as the
    tool's answer (INT-1)."""
    password = urlparse(url).password
    env = {**os.environ, "REDISCLI_AUTH": unquote(password)} if password else None
    done = subprocess.run(argv, input=input, capture_output=True, timeout=600, env=env)
    interrupts.check()
    return done


UNMEASURED = "none: valkey-benchmark takes a password only on its command line, which every local user can read"


def benchmark_ceiling(url: str, repeat: int, measure: Callable[[], float], by: str) -> tuple[float | None, str]:
    """A ceiling valkey-benchmark measures (the best of ``repeat``) and what measured
    it; none on a server that asks for a password, said so (SEC-1: ``run_tool``)."""
    if urlparse(url).password:
        return None, UNMEASURED
    return best(repeat, measure), by


def replay(url: str, stream: bytes, jobs: int, q: Any) -> float:
    """Jobs per second of the server running ``stream`` on its own: ``valkey-cli --pipe``
    sends it all and waits for the last reply. The queue must end empty with every job
    completed, or the stream did not do the lifecycle's work."""
    before = int(q.conn.redis.hget(q.keys[4], "count") or 0)
    started = time.perf_counter()
    done = run_tool([tool("valkey-cli"), *server_args(url), "--pipe"], url, input=stream)
    seconds = time.perf_counter() - started
    out = done.stdout.decode("utf-8", "replace")
    if done.returncode != 0 or "errors: 0," not in out:
        raise Wrong(f"valkey-cli --pipe: {out[-500:]}{done.stderr.decode('utf-8', 'replace')[-500:]}")
    expect(int(q.conn.redis.hget(q.keys[4], "count") or 0) - before, jobs, "jobs completed by the replay")
    expect(q.counts(), dict.fromkeys(q.counts(), 0), "the queue after the replay")
    return jobs / seconds


def benchmark_rps(url: str, requests: int, *command: Any, clients: int = 1, pipeline: int = 1) -> float:
    """Requests per second of ``valkey-benchmark`` running ``command``."""
    done = run_tool([tool("valkey-benchmark"), *server_args(url, "--dbnum"), "-c", str(clients), "-n", str(requests),
                     "-P", str(pipeline), "--csv", *map(str, command)], url)
    lines = done.stdout.decode("utf-8", "replace").strip().splitlines()
    if done.returncode != 0 or len(lines) < 2:
        raise Wrong(f"valkey-benchmark: {done.stdout[-300:]!r} {done.stderr[-300:]!r}")
    return float(lines[-1].split(",")[1].strip('"'))


def benchmark_claim_many(url: str, q: Any, ids: Ids, batch: int, calls: int) -> float:
    """Claims per second of ``valkey-benchmark`` calling ``claim_many(batch)`` on a queue
    holding enough jobs that every call claims ``batch`` (pipelined: the server's rate)."""
    pipeline = 16
    for chunk in chunks(ids.take((calls + pipeline) * batch), 1_000):
        q.enqueue_many([(job, PAYLOAD) for job in chunk])
    rps = benchmark_rps(url, calls, "EVALSHA", q.conn.scripts["claim_many"].sha, len(q.keys), *q.keys, batch,
                        LEASE_MS, pipeline=pipeline)
    return rps * batch


# -- scale -------------------------------------------------------------------------------


def evalsha_usec(r: Any) -> tuple[int, int]:
    """(calls, usec) of EVALSHA on the server so far (INFO commandstats; no reset)."""
    stat = r.info("commandstats").get("cmdstat_evalsha", {})
    return int(stat.get("calls", 0)), int(stat.get("usec", 0))


def fill(q: Any, jobs: list[str]) -> None:
    for chunk in chunks(jobs, 1_000):
        q.enqueue_many([(job, PAYLOAD) for job in chunk])


def fill_server(q: Any, jobs: list[str]) -> float:
    """Fill ``q`` with ``jobs``: the server's ``used_memory`` growth per job."""
    before = int(q.conn.redis.info("memory")["used_memory"])
    fill(q, jobs)
    return (int(q.conn.redis.info("memory")["used_memory"]) - before) / len(jobs)


def fill_traced(q: Any, jobs: list[str], sample: int = 1_000) -> float:
    """Fill ``q`` (fakeredis, in this process) with ``jobs``: the Python memory the last
    ``sample`` jobs took, per job (tracemalloc; tracing the whole fill would slow it
    five-fold)."""
    fill(q, jobs[:-sample])
    tracemalloc.start()
    try:
        fill(q, jobs[-sample:])
        current, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return current / len(jobs[-sample:])


def bench_scale(target: LiveTarget, label: str, sizes: tuple[int, ...], ids: Ids, probes: int,
                server: bool) -> list[Figure]:
    """For each size n: fill a queue with n pending jobs, then time ``probes`` single
    claims and the completes of those jobs; and the memory per job: the server's
    ``used_memory`` growth over the fill on a server, the Python memory of the last jobs
    filled on fakeredis (``fill_traced``)."""
    out: list[Figure] = []
    r = target.conn.redis
    for n in sizes:
        q = fresh(target)
        jobs = ids.take(n)
        per_job = fill_server(q, jobs) if server else fill_traced(q, jobs)
        latencies: dict[str, list[float]] = {"claim": [], "complete": []}
        server_us: dict[str, float] = {}
        claimed = []
        for op in ("claim", "complete"):
            calls0, usec0 = evalsha_usec(r) if server else (0, 0)
            for i in range(min(probes, n)):
                started = time.perf_counter()
                if op == "claim":
                    claimed.append(q.claim(LEASE_MS))
                else:
                    expect(q.complete(claimed[i].id, claimed[i].token), "ok", "complete")
                latencies[op].append((time.perf_counter() - started) * 1e6)
            if server:
                calls1, usec1 = evalsha_usec(r)
                server_us[op] = (usec1 - usec0) / max(calls1 - calls0, 1)
        expect([c.id for c in claimed], jobs[: len(claimed)], "the claims of the scale run")
        for op, values in latencies.items():
            p99 = sorted(values)[int(0.99 * (len(values) - 1))]
            note = f"p99 {p99:.0f} us" + (f", server {server_us[op]:.1f} us/call" if server else "")
            out.append(Figure(f"scale.{label}.{op}.{n}", statistics.median(values), "us", note=note))
        out.append(Figure(f"scale.{label}.memory.{n}", per_job, "bytes/job",
                          note="server used_memory growth" if server else "tracemalloc, the last 1,000 jobs"))
        fresh(target)  # give the memory back before the next size
    for op in ("claim", "complete"):
        first, last = (next(f for f in out if f.key == f"scale.{label}.{op}.{n}") for n in (sizes[0], sizes[-1]))
        out.append(Figure(f"scale.{label}.{op}.growth", last.value / first.value, "x",
                          note=f"median latency at n={sizes[-1]:,} over n={sizes[0]:,}"))
    return out


# -- lanes -------------------------------------------------------------------------------


def lane_of(i: int, lanes: int) -> str:
    """The group of the ``i``-th job of a lanes run: round robin over ``lanes`` groups."""
    return f"L{i % lanes}"


def bench_lanes(target: LiveTarget, counts: tuple[int, ...], ids: Ids, probes: int) -> list[Figure]:
    """For each count L: fill L lanes, each with enough jobs that it stays on the ring
    while ``probes`` grouped claims are served (so the ring holds exactly L lanes
    throughout), the last ``probes`` jobs by single timed ``lane_enqueue`` calls; then
    time ``probes`` single ``lane_claim`` calls. The claims must serve the lanes in ring
    order (LANE-F) and leave L lanes on the ring, or no figure is reported."""
    out: list[Figure] = []
    r = target.conn.redis
    for lanes in counts:
        q = fresh(target)
        per_lane = probes // lanes + 2
        jobs = ids.take(lanes * per_lane)
        cut = len(jobs) - probes
        for start in range(0, cut, 1_000):
            batch = q.pipeline()
            for i in range(start, min(start + 1_000, cut)):
                batch.lane_enqueue(jobs[i], PAYLOAD, lane_of(i, lanes))
            expect(set(batch.execute()), {"enqueued"}, "the lane_enqueue calls of the lanes fill")
        timed: dict[str, list[float]] = {"enqueue": [], "claim": []}
        server_us: dict[str, float] = {}
        served = []
        for op in ("enqueue", "claim"):
            calls0, usec0 = evalsha_usec(r)
            for i in range(cut, len(jobs)):
                started = time.perf_counter()
                if op == "enqueue":
                    expect(q.lane_enqueue(jobs[i], PAYLOAD, lane_of(i, lanes)), "enqueued", "lane_enqueue")
                else:
                    served.append(q.lane_claim(LEASE_MS))
                timed[op].append((time.perf_counter() - started) * 1e6)
            calls1, usec1 = evalsha_usec(r)
            server_us[op] = (usec1 - usec0) / max(calls1 - calls0, 1)
        expect([j.group if j else None for j in served], [lane_of(i, lanes) for i in range(probes)],
               "the lanes the grouped claims served (ring order)")
        expect(r.llen(keyspace.lane_keys(q.name)["ring"]), lanes, "the ring's length after the claims")
        for op, values in timed.items():
            p99 = sorted(values)[int(0.99 * (len(values) - 1))]
            out.append(Figure(f"lanes.valkey.{op}.{lanes}", statistics.median(values), "us",
                              note=f"p99 {p99:.0f} us, server {server_us[op]:.1f} us/call"))
        fresh(target)
    for op in ("claim", "enqueue"):
        first, last = (next(f for f in out if f.key == f"lanes.valkey.{op}.{n}") for n in (counts[0], counts[-1]))
        out.append(Figure(f"lanes.valkey.{op}.growth", last.value / first.value, "x",
                          note=f"median latency at {counts[-1]:,} lanes over {counts[0]:,}"))
    return out


def bench_audit(target: LiveTarget, url: str, jobs: list[str]) -> list[Figure]:
    """Audit one queue of ``jobs`` pending jobs: seconds, then peak traced memory."""
    from emq_kit.audit import audit

    q = fresh(target)
    fill(q, jobs)
    started = time.perf_counter()
    result = audit(url, [q.name])
    seconds = time.perf_counter() - started
    expect((result.total, result.queues[0].counts["pending"]), (0, len(jobs)), "the audit of a sound queue")
    tracemalloc.start()
    try:
        audit(url, [q.name])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    fresh(target)
    n = len(jobs)
    return [Figure(f"audit.valkey.seconds.{n}", seconds, "s", note=f"{n / seconds:,.0f} jobs/s"),
            Figure(f"audit.valkey.memory.{n}", peak / 2**20, "MiB", note="peak tracemalloc, a second run")]


# -- the run -------------------------------------------------------------------------------


def rtt_figures(url: str, valkey: LiveTarget, fake: LiveTarget, repeat: int) -> list[Figure]:
    calls = 5_000
    sha = valkey.conn.redis.script_load("return 1")
    what = "redis-py EVALSHA 'return 1'"
    return [
        Figure("rtt.fakeredis", best(repeat, lambda: bench_rtt(fake, calls // 5)), "calls/s", note=what),
        Figure("rtt.valkey", best(repeat, lambda: bench_rtt(valkey, calls)), "calls/s",
               *benchmark_ceiling(url, repeat, lambda: benchmark_rps(url, calls * 4, "EVALSHA", sha, 0),
                                  "valkey-benchmark, 1 connection"), note=what),
    ]


def check_figures(url: str, params: Params, names: Names | None = None) -> list[Figure]:
    """The machine alone, then on fakeredis and on the Valkey at ``url``, each target
    built as ``emq check`` builds it (see ``LiveTarget``: on a server, windows of steps
    in one pipeline, emq_kit/check/window.py; on fakeredis a step's snapshot read from
    memory), each held against the machine alone; then on Valkey the server's clock,
    and the Node port's driver held against the built-in client. Each the best of
    ``repeat`` runs of the same seed. On the server the queues go under ``names`` (the
    run's claim, emq_kit.claim)."""
    floor = best(params.repeat, lambda: hypothesis_floor(params))
    alone = best(params.repeat, lambda: bench_check(open_target(model=True), params))
    out = [Figure("hypothesis.floor", floor, "steps/s", note="an empty RuleBasedStateMachine, the kit's settings"),
           Figure("check.model", alone, "steps/s", floor, "an empty Hypothesis machine (hypothesis.floor)",
                  note="the machine alone: model vs model")]
    for label, where, run_names in (("fakeredis", None, None), ("valkey", url, names)):
        out.append(Figure(f"check.{label}", measure_check(params, lambda: open_target(where, names=run_names)),
                          "steps/s", alone, "the machine alone (check.model)"))
    builtin = out[-1].value
    clock = ServerClock.for_url(url)
    try:
        out.append(Figure("check.valkey.server_clock",
                          measure_check(params, lambda: open_target(url, names=names), clock), "steps/s",
                          builtin, "the built-in client, virtual clock (check.valkey)",
                          note="--clock server: step by step, TIME read in each clock op's own round trip"))
    finally:
        clock.close()
    out += depth_figures(url, params, names)
    if (NODE_DRIVER.parent / "node_modules").is_dir() and shutil.which("node"):  # the port installed (scripts/install-node-port.sh)
        with tempfile.TemporaryDirectory() as lua:
            bundle.write(lua)
            driver = f"{shlex.quote(shutil.which('node') or 'node')} {shlex.quote(str(NODE_DRIVER))} --scripts {lua}"
            out.append(Figure("check.node.valkey", measure_check(params, lambda: open_target(url, driver=driver,
                                                                                              names=names)),
                              "steps/s", builtin, "the built-in client on the same server (check.valkey)",
                              note="the Node port (ports/node) through its driver, batches on"))
    return out


def depth_figures(url: str, params: Params, names: Names | None = None) -> list[Figure]:
    """DEPTH-5 on the Valkey at ``url``: the checked steps per second of ``depth_examples``
    examples once each queue holds ``depth`` background jobs, held against the same at
    depth ``SHALLOW``; beside it, never left out, what the fill's steps and the examples'
    ends (whole reads and checks, DEPTH-4) cost in milliseconds per 1,000 background
    jobs. The best of ``repeat`` runs by rate."""
    deep = replace(params, examples=params.depth_examples)
    runs = {}
    for depth in (params.depth, SHALLOW):
        target = open_target(url, names=names)
        try:
            runs[depth] = max((bench_deep(target, deep, depth) for _ in range(params.repeat)), key=lambda r: r["rate"])
        finally:
            target.close()
    got = runs[params.depth]
    what = f"--depth {params.depth:,}, {deep.examples} examples x {deep.steps} steps"
    return [Figure("check.valkey.depth", got["rate"], "steps/s", runs[SHALLOW]["rate"], f"the same at depth {SHALLOW}",
                   note=f"{what}, the checked steps once the queues are filled (the fill's and the end's apart)"),
            Figure("check.valkey.depth.fill", got["fill"], "ms/1,000 jobs",
                   note=f"{what}: the fill's {got['fill_steps']:.0f} checked steps (DEPTH-1)"),
            Figure("check.valkey.depth.end", got["end"], "ms/1,000 jobs",
                   note=f"{what}: the examples' ends, each queue read and checked whole (DEPTH-4)")]


def measure_check(params: Params, opened: Callable[[], Any], clock: Clock | None = None) -> float:
    """``bench_check`` on the target ``opened`` returns, closed afterwards."""
    target = opened()
    try:
        return best(params.repeat, lambda: bench_check(target, params, clock))
    finally:
        target.close()


def driver_figures(params: Params, alone: float) -> list[Figure]:
    """The model driver (``emq driver --model``, as ``emq check --driver`` opens it) held
    against the machine alone, then the foreign port's time to its first difference and
    to its full report (the Node port is ``check.node.valkey``, in ``check_figures``)."""
    from emq_kit.check.focus import Focus

    root = Path(__file__).resolve().parents[1]
    command = f"{shlex.quote(str(Path(sys.executable).with_name('emq')))} driver --model"
    out = [Figure("check.driver.model", measure_check(params, lambda: open_target(None, None, command)),
                  "steps/s", alone, "the machine alone (check.model)", note="emq driver --model")]
    foreign = root / "tests" / "drivers" / "foreign.py"
    if not foreign.is_file():
        return out
    target = open_target(None, None, f"{shlex.quote(sys.executable)} {shlex.quote(str(foreign))}", partial=True)
    try:
        report = run_check(target, PROFILES["dev"], examples=params.examples, steps=params.steps, seed=params.seed,
                           focus=Focus(ops=frozenset(target.capabilities.offered or ())))
    finally:
        target.close()
    note = f"{len(report.differences)} distinct differences, {params.examples} x {params.steps}, dev"
    first = ([Figure("foreign.first_difference", min(d.seconds for d in report.differences), "s", note=note)]
             if report.differences else [])  # a run too short to meet one has no first
    return out + first + [Figure("foreign.full_report", report.seconds, "s", note=note)]


def shrink_figures(params: Params) -> list[Figure]:
    """How long shrinking takes: ``shrink_mutants`` of the selftest's
    non-equivalent mutants, evenly spaced, each judged as ``emq selftest`` judges it on
    fakeredis (seed 0, ``shrink_budget`` seconds of searching); over the killed ones the
    machine shrank, the median and the most seconds from the first divergence to the
    shrunk trace. None when no sampled mutant was shrunk."""
    from emq_kit.selftest import mutation

    equivalent = mutation.equivalents()
    pool = [m for m in mutation.all_mutants() if m.key not in equivalent]
    every = max(len(pool) // params.shrink_mutants, 1)
    verdicts = [mutation.judge(m, None, params.shrink_budget, 0) for m in pool[::every][:params.shrink_mutants]]
    shrunk = [v for v in verdicts if v.status == "killed" and v.shrink_seconds is not None]
    if not shrunk:
        return []
    times = [v.shrink_seconds or 0.0 for v in shrunk]
    note = (f"{len(shrunk)} of {len(verdicts)} mutants (one in {every}) shrunk on fakeredis, "
            f"median shrunk trace {statistics.median(v.shrunk for v in shrunk):g} steps")
    return [Figure("shrink.fakeredis.median", statistics.median(times), "s", note=note),
            Figure("shrink.fakeredis.max", max(times), "s", note=note)]


def coverage_figures(params: Params) -> list[Figure]:
    """Examples the ci profile runs until every cell is reached (its gate), on the
    embedded fakeredis (the raw and hostile cells need a live target), for seeds 1 to
    ``coverage_seeds``: the most of them, the median and each seed's in the note. A seed
    whose run ended short of a cell counts as its run's examples, and the note says so.
    None with no seeds."""
    if not params.coverage_seeds:
        return []
    per_seed: dict[int, int] = {}
    short = []
    for seed in range(1, params.coverage_seeds + 1):
        target = open_target(None)
        try:
            report = run_check(target, PROFILES["ci"], seed=seed)
        finally:
            target.close()
        if report.new:
            raise Wrong(f"the ci run of seed {seed} on fakeredis did not conform: {report.verdict} ({report.detail})")
        per_seed[seed] = report.examples
        if report.unreached:
            short.append(seed)
    nominal = PROFILES["ci"].examples
    note = (f"ci profile (nominal {nominal}) on fakeredis, median {statistics.median(per_seed.values()):g}; "
            + ", ".join(f"seed {k}: {v}" for k, v in per_seed.items())
            + (f"; seeds {short} ended short of a cell" if short else ""))
    return [Figure("coverage.ci.examples", max(per_seed.values()), "examples", note=note)]


def lifecycle_figures(label: str, target: LiveTarget, url: str | None, ids: Ids, params: Params) -> list[Figure]:
    """Single and batched lifecycles on ``target``; with ``url`` (Valkey) next to the
    server replaying the same streams and to valkey-benchmark's ``claim_many``."""
    n, q = params.repeat, fresh(target)
    share = 1 if url else 10  # fakeredis runs a tenth of the jobs
    single = best(n, lambda: lifecycle_single(q, ids.take(params.single_jobs // share)))
    runs = [lifecycle_batched(q, ids.take(params.jobs // share), params.batch) for _ in range(n)]
    batched, claims = max(r[0] for r in runs), max(r[1] for r in runs)
    batch = f"batch {params.batch}"
    if url is None:
        return [Figure(f"lifecycle.{label}.single", single, "jobs/s"),
                Figure(f"lifecycle.{label}.batched", batched, "jobs/s", note=batch)]

    def replayed(stream: Callable[[list[str]], bytes], jobs: int) -> float:
        return replay(url, stream(ids.take(jobs)), jobs, q)

    calls = max(params.jobs // params.batch, 20)
    return [
        Figure(f"lifecycle.{label}.single", single, "jobs/s",
               best(n, lambda: replayed(lambda j: single_stream(q, j), params.single_jobs)),
               "valkey-cli --pipe replay", note="3 calls a job"),
        Figure(f"lifecycle.{label}.batched", batched, "jobs/s",
               best(n, lambda: replayed(lambda j: batched_stream(q, j, params.batch), params.jobs)),
               "valkey-cli --pipe replay", note=f"{batch}, 3 calls a batch"),
        Figure(f"lifecycle.{label}.claim_many", claims, "claims/s",
               *benchmark_ceiling(url, n, lambda: benchmark_claim_many(url, fresh(target), ids, params.batch, calls),
                                  "valkey-benchmark -P 16"), note="inside the batched lifecycle"),
    ]


def live(url: str | None, names: Names | None = None) -> Any:
    """The built-in client on ``url`` (fakeredis when None), as an application calls it:
    not observed (``emq check``'s queues read the whole snapshot after every call, which
    at 10^5 pending jobs is most of a claim); the lifecycle, scale, lane and audit
    figures reach its queues and connection."""
    return open_target(url, observe=False, names=names)


def run_bench(url: str, params: Params, say: Callable[[str], None] = lambda _: None,
              names: Names | None = None) -> Bench:
    """Every figure, fakeredis and the Valkey at ``url`` (its queues under ``names``,
    the run's claim on a server it does not own: emq_kit.claim)."""
    bench = Bench(params, machine())
    ids = Ids()
    valkey, fake = live(url, names), live(None)
    try:
        bench.versions = versions(valkey)
        say("model")
        bench.figures.append(bench_model(ids.take(params.jobs // 5)))
        say("round trips")
        rtt = rtt_figures(url, valkey, fake, params.repeat)
        bench.figures += rtt
        say("conformance machine")
        bench.figures += check_figures(url, params, names)
        say("drivers")
        bench.figures += driver_figures(params, next(f.value for f in bench.figures if f.key == "check.model"))
        say("shrinking")
        bench.figures += shrink_figures(params)
        say("coverage")
        bench.figures += coverage_figures(params)
        say("lifecycle")
        bench.figures += lifecycle_figures("fakeredis", fake, None, ids, params)
        bench.figures += lifecycle_figures("valkey", valkey, url, ids, params)
        say("scale")
        bench.figures += bench_scale(valkey, "valkey", params.sizes, ids, params.probes, server=True)
        bench.figures += bench_scale(fake, "fakeredis", params.fakeredis_sizes, ids, params.probes, server=False)
        say("lanes")
        bench.figures += bench_lanes(valkey, params.lanes, ids, params.probes)
        say("audit")
        bench.figures += bench_audit(valkey, url, ids.take(params.audit_jobs))
        fresh(valkey)
    finally:
        valkey.close()
        fake.close()
    return bench

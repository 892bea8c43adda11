"""``emq soak`` (specs/soak.md): the history check catches a non-atomic claim (two
round trips, interleaved step by step in one process, so the race is forced, not hoped
for) and accepts the atomic one under the same interleaving; a real soak on Valkey keeps
every job and passes; the command's table, JSON and exit codes; no process outlives a
run that fails."""

from __future__ import annotations

import json
import secrets
import shutil
import signal
import threading
import time
from pathlib import Path
from typing import Any, Callable

import pytest
import redis

import emq_live
from emq_kit import cli, interrupts
from emq_kit.cli.soak import format_report
from emq_kit.server import ServerProcess
from emq_kit.soak import history, lanes
from emq_kit.soak.history import Event
from emq_kit.soak.ledger import account
from emq_kit.soak.linearize import ILLEGAL, OK
from emq_kit.soak.workload import Recorder, SoakConfig, SoakError, fate, lane_group, run_soak
from emq_live.client import Queue
from emq_model import invariants, keyspace
from emq_model.branded_id import JOB, encode
from emq_model.model import Claimed
from emq_model.snapshot import Snapshot

J1, J2 = encode(JOB, 10), encode(JOB, 20)
LONG_LEASE = 60_000


def unique(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(4)}"


class Interleaved(Queue):
    """A queue whose claim calls ``between()`` in the middle of its work, so a test can
    run another client's call there."""

    between: Callable[[], Any] = staticmethod(lambda: None)


class AtomicClaim(Interleaved):
    """The real claim (one script), with the other client's call before it: the two
    claims overlap in time, and each is still one atomic step."""

    def claim(self, lease_ms: int, *, now: int | None = None) -> Claimed | None:
        self.between()
        return super().claim(lease_ms, now=now)


class SplitClaim(Interleaved):
    """The defect under test: claim in two round trips — read the lowest pending id,
    then ZREM + ZADD + HINCRBY (+ HSET, HGET) in a second one. Another client's call
    between the two reads the same lowest id."""

    def claim(self, lease_ms: int, *, now: int | None = None) -> Claimed | None:
        r = self.conn.redis
        head = r.zrange(self.keys[0], 0, 0)
        if not head:
            return None
        self.between()
        job = head[0].decode()
        sec, usec = r.time()
        row = keyspace.job_key(self.name, job)
        pipe = r.pipeline(transaction=True)
        pipe.zrem(self.keys[0], job)
        pipe.zadd(self.keys[1], {job: sec * 1000 + usec // 1000 + lease_ms})
        pipe.hincrby(row, "attempts", 1)
        pipe.hset(row, "state", "active")
        pipe.hget(row, "payload")
        _, _, token, _, payload = pipe.execute()
        return Claimed(job, payload or b"", int(token))


def interleave(url: str, impl: type[Interleaved], inner: Callable[[Recorder], Any]) -> tuple[list[Event], Any]:
    """Two jobs enqueued; client A claims, and in the middle of A's claim client B runs
    ``inner`` (its own claim, maybe more); then A completes what it got. Returns the
    history, with a snapshot at the end, and the final snapshot."""
    name = unique("interleave")
    events: list[Event] = []
    with emq_live.connect(url) as conn_a, emq_live.connect(url) as conn_b:
        setup = Recorder(conn_a.queue(name), "setup", events.append)
        for job in (J1, J2):
            setup.call("enqueue", id=job, payload=f"payload {job}")
        b = Recorder(impl(conn_b, name), "B", events.append)
        queue_a = impl(conn_a, name)
        queue_a.between = lambda: inner(b)
        a = Recorder(queue_a, "A", events.append)
        got = a.call("claim", lease_ms=LONG_LEASE)
        a.call("complete", id=got.id, token=got.token)
        final = setup.snapshot()
    return events, final


def b_claims(b: Recorder) -> None:
    b.call("claim", lease_ms=LONG_LEASE)


def b_claims_and_completes(b: Recorder) -> None:
    got = b.call("claim", lease_ms=LONG_LEASE)
    b.call("complete", id=got.id, token=got.token)


def test_a_split_claim_is_caught_double_claimed(valkey: ServerProcess) -> None:
    events, final = interleave(valkey.url, SplitClaim, b_claims)
    claims = [(e.process, e.output[0], e.output[2]) for e in events if e.op == "claim"]
    assert sorted(claims) == [("A", J1, 2), ("B", J1, 1)]  # the race happened, as forced
    # The keyspace alone looks sound: J1 active, J2 pending, every invariant holds.
    assert invariants.check_invariants(final) == []
    checked = history.check_history(events, seconds=10)
    assert checked.verdict == ILLEGAL
    assert [p.key for p in checked.linearizability.illegal] == [J1]
    told = "\n".join(history.explain(checked.linearizability.illegal[0]))
    assert f"job {J1}: illegal" in told and "A: claim(lease_ms=60000" in told and "B: claim(lease_ms=60000" in told


def test_a_split_claim_is_caught_completing_a_job_twice(valkey: ServerProcess) -> None:
    events, final = interleave(valkey.url, SplitClaim, b_claims_and_completes)
    oks = [e.args["id"] for e in events if e.op == "complete" and e.output == "ok"]
    assert oks == [J1, J1]
    acc = account(events, final)
    assert acc.duplicated == (J1,)
    checked = history.check_history(events, seconds=10)
    assert checked.verdict == ILLEGAL and J1 in [p.key for p in checked.linearizability.illegal]


@pytest.mark.parametrize("inner", [b_claims, b_claims_and_completes])
def test_the_atomic_claim_under_the_same_interleaving_is_accepted(valkey: ServerProcess, inner: Any) -> None:
    events, final = interleave(valkey.url, AtomicClaim, inner)
    a_claim, b_claim = (next(e for e in events if e.op == "claim" and e.process == p) for p in "AB")
    assert a_claim.invoke < b_claim.invoke < b_claim.ret < a_claim.ret  # they overlap
    assert {a_claim.output[0], b_claim.output[0]} == {J1, J2}
    assert history.check_history(events, seconds=10).verdict == OK
    assert invariants.check_invariants(final) == []


def test_the_ledger_names_every_way_a_job_can_end() -> None:
    """Five jobs: completed once, dead, lost (no trace, no ack), unsettled (still
    pending), completed twice; and counters that disagree with the answers."""
    done, dead, lost, stuck, twice = (encode(JOB, n) for n in (1, 2, 3, 4, 5))
    events = [Event("p", "enqueue", {"id": j, "payload": "x"}, "enqueued", 0, 1) for j in (done, dead, lost, stuck, twice)]
    events += [Event("w", "complete", {"id": j, "token": 1}, "ok", 2, 3) for j in (done, twice, twice)]
    rows = {j: {"state": b"x", "attempts": b"1", "payload": b"x"} for j in (dead, stuck)}
    final = Snapshot.build("q", {"dead": [(dead, 0)], "pending": [(stuck, 0)]}, rows, completed=3, failed=0)
    acc = account(events, final)
    assert (acc.created, acc.completed, acc.dead) == (5, 1, 1)
    assert (acc.lost, acc.duplicated, acc.unsettled) == ((lost,), (twice,), (stuck,))
    assert acc.problems == ("counter failed is 0, but 1 jobs are dead",)
    assert not acc.clean


def test_inv7_between_snapshots_allows_for_jobs_born_in_between() -> None:
    """A job enqueued and completed between two snapshots is in neither; only the
    ``born`` bound (SOAK-13) tells INV-7 that the completion may be real."""
    before = Snapshot.build("q", {}, {}, completed=0)
    after = Snapshot.build("q", {}, {}, completed=1)
    assert [v.invariant for v in invariants.check_invariants(after, before)] == ["INV-7"]
    assert invariants.check_invariants(after, before, born=1) == []
    assert [v.invariant for v in invariants.check_invariants(Snapshot.build("q", {}, {}, completed=2), before, born=1)] == ["INV-7"]


# -- real soaks ------------------------------------------------------------------------------------

SMALL = SoakConfig(workers=3, jobs=150, seconds=40, crash=0.1, overrun=0.05, check_seconds=30, seed=7)


def test_fates_follow_their_probabilities() -> None:
    cfg = SoakConfig(crash=0.1, fail=0.2, overrun=0.3, long=0.1)
    assert [fate(d, cfg) for d in (0.0, 0.05, 0.2, 0.45, 0.65, 0.85, 0.999)] == [
        "crash", "crash", "fail", "overrun", "long", "complete", "complete"]


@pytest.mark.parametrize("bad", [{"workers": 0}, {"producers": 1025}, {"crash": 0.6, "fail": 0.6},
                                 {"scheduled": -0.1}, {"seconds": 0}])
def test_a_bad_config_is_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        SoakConfig(**bad)


def test_a_soak_on_valkey_keeps_every_job(valkey: ServerProcess) -> None:
    report = run_soak(valkey.url, SMALL)
    fig = report.figures()
    assert report.ok, "\n".join(fig["problems"])
    assert fig["jobs"] == SMALL.jobs
    assert fig["completed"] + fig["dead"] == SMALL.jobs
    assert (fig["lost"], fig["duplicated"], fig["unsettled"], fig["violations"]) == (0, 0, 0, 0)
    assert fig["linearizability"] == OK and fig["partitions"] == SMALL.jobs and fig["claim_order"] == 0
    assert fig["history"] == len(report.events) > 3 * SMALL.jobs
    # The run did what it claims to exercise: crashes recovered by the reaper, retries,
    # extensions, promotions, and a stale or gone answer to a worker that overran.
    assert fig["restarts"] >= 1
    assert any(e.op == "reap" and e.output > 0 for e in report.events)
    assert any(e.op == "promote" and e.output > 0 for e in report.events)
    assert {"retry", "extend", "schedule"} <= set(fig["ops"])
    assert any(e.op == "complete" and e.output in ("EMQSTALE", "gone") for e in report.events)
    assert fig["snapshots"] >= 2
    # A passed run leaves nothing of its queue behind.
    with valkey.client() as r:
        assert list(r.scan_iter(match=f"emq:{{{report.queue}}}:*")) == []


def test_lane_service_counts_each_groups_claims_and_its_longest_first_wait() -> None:
    a, b = (encode(JOB, n) for n in (1, 2))
    events = [Event("p0", "lane_enqueue", {"id": a, "payload": "x", "group": "g0"}, "enqueued", 0, 1),
              Event("p0", "lane_enqueue", {"id": b, "payload": "x", "group": "g1"}, "enqueued", 2_000_000, 3_000_000),
              Event("w0", "lane_claim", {"lease_ms": 5}, [b, "x", 1, "g1"], 4_000_000, 5_000_000, (1, 1)),
              Event("w1", "lane_claim", {"lease_ms": 5}, [a, "x", 1, "g0"], 6_000_000, 9_000_000, (1, 1)),
              Event("w1", "lane_claim", {"lease_ms": 5}, [a, "x", 2, "g0"], 20_000_000, 30_000_000, (1, 1)),
              Event("w1", "lane_claim", {"lease_ms": 5}, None, 31_000_000, 32_000_000, (1, 1))]
    got = {s.group: s for s in lanes.service(events)}
    assert (got["g0"].jobs, got["g0"].served, got["g0"].longest_wait_ms) == (1, 2, 9.0)  # the retry's claim is no wait
    assert (got["g1"].served, got["g1"].longest_wait_ms) == (1, 3.0)
    assert got["g0"].share == pytest.approx(2 / 3) and lanes.mismatches(events) == []
    wrong = events + [Event("w2", "lane_claim", {"lease_ms": 5}, [b, "x", 2, "g0"], 40, 41, (1, 1))]
    assert lanes.mismatches(wrong) == [f"w2: lane_claim answered {b} of group 'g0', put on 'g1'"]


def test_the_busy_group_gets_its_share_of_the_jobs() -> None:
    cfg = SoakConfig(lanes=5, busy=0.6)
    groups = [lane_group(i / 1000, cfg) for i in range(1000)]
    assert groups.count("g0") == 600 and all(99 <= groups.count(f"g{i}") <= 101 for i in range(1, 5))  # float edges


def test_a_soak_with_lanes_keeps_every_job_and_reports_each_groups_service(valkey: ServerProcess) -> None:
    """SOAK-20..22: many groups, one very busy; accounting, invariants and the
    history check as for the core, and each group's share of the grouped claims and its
    longest wait."""
    cfg = SoakConfig(workers=3, jobs=240, seconds=40, lanes=6, busy=0.7, crash=0.05, check_seconds=30, seed=5)
    report = run_soak(valkey.url, cfg)
    fig = report.figures()
    assert report.ok, "\n".join(fig["problems"])
    assert (fig["lost"], fig["duplicated"], fig["unsettled"], fig["violations"]) == (0, 0, 0, 0)
    assert fig["linearizability"] == OK and fig["partitions"] == cfg.jobs
    put = [e for e in report.events if e.op == "lane_enqueue"]
    served = [e for e in report.events if e.op == "lane_claim" and e.output is not None]
    assert put and {"lane_enqueue", "lane_claim", "claim", "schedule"} <= set(fig["ops"])
    service = {s["group"]: s for s in fig["lanes"]}
    assert set(service) == {f"g{i}" for i in range(6)}
    assert sum(s["jobs"] for s in service.values()) == len(put)
    assert sum(s["served"] for s in service.values()) == len(served)
    assert sum(s["share"] for s in service.values()) == pytest.approx(1, abs=1e-3)
    # every job put on a lane leaves it only through a grouped claim; the busy group holds the most
    assert all(s["served"] >= s["jobs"] and s["longest_wait_ms"] > 0 for s in service.values())
    assert max(service.values(), key=lambda s: s["jobs"])["group"] == "g0"
    assert "longest wait (ms)" in format_report(report)


def test_a_run_the_check_could_not_finish_does_not_pass(valkey: ServerProcess) -> None:
    """A check budget too small to judge even one partition: the verdict is unknown, and
    unknown is not a pass; nothing was shown wrong either, so it is inconclusive, never
    differs (SOAK-5)."""
    report = run_soak(valkey.url, SoakConfig(workers=2, jobs=20, seconds=30, check_seconds=1e-9))
    assert report.history_dir is not None and sorted(report.history_dir.glob("*.jsonl"))  # a failed run keeps it
    shutil.rmtree(report.history_dir)
    fig = report.figures()
    assert (fig["lost"], fig["duplicated"], fig["violations"]) == (0, 0, 0)
    assert fig["linearizability"] == "unknown" and fig["unknown"] == 20
    assert not report.ok and (fig["verdict"], report.detail) == ("inconclusive", "unproved")
    assert "20 partitions unknown within the check budget" in format_report(report)


def test_a_run_whose_time_ran_out_is_inconclusive_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    """SOAK-5: jobs the time left unsettled (and jobs never created) fail the run, exit 1,
    but show nothing wrong: ``inconclusive (unproved)``, never ``differs (violations)``."""
    code = cli.main(["soak", "--workers", "1", "--jobs", "50", "--seconds", "1e-9", "--json"])
    document = json.loads(capsys.readouterr().out)
    fig = document["soak"]["figures"]
    shutil.rmtree(document["soak"]["history"])
    assert code == 1 and fig["timed_out"]
    assert (fig["lost"], fig["duplicated"], fig["violations"], fig["illegal"]) == (0, 0, 0, 0)
    assert (document["verdict"], document["detail"]) == ("inconclusive", "unproved")
    assert "the jobs were not all created and settled within the run's 1e-09 s" in fig["problems"]


def test_the_command_prints_figures_as_json_and_a_table(capsys: pytest.CaptureFixture[str]) -> None:
    """Without --url the command starts its own valkey-server."""
    code = cli.main(["soak", "--workers", "2", "--jobs", "40", "--seconds", "30", "--json"])
    out = capsys.readouterr().out
    fig = json.loads(out)["soak"]["figures"]
    assert code == 0, fig["problems"]
    assert fig["server"].startswith("throwaway valkey-server")
    for key in ("jobs", "workers", "lost", "duplicated", "violations", "history", "check_seconds"):
        assert key in fig
    assert (fig["jobs"], fig["workers"], fig["lost"], fig["duplicated"]) == (40, 2, 0, 0)


@pytest.mark.parametrize("argv, says", [
    (["--producers", "2000", "--jobs", "5"], "--producers: must be at most 1,000 (processes)"),
    (["--url", "redis+cluster://127.0.0.1:1"], "cluster URL is not supported"),
    (["--url", "redis://127.0.0.1:1"], "cannot open a queue connection to redis://127.0.0.1:1"),
    (["--url", "bogus://x"], "bogus://x: the scheme must be one of"),
])
def test_the_command_refuses_bad_input_with_exit_2(argv: list[str], says: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    try:
        code = cli.main(["soak", *argv])
    except SystemExit as exc:  # argparse's own refusal (BD-1)
        code = int(exc.code or 0)
    assert code == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1


def _children() -> set[int]:
    """The pids of this process's live children (every thread's)."""
    out: set[int] = set()
    for task in Path("/proc/self/task").iterdir():
        try:
            text = (task / "children").read_text().split()
        except (FileNotFoundError, ProcessLookupError):
            continue  # a thread that ended since the listing (a driver test's reader thread)
        out |= {int(pid) for pid in text}
    return out


def _when_busy(url: str, then: Callable[[], None], seen: set[int], before: set[int], want: int) -> threading.Thread:
    """A thread that waits (bounded) until the soak's processes have written some jobs and
    ``want`` children not in ``before`` were seen, noting in ``seen`` every child met
    meanwhile, and runs ``then``. (A worker the soak crashes on purpose is gone until its
    replacement starts: one look at the children could miss it.)"""

    def run() -> None:
        try:
            deadline = time.monotonic() + 20
            with redis.Redis.from_url(url) as r:
                while time.monotonic() < deadline:
                    seen.update(_children())
                    if len(seen - before) >= want and r.dbsize() >= 30:
                        break
                    time.sleep(0.01)
        finally:
            then()  # whatever failed above (the test then fails on ``seen``), never a run left to go on

    thread = threading.Thread(target=run)
    thread.start()
    return thread


BUSY = SoakConfig(workers=3, jobs=5000, seconds=30, rate=200)
"""A run that would go on for 25 s if nothing stopped it."""
EVERY = BUSY.producers + BUSY.workers + 2
"""The soak's children while it runs: producers, workers, the reaper and the promoter."""


def test_an_interrupted_run_leaves_no_process_behind(monkeypatch: pytest.MonkeyPatch, ctrl_c: None) -> None:
    """Ctrl-C in the coordinator while its children and its own valkey-server run: when
    ``run_soak`` returns, none of them is left (the children would otherwise work on).
    Run under ``interrupts.stopping()`` as ``emq soak`` runs it: bare, a Ctrl-C landing in
    a finalizer (a redis connection's ``__del__``) is only reported, and the soak ran on."""
    import emq_kit.server as server_module

    started: list[ServerProcess] = []

    class Recorded(ServerProcess):
        def start(self) -> ServerProcess:
            super().start()
            started.append(self)  # answering PING by now
            return self

    monkeypatch.setattr(server_module, "ServerProcess", Recorded)
    before, seen = _children(), set()
    main = threading.main_thread().ident
    assert main is not None
    threads: list[threading.Thread] = []

    def interrupt() -> None:
        signal.pthread_kill(main, signal.SIGINT)

    def watch() -> None:
        deadline = time.monotonic() + 20
        while not started and time.monotonic() < deadline:
            time.sleep(0.01)
        if started:
            threads.append(_when_busy(started[0].url, interrupt, seen, before, EVERY + 1))

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        with pytest.raises(KeyboardInterrupt), interrupts.stopping():
            run_soak(None, BUSY)
    finally:
        watcher.join(30)
        for t in threads:
            t.join(30)
    assert len(seen - before) >= EVERY + 1  # the server and every child
    assert _children() - before == set()
    assert not any(_alive(pid) for pid in seen - before)


def test_a_run_whose_server_dies_fails_with_an_error_and_leaves_no_process_behind() -> None:
    before, seen = _children(), set()
    with ServerProcess("valkey-server") as server:
        before.add(server.pid)
        killer = _when_busy(server.url, server.kill, seen, before, EVERY)
        try:
            with pytest.raises((SoakError, redis.exceptions.ConnectionError)):
                run_soak(server.url, BUSY)
        finally:
            killer.join(30)
    assert len(seen - before) >= EVERY
    assert _children() - before == set()
    assert not any(_alive(pid) for pid in seen - before)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_a_run_interrupted_past_its_judgement_says_the_history_it_kept(monkeypatch: pytest.MonkeyPatch,
                                                                       capsys: pytest.CaptureFixture[str],
                                                                       ctrl_c: None) -> None:
    """INT-2: a Ctrl-C noted once the run was judged failed (its history kept) and before
    its verdict ends the command as interrupted, and the line says where the history is:
    a directory kept unsaid is a leftover nobody knows of."""
    decided = interrupts.decided

    def interrupted() -> None:
        signal.raise_signal(signal.SIGINT)  # noted by the command's stopping(), raised by decided()
        decided()

    monkeypatch.setattr(interrupts, "decided", interrupted)
    code = cli.main(["soak", "--workers", "2", "--jobs", "20", "--seconds", "30", "--check-seconds", "1e-9"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 130 and err[-1].startswith("emq soak: interrupted; seed "), err
    kept = Path(err[-1].rpartition("its history is kept in ")[2])
    assert kept.name.startswith("emq-soak-") and sorted(kept.glob("*.jsonl")), err
    shutil.rmtree(kept)

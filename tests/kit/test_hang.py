"""A script that never returns is a difference (specs/lifecycle.md CC-9): on the embedded
fakeredis its Lua is stopped past a bound of CPU (the embedded default never hangs), on a
server the kit's call times out and ``SCRIPT KILL`` stops it, and either way the verdict
is a ``hang`` difference at that step, with its trace, and the server answers again. A
hang that has written cannot be stopped by ``SCRIPT KILL``: it is still the verdict (exit
1), its answer says the server must be restarted, and no step follows it.

The scripts are real copies of ours with one edit each: claim's walk that never moves
past an orphan (read-only: a server can stop it), and lane_claim's serve loop without its
``ZREM`` (the head is never taken, so an orphan is met forever)."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis

from emq_kit import cli
from emq_kit.check import hang
from emq_kit.check.focus import Focus
from emq_kit.check.live import LiveTarget
from emq_kit.check.profiles import PROFILES
from emq_kit.check.run import run_check
from emq_kit.check.signature import signature
from emq_kit.check.step import Crash, Step
from emq_kit.check.target import open_target
from emq_kit.errors import ScriptHang
from emq_kit.report.document import validate
from emq_kit.server import ServerProcess
from emq_kit.trace.format import Trace, header
from emq_kit.trace.replay import replay
from emq_live import embedded
from tests.broken import Broken, broken_dir

STALL = Broken("claim-walk-stalls", "claim", "  rank = rank + #page\n", "",
               "claim's walk never moves past an orphan: the script never returns (CC-9)")
NO_ZREM = Broken("serve-keeps-head", "lane_claim", '    redis.call("ZREM", lane.key, id)\n', "",
                 "lane_claim's serve loop never takes the head: an orphan is met forever (CC-9)")
SCAN_FOREVER = Broken("snapshot-scans-forever", "snapshot", 'until cursor == "0"\n', 'until cursor == "1"\n',
                     "snapshot.lua's SCAN loop never ends: the snapshot read never returns (CC-9)")
JOB = "JOB00000000001"
ORPHAN_CLAIM = [Step("alpha", "enqueue", {"id": JOB, "payload": b"p"}), Step("alpha", "forget_row", {"id": JOB}),
                Step("alpha", "claim", {"lease_ms": 5, "now": 1_750_000_000_000})]
ORPHAN_LANE_CLAIM = [Step("alpha", "lane_enqueue", {"id": JOB, "payload": b"p", "group": "g"}),
                     Step("alpha", "forget_row", {"id": JOB}),
                     Step("alpha", "lane_claim", {"lease_ms": 5, "now": 1_750_000_000_000})]


QUICK_CPU = 0.3
"""The embedded bound of CPU seconds where a test meets a hang many times (a search's
shrinking and minimizing wait it out at each replay that meets it). It is CPU time, so a
loaded machine does not make a call look hung. It is the process's CPU, so it must hold
more than the largest call these runs draw (a few milliseconds: their batches hold at
most four jobs) plus a full collection of a test worker's heap, which may fall inside a
call (60-80 ms here). The default's own test is
``test_the_embedded_bound_stops_a_loop_and_spares_the_largest_call``."""


QUICK_SECONDS = 1.0
"""``hang.SERVER_SECONDS`` under the quicker bounds: the kit's call gives up after 1 s
(a call these runs draw returns in about a millisecond)."""
QUICK_BUSY_MS = "500"
"""The server's ``busy-reply-threshold`` under them: ``BUSY`` and ``SCRIPT KILL`` after 0.5 s."""


@contextmanager
def quick_server(program: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[ServerProcess]:
    """A private ``program`` (valkey-server, redis-server) whose hung scripts are stopped
    sooner: both bounds a tenth of their defaults, in the same order (the server answers
    ``BUSY`` and hears ``SCRIPT KILL`` after 0.5 s of a script, the kit's call gives up
    after 1 s). For the tests that wait hangs out (a search at each replay that meets
    one, a selftest's watch) or lose the server to one; the defaults' own are the
    replays on the session's server and the cluster."""
    monkeypatch.setattr(hang, "SERVER_SECONDS", QUICK_SECONDS)
    with ServerProcess(program, config={"busy-reply-threshold": QUICK_BUSY_MS}) as server:
        yield server


@contextmanager
def quick_nodes(cluster: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The session's ``cluster`` with ``quick_server``'s bounds: every node's
    ``busy-reply-threshold`` until the block ends, then each node's own again (a node
    still running a hung script is freed first, CONFIG SET answers BUSY then, and every
    node is put back even if one fails to be); ``hang.SERVER_SECONDS`` for the test."""
    monkeypatch.setattr(hang, "SERVER_SECONDS", QUICK_SECONDS)
    was: list[tuple[Any, Any]] = []
    try:
        for node in cluster.nodes:
            with node.client() as r:
                was.append((node, r.config_get("busy-reply-threshold")["busy-reply-threshold"]))
                r.config_set("busy-reply-threshold", QUICK_BUSY_MS)
        yield cluster
    finally:
        failed = []
        for node, threshold in was:
            with node.client() as r:
                with contextlib.suppress(redis.exceptions.ResponseError):  # NOTBUSY: nothing running
                    r.execute_command("SCRIPT", "KILL")
                try:
                    r.config_set("busy-reply-threshold", threshold)
                except redis.exceptions.RedisError as exc:
                    failed.append(f"{node.port}: {exc}")
        if failed and sys.exc_info()[0] is None:  # the block's own failure, if any, is the one to show
            raise AssertionError(f"busy-reply-threshold not put back on {failed}")


@pytest.fixture
def quick(monkeypatch: pytest.MonkeyPatch) -> Iterator[ServerProcess]:
    """A private Valkey with the quicker bounds (``quick_server``)."""
    with quick_server("valkey-server", monkeypatch) as server:
        yield server


def _hung_at(result, index: int) -> None:
    """``result`` diverges at step ``index`` as a hang (CC-9), its target answer the hang."""
    assert result.divergence is not None and result.index == index, result.steps
    assert signature(result.divergence).rule == hang.RULE == "CC-9", result.divergence
    answer = result.steps[index - 1].target
    assert isinstance(answer, Crash) and isinstance(answer.exc, ScriptHang), answer
    assert str(answer.exc).startswith("hang: "), answer


def test_the_embedded_search_names_a_script_that_never_returns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """``emq check --scripts COPY`` on the embedded fakeredis ends: a
    counterexample at the claim that met the orphan, the steps before it its trace, and
    its cause says the script never returned. The bound is made ``QUICK_CPU`` here: the
    minimizer replays the hang several times, each waiting out the bound (the default's
    own test is the replay below)."""
    monkeypatch.setattr(embedded, "CPU_SECONDS", QUICK_CPU)
    scripts = str(broken_dir(STALL, tmp_path))
    report = tmp_path / "check.json"
    assert cli.main(["check", "--scripts", scripts, "--profile", "dev", "--seed", "1", "--traces",
                     str(tmp_path / "traces"), "--report", str(report)]) == cli.EXIT_FAIL
    out = capsys.readouterr().out
    document = json.loads(report.read_text("utf-8"))
    validate(document)
    found = document["check"]["differences"]  # the stalled walk may break more than the claim (INV-*)
    hangs = [x for x in found if x["signature"]["rule"] == "CC-9"]
    d = next((x for x in hangs if x["signature"]["cell"].startswith("claim/")), None)
    assert d is not None, [x["signature"] for x in found]
    trace = Trace.load(d["trace"])
    assert [s.op for s in trace.steps][-2:] == ["forget_row", "claim"], trace.steps
    assert f"raised ScriptHang: hang: the script ran past {QUICK_CPU:g} s of CPU" in out, out
    assert document["check"]["phases"]["reproduce"]["reproduced"] == len(found)


def test_the_orphan_met_forever_by_lane_claim_is_a_hang_on_fakeredis(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """lane_claim without its ``ZREM`` (``NO_ZREM``), which never returns: the replay of
    its three steps diverges at the grouped claim as a hang, bounded by the embedded
    runtime's CPU bound (``QUICK_CPU`` here: the default's own test is the next one)."""
    monkeypatch.setattr(embedded, "CPU_SECONDS", QUICK_CPU)
    target = open_target(scripts=str(broken_dir(NO_ZREM, tmp_path)))
    try:
        _hung_at(replay(ORPHAN_LANE_CLAIM, target), 3)
        assert target.conn.redis.ping()
    finally:
        target.close()


def test_the_embedded_bound_stops_a_loop_and_spares_the_largest_call() -> None:
    """The bound is CPU of one call (``embedded.CPU_SECONDS``): an endless loop is stopped
    with its word; the largest batch the contract allows is not."""
    from emq_live.client import connect

    with connect() as conn:
        with pytest.raises(redis.exceptions.ResponseError, match=embedded.HANG):
            conn.redis.eval("while true do end", 0)
        assert conn.redis.eval("return 7", 0) == 7  # the hook went with the call
        q = conn.queue("big")
        jobs = [(f"JOB{i:011d}", b"x") for i in range(1, 10_001)]
        assert q.enqueue_many(jobs)[:1] == ["enqueued"]


def test_a_server_stops_the_hung_script_and_answers_again(valkey, tmp_path: Path) -> None:
    """On Valkey the call times out after ``hang.SERVER_SECONDS``, the kit sends ``SCRIPT
    KILL``, the step is a hang difference (it was ``emq bug: ResponseError: BUSY``) and
    the server is usable: nothing runs, the next replay conforms."""
    target = open_target(url=valkey.url, scripts=str(broken_dir(STALL, tmp_path)))
    try:
        _hung_at(replay(ORPHAN_CLAIM, target), 3)
        with valkey.client() as r:
            assert r.ping()
            with pytest.raises(redis.exceptions.ResponseError, match="NOTBUSY"):
                r.execute_command("SCRIPT", "KILL")
        assert replay(ORPHAN_CLAIM[:1], target).conforms
    finally:
        target.close()


def test_a_cluster_node_stops_the_hung_script_and_answers_again(cluster, tmp_path: Path) -> None:
    """On a cluster every node's connection is bounded by ``hang.SERVER_SECONDS`` (not
    redis-py's 5 s, which would cut the call before the server hears SCRIPT KILL): the
    hung claim is a hang difference, its primary stopped, and the next replay conforms."""
    target = open_target(url=cluster.url, scripts=str(broken_dir(STALL, tmp_path)))
    try:
        client = target.conn.redis
        bounds = {client.get_redis_connection(n).connection_pool.connection_kwargs["socket_timeout"]
                  for n in client.get_primaries()}
        assert bounds == {hang.SERVER_SECONDS}
        _hung_at(replay(ORPHAN_CLAIM, target), 3)
        for node in cluster.nodes:
            with node.client() as r:
                with pytest.raises(redis.exceptions.ResponseError, match="NOTBUSY"):
                    r.execute_command("SCRIPT", "KILL")
        assert replay(ORPHAN_CLAIM[:1], target).conforms
    finally:
        target.close()


def test_a_snapshot_that_never_returns_is_a_hang_within_the_call_bound(quick: ServerProcess, tmp_path: Path) -> None:
    """The snapshot read is a script call like any other: a port's snapshot.lua that never
    returns is stopped past ``hang.SERVER_SECONDS`` and is a ``ScriptHang`` (CC-9), not
    the socket's plain timeout, and the server answers again; the machine makes it the
    step's snapshot divergence under CC-9."""
    target = open_target(url=quick.url, scripts=str(broken_dir(SCAN_FOREVER, tmp_path)), observe=False)
    try:
        target.call("alpha", "enqueue", {"id": JOB, "payload": b"p"})
        with pytest.raises(ScriptHang, match="the snapshot of 'alpha' did not return"):
            target.snapshot("alpha")
        with quick.client() as r:
            with pytest.raises(redis.exceptions.ResponseError, match="NOTBUSY"):
                r.execute_command("SCRIPT", "KILL")
        result = replay(ORPHAN_CLAIM[:1], target)  # the machine's read after the step: its snapshot divergence
        assert result.divergence is not None and result.divergence.kind == "snapshot" and result.index == 1
        assert signature(result.divergence).rule == hang.RULE, result.divergence
    finally:
        target.close()


@pytest.mark.parametrize("program", ["valkey-server", "redis-server"])
def test_a_window_posted_ahead_puts_the_hang_on_the_call_that_never_returned(program: str, tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A window's calls and faults go out as their steps are made: when one never returns,
    the server sends none of their replies until it is stopped, then the replies before
    it and its own, the script's being killed. Those before it are judged as they are,
    the hung call answers its ``ScriptHang``, and so does every call after it (never
    judged: the hung step diverges first). A snapshot.lua call that never returns leaves
    its step's answer as read and its snapshot to be read again, as step by step."""
    with quick_server(program, monkeypatch) as quick:
        _hung_in_window(quick, tmp_path)


def _hung_in_window(quick: ServerProcess, tmp_path: Path) -> None:
    target = LiveTarget(quick.url, str(broken_dir(STALL, tmp_path)), observe=True)
    try:
        target.post([("enqueue", "alpha", {"id": JOB, "payload": b"p"}), ("forget_row", "alpha", {"id": JOB}),
                     ("claim", "alpha", {"lease_ms": 5, "now": 1_750_000_000_000}),
                     ("enqueue", "alpha", {"id": "JOB00000000002", "payload": b"p"})])
        enqueued, forgot, claimed, after = target.collect()
        assert enqueued.answer == "enqueued" and enqueued.snapshot.row(JOB) is not None
        assert forgot.answer is None and forgot.snapshot.row(JOB) is None
        assert isinstance(claimed.answer, ScriptHang) and claimed.snapshot is None and after == claimed
    finally:
        target.close()
    target = LiveTarget(quick.url, str(broken_dir(SCAN_FOREVER, tmp_path)), observe=True)
    try:
        target.post([("enqueue", "alpha", {"id": JOB, "payload": b"p"})])
        (reply,) = target.collect()
        assert (reply.answer, reply.snapshot) == ("enqueued", None)
    finally:
        target.close()


def test_a_hang_that_has_written_is_the_verdict_and_says_restart(quick: ServerProcess, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """lane_claim without its ``ZREM`` loops after the ring's ``LMOVE``: ``SCRIPT KILL``
    cannot stop it. ``emq replay`` still ends on the hang difference (exit 1) and says
    the server must be restarted; a private server, since it is lost to everything else.
    In this process, for the quicker bounds."""
    scripts = broken_dir(NO_ZREM, tmp_path)
    head = header({"target": quick.url, "scripts": str(scripts)}, seed=0, profile="dev", clock="virtual")
    path = Trace({**head, "renamed": {}}, ORPHAN_LANE_CLAIM).write(tmp_path / "t.json")
    code = cli.main(["replay", str(path), "--scripts", str(scripts), "--url", quick.url])
    out = capsys.readouterr()
    assert code == cli.EXIT_FAIL and "Traceback" not in out.out + out.err, out.out + out.err
    assert "CC-9" in out.out and "SCRIPT KILL cannot stop it" in out.out, out.out + out.err
    quick.kill()  # lost, as it said: it would outlive a shutdown's SIGTERM, running the script


def test_a_cluster_takes_its_windows_whole(cluster) -> None:
    """A cluster client holds a window's calls until it routes them as one pipeline, and
    a hang in it is known by the window, not by its call (the window's first step
    carries it). So a cluster target takes no calls ahead, and the operator's faults,
    which go in the windows of one that does, open a window of their own there: a
    stalling claim after a row deleted by hand is its window's first step. (A search
    that found the claim's hang, with the faults in windows, reported a hang at another
    step that no replay showed.)"""
    target = LiveTarget(cluster.url, observe=True)
    try:
        assert target.capabilities.batch_max and not target.capabilities.ahead
    finally:
        target.close()


def test_a_search_on_a_server_names_the_hang_and_leaves_the_server_usable(quick: ServerProcess, tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """``emq check --url`` with the stalling claim: its windows send many calls in one
    pipeline, so after the first hang the server runs the next hung calls the pipeline
    held (it answered the run's next command ``BUSY``: ``emq bug``). The kit stops each
    until the server answers: the verdict is the hang, and the server is free after it.
    A private server: a failure here would leave it busy. In this process, for the
    quicker bounds: the search, its minimizing and its reproducing wait one out at every
    replay that meets the hang."""
    scripts = str(broken_dir(STALL, tmp_path))
    # --first: the hung calls one window's pipeline held are the first difference's;
    # the search past it would meet the same hang again, each time waiting out its bound
    code = cli.main(["check", "--scripts", scripts, "--url", quick.url, "--profile", "dev", "--seed", "1",
                     "--first", "--json", "--traces", str(tmp_path / "traces")])
    out = capsys.readouterr()
    assert code == cli.EXIT_FAIL, out.out + out.err
    report = json.loads(out.out)
    assert any(d["signature"]["rule"] == "CC-9" for d in report["check"]["differences"]), report["check"]
    with quick.client() as r:
        assert r.ping()
        with pytest.raises(redis.exceptions.ResponseError, match="NOTBUSY"):
            r.execute_command("SCRIPT", "KILL")


HANG_ON_REFUSAL = Broken("refusal-loops", "complete", "if err then return err end\n", "if err then while true do end end\n",
                         "complete loops where it should refuse: a raw call past the client never returns (CC-9)")


@pytest.mark.parametrize("where", ["embedded", "valkey-server"])
def test_a_raw_call_that_never_returns_is_a_hang(where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A call sent past the client is bounded as any call of the target's: its hang is
    the raw step's difference under CC-9 (not a socket's timeout answered), and the
    server answers again after it."""
    scripts = str(broken_dir(HANG_ON_REFUSAL, tmp_path))
    only_raw = Focus(ops=frozenset({"raw"}), report=False)
    with contextlib.ExitStack() as stack:
        if where == "embedded":
            monkeypatch.setattr(embedded, "CPU_SECONDS", QUICK_CPU)
            url = None
        else:
            url = stack.enter_context(quick_server(where, monkeypatch)).url
        target = open_target(url, scripts)
        try:
            report = run_check(target, PROFILES["dev"], seed=2, examples=5, steps=20, focus=only_raw)
        finally:
            target.close()
        assert report.divergence is not None and report.divergence.step.op == "raw", report.divergence
        assert signature(report.divergence).rule == hang.RULE and hang.is_hang(report.divergence.step.target)
        if url is not None:
            with redis.Redis.from_url(url) as r:
                assert r.ping()

"""Server-clock mode (emq_kit/check/clock.py, specs/driver-protocol.md §6): the policy that
picks the model's clock inside the TIME window of a call, then whole runs on Valkey with
the built-in client, the Node.js port, and a port whose clock runs behind the server's."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

from emq_kit.check.clock import PUMPED, ServerClock, VirtualClock
from emq_kit.check.step import outcome
from emq_model import spec
from emq_model.branded_id import JOB, encode
from emq_model.errors import ArgError
from emq_model.model import Claimed, QueueModel
from tests.kit.processes import DRIVERS, NODE, check, emq, kit_lines, verdict

A, B = encode(JOB, 1 << 22), encode(JOB, 2 << 22)


def readings(*values: int) -> Any:
    """A TIME source that answers ``values`` in turn and nothing more."""
    it: Iterator[int] = iter(values)
    return lambda: next(it)


def run_model(op: str) -> Any:
    return lambda m, a: outcome(lambda: getattr(m, op)(**a))


def call(clock: Any, model: QueueModel, server: QueueModel, op: str, args: dict[str, Any], at: int) -> tuple[Any, Any]:
    """``op`` through ``clock``, on ``model`` and on ``server``: a model standing in for an
    implementation whose script read ``TIME`` = ``at``."""
    return clock.call(op, model, args, run_model(op),
                      lambda a: outcome(lambda: getattr(server, op)(**a, now=at)), server.snapshot)


def pair(*jobs: str) -> tuple[QueueModel, QueueModel]:
    sides = QueueModel("q"), QueueModel("q")
    for side in sides:
        for job in jobs:
            side.enqueue(job, b"p")
    return sides


def test_a_lease_is_judged_by_the_clock_the_target_used_inside_the_window() -> None:
    model, server = pair(A)
    clock = ServerClock(readings(100, 103))
    mine, theirs = call(clock, model, server, "claim", {"lease_ms": 5}, at=102)
    assert mine == theirs == Claimed(A, b"p", 1)
    assert clock.window == (100, 103, 102)
    assert model.snapshot() == server.snapshot() and dict(model.snapshot().active) == {A: 107}


@pytest.mark.parametrize("at, due", [(100, False), (101, True), (102, True)])
def test_a_run_at_inside_the_window_may_be_due_or_not_but_one_clock_explains_the_call(at: int, due: bool) -> None:
    model, server = QueueModel("q"), QueueModel("q")
    for side in (model, server):
        side.schedule(A, b"p", run_at=101, now=0)
    clock = ServerClock(readings(100, 102))
    mine, theirs = call(clock, model, server, "promote", {"limit": 10}, at=at)
    assert mine == theirs == int(due)
    assert model.snapshot() == server.snapshot()
    assert clock.window[2] == (101 if due else 100)


def test_a_score_outside_the_window_is_left_to_diverge() -> None:
    model, server = pair(A)
    clock = ServerClock(readings(100, 102))
    call(clock, model, server, "claim", {"lease_ms": 5}, at=90)  # a client clock 10 ms behind
    assert clock.window == (100, 102, 100)
    assert dict(model.snapshot().active) == {A: 105} != dict(server.snapshot().active)


def test_the_pumps_move_from_the_location_transitions_json_names() -> None:
    """PUMPED is read from the table's ``from`` of promote and reap."""
    assert PUMPED == {"promote": "schedule", "reap": "active"}


def test_ops_without_a_clock_read_no_time() -> None:
    model, server = QueueModel("q"), QueueModel("q")
    clock = ServerClock(readings())  # any TIME read would raise StopIteration
    assert clock.call("enqueue", model, {"id": B, "payload": b"x"}, run_model("enqueue"),
                      lambda a: server.enqueue(**a), server.snapshot) == ("enqueued", "enqueued")


def test_a_target_that_brackets_its_calls_costs_the_clock_no_time_read_of_its_own() -> None:
    """The window comes from the target's own round trip (``bracket``); a call it never
    sent has none, and the model runs at the clock last read (never before an earlier
    step's). Any TIME read here would raise StopIteration."""
    model, server = pair(A, B)
    clock = ServerClock(readings(100))  # the example's start only
    assert clock.start(0) == 100
    brackets = iter([(101, 104), None])
    claim = lambda a: outcome(lambda: server.claim(**a, now=103))  # noqa: E731
    mine, theirs = clock.call("claim", model, {"lease_ms": 5}, run_model("claim"), claim, server.snapshot,
                              lambda: next(brackets))
    assert mine == theirs and clock.window == (101, 104, 103)
    refused = lambda a: outcome(lambda: server.claim(**a, now=104))  # noqa: E731 - refused before I/O: no clock
    mine, theirs = clock.call("claim", model, {"lease_ms": 0}, run_model("claim"), refused, server.snapshot,
                              lambda: next(brackets))
    assert type(mine) is type(theirs) and clock.window == (104, 104, 104)  # the last clock read: t1 before


def test_a_window_of_one_clock_is_that_clock_without_reading_the_target() -> None:
    model, server = pair(A)
    clock = ServerClock(readings(100, 100))
    unread = lambda: pytest.fail("the snapshot was read for a window of one clock")  # noqa: E731
    mine, theirs = clock.call("claim", model, {"lease_ms": 5}, run_model("claim"),
                              lambda a: outcome(lambda: server.claim(**a, now=100)), unread)
    assert mine == theirs and clock.window == (100, 100, 100)


def test_the_built_in_client_reads_the_servers_clock_around_each_call_in_its_round_trip(valkey) -> None:
    """``time_calls``: TIME before the call and after its snapshot, in the same write;
    the clock the claim's script ran at (its lease deadline minus the lease) lies
    inside, also when the call met NOSCRIPT and ran again."""
    from emq_kit.check.live import LiveTarget

    target = LiveTarget(valkey.url + "/3", observe=True)
    try:
        assert target.time_calls(True)
        q = target.queue("q")
        for flush in (False, True):
            target.call("q", "enqueue", {"id": A, "payload": b"p"})
            if flush:
                target.conn.redis.script_flush()
            got = target.call("q", "claim", {"lease_ms": 60_000})
            t0, t1 = target.bracket()
            deadline = dict(q.take_snapshot().active)[got.id]
            assert t0 <= deadline - 60_000 <= t1, (t0, deadline, t1)
            target.call("q", "complete", {"id": got.id, "token": got.token})
        with pytest.raises(ArgError):
            target.call("q", "claim", {"lease_ms": 0})
        assert target.bracket() is None  # refused before any I/O: no window
    finally:
        target.close()


def test_a_call_whose_snapshot_alone_met_noscript_keeps_the_window_it_ran_in(valkey, monkeypatch: Any) -> None:
    """After SCRIPT FLUSH with only the op's script loaded again, the op runs in the first
    write and only its snapshot is sent again: the window still starts before the op (a
    window read after it would judge the op at a later clock). Every TIME read outside
    the write waits for the server's clock to move on, so a window that started after
    the op misses its clock for sure."""
    from emq_kit.check.live import LiveTarget
    from emq_live.scripts import ms_of

    target = LiveTarget(valkey.url + "/3", observe=True)
    try:
        assert target.time_calls(True)
        q = target.queue("q")
        target.call("q", "enqueue", {"id": B, "payload": b"p"})
        r = target.conn.redis
        r.script_flush()
        target.conn.scripts.load(r, ["claim"])
        read = r.time

        def later() -> Any:  # the server's TIME once its ms has passed the first one read here
            first = ms_of(read())
            while ms_of(now := read()) <= first:
                pass
            return now

        monkeypatch.setattr(r, "time", later)
        got = target.call("q", "claim", {"lease_ms": 60_000})
        t0, t1 = target.bracket()
        deadline = dict(q.take_snapshot().active)[got.id]
        assert t0 <= deadline - 60_000 <= t1, (t0, deadline, t1)
    finally:
        target.close()
    assert not LiveTarget(None).time_calls(True)  # the embedded fakeredis: its snapshot is read from memory


def test_the_virtual_clock_passes_now_and_never_waits() -> None:
    clock = VirtualClock()
    assert clock.stamp({"lease_ms": 1}, 42) == {"lease_ms": 1, "now": 42}
    assert clock.start(7) == 7 and clock.advance(10**12) == 10**12


def test_a_server_clock_wait_reaches_the_mark(valkey) -> None:
    clock = ServerClock.for_url(valkey.url)
    start = clock.start(0)
    assert clock.advance(start + 30) >= start + 30


# -- whole runs on Valkey ---------------------------------------------------------------


def test_the_built_in_client_conforms_under_the_server_clock(valkey) -> None:
    # --wipe: the session's Valkey is shared with tests that use the run's queue names
    done = emq("check", "--clock", "server", "--url", valkey.url, "--profile", "dev", "--seed", "1", "--json", "--wipe")
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["detail"] == "no-divergence"


def test_the_node_port_conforms_under_the_server_clock(valkey, node_scripts: Path) -> None:
    done = check(f"node {NODE / 'driver.js'} --scripts {node_scripts}", "--clock", "server", "--url", valkey.url,
                 "--profile", "dev", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["check"]["target"]["clock"] == "server"


@pytest.mark.parametrize("skew", [0, 1000])
def test_a_port_stamping_scores_with_its_own_clock_conforms_only_if_it_is_the_servers(valkey, skew: int) -> None:
    done = check(f"{shlex.quote(sys.executable)} {DRIVERS / 'skewed_clock.py'} {skew}", "--clock", "server",
                 "--url", valkey.url, "--profile", "dev", "--json")
    if skew == 0:  # TIME read by the client just before the call is inside the window
        assert done.returncode == 0, done.stdout + done.stderr
        return
    d = verdict(done)
    op = d["shrunk_steps"][d["step"] - 1]["op"]
    assert spec.OPS[op]["clock"], d  # a lease, a run-at or a due-ness judged by the late clock


def test_the_server_clock_needs_a_server() -> None:
    done = emq("check", "--clock", "server", "--profile", "dev")
    assert done.returncode == 2 and "needs a server" in done.stderr, done.stderr


@pytest.mark.parametrize("clock", ["virtual", "server"])
def test_a_server_that_dies_mid_run_is_the_lost_server_in_either_clock(clock: str) -> None:
    """The server goes away once the run is busy: one line naming the lost server, exit
    2. (Under the server clock Hypothesis's replay of the failing example drew otherwise,
    and the run ended as "the search failed: FlakyStrategyDefinition".)"""
    import threading
    import time

    import redis

    from emq_kit.server import ServerProcess

    with ServerProcess("valkey-server") as server:
        def kill_when_busy() -> None:
            with redis.Redis.from_url(server.url) as r:
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline and r.dbsize() < 5:
                    time.sleep(0.01)
            server.kill()

        killer = threading.Thread(target=kill_when_busy)
        killer.start()
        try:
            done = emq("check", "--url", server.url, "--clock", clock, "--profile", "ci", "--seed", "3")
        finally:
            killer.join(70)
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = kit_lines(done.stderr)
    assert line.startswith(f"emq check: lost the server {server.url}"), line
    assert "emq clean --url URL" in line, line  # its keys: OWN-5

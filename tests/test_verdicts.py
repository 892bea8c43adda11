"""The kit's own errors become verdicts (specs/driver-protocol.md DP-9, DP-13..17): an old
driver that checks its protocol strictly is offered 1 again, a driver that fails, exits,
answers garbage or hangs mid-run is a counterexample at that request, ``init`` is bounded
by ``--timeout``, a difference the server-clock phase found is written and replayed on
that clock. The driver checks run the real ``emq`` command against the drivers of
tests/drivers/faulty.py on the session's Valkey."""

from __future__ import annotations

import json
from pathlib import Path

from broken import Broken, broken_dir
from test_driver import check, emq, faulty

from emq_kit.check.run import Profile, run_check
from emq_kit.check.target import open_target
from emq_kit.ports.driver_client import STARTUP, DriverTarget
from emq_kit.trace.replay import write_trace


def test_an_old_driver_that_refuses_protocol_2_is_offered_1_in_one_line(valkey) -> None:
    done = check(faulty("strict1", "init"), "--url", valkey.url, "--profile", "dev", "--examples", "3")
    assert done.returncode == 0 and "NO-DIVERGENCE" in done.stdout, done.stdout + done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "answered init offering protocol 2 with an error (EPROTO protocol 2; this driver speaks 1)" in line, line
    assert line.endswith("started it again offering protocol 1 (DP-9)"), line
    target = DriverTarget(faulty("strict1", "init"), valkey.url)
    try:  # a restart (after a crash) offers what was agreed, without a second refusal
        assert (target.protocol, target.offer, len(target.notes)) == (1, 1, 1)
        target.process.kill()
        target.reset()
        assert target.protocol == 1 and len(target.notes) == 1
    finally:
        target.close()


def test_a_driver_that_refuses_both_offers_is_one_line_and_exit_2(valkey) -> None:
    done = check(faulty("error", "init"), "--url", valkey.url, "--profile", "dev")
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "init failed: EDRIVER the client failed (offered 2: EDRIVER the client failed; then 1)" in line, line


def test_the_timeout_bounds_init_too(valkey) -> None:
    done = check(faulty("hang", "init"), "--url", valkey.url, "--profile", "dev", "--timeout", "0.5")
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "no reply to request 1 (init) within 0.5 s; driver killed" in line, line
    target = DriverTarget(faulty("strict1", "init"), valkey.url)  # no timeout given: a runtime may be starting
    try:
        assert (target.timeout, target.init_timeout) == (10.0, STARTUP)
    finally:
        target.close()


SERVER_TIME = Broken("server-time", "lib", "tonumber(t[1]) * 1000", "tonumber(t[2]) * 1000",
                     "the server clock's seconds read from TIME's microseconds (CLK-1)")


def test_a_difference_of_the_server_clock_phase_is_written_and_replayed_on_its_clock(tmp_path: Path) -> None:
    """lib.lua's server-time arithmetic edited: the gated run's server-clock phase finds
    it after the sweep's difference, and its trace is replayed on the server clock (it was
    replayed on the virtual one: ``emq bug: TypeError: QueueModel.claim() missing ...
    'now'``)."""
    scripts = str(broken_dir(SERVER_TIME, tmp_path))
    target = open_target(scripts=scripts)
    try:
        report = run_check(target, Profile("t", examples=5, steps=10, gate=True, sweep=True), seed=1)
        assert [d.clock is not None for d in report.differences] == [False, True], report.differences
        write_trace(report, tmp_path / "traces")
    finally:
        target.close()
    late = report.differences[1]
    trace = json.loads(Path(late.trace).read_text("utf-8"))
    assert trace["clock"] == "server" and "diverges" in late.trace_text, late.trace_text
    assert all("now" not in step["args"] for step in trace["steps"])
    again = emq("replay", str(late.trace), "--scripts", scripts)  # the embedded fakeredis, on its host's clock
    assert again.returncode == 1 and "server clock" in again.stdout, again.stdout + again.stderr
    # On the virtual clock each clock op runs at the machine's clock (CLK-3), which the
    # edited arithmetic never reads: the trace conforms, and the model is never called
    # without its clock (it was: ``emq bug: TypeError ... 'now'``).
    virtual = emq("replay", str(late.trace), "--scripts", scripts, "--clock", "virtual")
    assert virtual.returncode == 0 and "conforms" in virtual.stdout, virtual.stdout + virtual.stderr
    assert "now=1750000000000" in virtual.stdout, virtual.stdout

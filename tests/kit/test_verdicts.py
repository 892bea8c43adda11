"""The kit's own errors become verdicts (specs/driver-protocol.md DP-9, DP-13..17): an old
driver that checks its protocol strictly is offered 1 again, a driver that fails, exits,
answers garbage or hangs mid-run is a counterexample at that request, ``init`` is bounded
by ``--timeout``, a difference the server-clock phase found is written and replayed on
that clock. The driver checks run the real ``emq`` command against the drivers of
tests/drivers/faulty.py on the session's Valkey."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from emq_kit.check.profiles import Profile
from emq_kit.check.run import run_check
from emq_kit.check.target import open_target
from emq_kit.ports.driver_client import STARTUP, DriverTarget
from emq_kit.trace.replay import write_trace
from tests.broken import Broken, broken_dir, variant
from tests.kit.processes import ROOT, check, emq, faulty, kit_lines


def test_an_old_driver_that_refuses_protocol_2_is_offered_1_in_one_line(valkey) -> None:
    done = check(faulty("strict1", "init"), "--url", valkey.url, "--profile", "dev", "--examples", "3")
    assert done.returncode == 0 and "INCONCLUSIVE (no-divergence)" in done.stdout, done.stdout + done.stderr
    # one line of its own among the progress meter's plain lines (emq_kit/cli/progress.py)
    (line,) = kit_lines(done.stderr)
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


def test_a_virtual_clock_trace_replayed_on_the_server_clock_sends_no_recorded_now(tmp_path: Path) -> None:
    """TR-2: under the server clock the server's ``TIME`` runs, so a virtual-clock trace's
    recorded ``now`` is not sent: our own scripts conform to the model on that clock
    (each clock op was sent the trace's ``now`` while the model ran at the server's: a
    DIFFERS at the first claim, of scripts that conform)."""
    scripts = str(broken_dir(variant("missing-del"), tmp_path))
    target = open_target(scripts=scripts)
    try:
        report = run_check(target, Profile("t", examples=20, steps=20, gate=False, sweep=False), seed=1)
        write_trace(report, tmp_path / "traces")
    finally:
        target.close()
    trace = json.loads(Path(report.trace).read_text("utf-8"))
    assert trace["clock"] == "virtual" and any("now" in step["args"] for step in trace["steps"]), trace["steps"]
    assert emq("replay", report.trace, "--scripts", scripts).returncode == 1  # the broken copy's difference
    ours = emq("replay", report.trace, "--scripts", str(ROOT / "emq_live" / "lua"), "--clock", "server")
    assert ours.returncode == 0 and "conforms" in ours.stdout and "server clock" in ours.stdout, ours.stdout + ours.stderr


# -- a driver that dies mid-run, a target that is not deterministic ------------------------

@pytest.mark.parametrize("mode, kind, words", [
    ("exit", "DriverExited", "exited with code 3 before answering request 4"),
    ("garbage", "DriverGarbage", "is not JSON"),
    ("hang", "DriverTimeout", "within 2 s; driver killed"),
])
def test_a_driver_that_dies_at_its_40th_request_is_a_counterexample_up_to_it(mode: str, kind: str, words: str,
                                                                             valkey) -> None:
    """DP-14..17: the driver dies at its 40th request since it started, whatever the op. A
    fresh driver given the same steps does not (it counts its own requests), so the run
    ends there: one difference, its trace the example's steps up to that request, listed
    as met (it was: a search that shrank it into slips and 'did not reproduce' entries for
    two minutes, or ``the search failed: FlakyFailure``)."""
    done = check(f"{faulty(mode, 'any')} 40", "--url", valkey.url, "--profile", "dev", "--timeout", "2", "--json")
    assert done.returncode == 1, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["detail"] == "counterexample", report
    (d,) = report["check"]["differences"]
    assert not report["check"]["unreproduced"], report["check"]["unreproduced"]
    assert d["evidence"][1].startswith(f"target answered raised {kind}") and words in d["evidence"][1], d
    assert d["step"] == len(d["shrunk_steps"]) >= 1 and d["trace"], d  # the steps up to that request, the last its step


def test_a_driver_that_fails_every_request_from_its_40th_on_is_a_counterexample(valkey) -> None:
    """An EDRIVER error to every request from the 40th on (the driver lives on): the
    answers the machine drew from changed under Hypothesis, which ended the run as ``the
    search failed: FlakyStrategyDefinition`` (exit 2); it is the driver's failure, one
    cause."""
    done = check(f"{faulty('error', 'any')} 40+", "--url", valkey.url, "--profile", "dev", "--timeout", "2", "--json")
    assert done.returncode == 1 and "search failed" not in done.stderr, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["detail"] == "counterexample" and report["check"]["causes"], report
    assert all("the driver failed" in c["title"] for c in report["check"]["causes"]), report["check"]["causes"]


def test_a_target_that_is_not_deterministic_is_reported_with_the_two_runs(valkey) -> None:
    """A port whose claim finds nothing on a coin's toss (DET-1): the search sees the same
    draws answered otherwise; the difference is kept apart with both runs, and a run that
    met only such differences ends ``nondeterministic``, exit 1, never a Hypothesis
    ``Flaky*`` error."""
    done = check(faulty("coin", "claim"), "--url", valkey.url, "--profile", "dev", "--timeout", "2", "--first",
                 "--json")
    assert done.returncode == 1 and "Flaky" not in done.stdout + done.stderr, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert (report["verdict"], report["detail"]) == ("differs", "nondeterministic") and not report["check"]["differences"], report
    (d,) = report["check"]["unreproduced"]
    again = d["again"]
    first = d["shrunk_steps"]
    assert again and first and d["signature"]["cell"].startswith("claim/"), d
    text = check(faulty("coin", "claim"), "--url", valkey.url, "--profile", "dev", "--timeout", "2", "--first")
    assert text.returncode == 1 and "emq check: DIFFERS (nondeterministic)" in text.stdout, text.stdout
    lines = text.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if "not deterministic (DET-1)" in line)
    assert lines[at + 1].strip().startswith("run 1: step") and lines[at + 2].strip().startswith("run 2: its step"), \
        lines[at:at + 3]


def test_the_bundle_emq_scripts_writes_checks_as_our_scripts(tmp_path: Path) -> None:
    """``emq scripts --out DIR`` then ``emq check --scripts DIR`` (how a copy to edit is
    made): lane_wclaim.lua was read as lane_claim.lua, assembled as a lane_claim, and
    every grouped claim of several answered a reply the client could not read, a
    difference of our own scripts."""
    out = tmp_path / "bundle"
    assert emq("scripts", "--out", str(out)).returncode == 0
    target = open_target(scripts=str(out))
    try:
        report = run_check(target, Profile("t", examples=30, steps=30, gate=False), seed=1)
    finally:
        target.close()
    assert report.detail == "no-divergence" and report.hits.get("lane_wclaim/one"), report.differences

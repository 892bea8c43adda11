"""The kit's own errors become verdicts (specs/driver-protocol.md DP-9, DP-13..17): an old
driver that checks its protocol strictly is offered 1 again, a driver that fails, exits,
answers garbage or hangs mid-run is a counterexample at that request, ``init`` is bounded
by ``--timeout``. Every check runs the real ``emq`` command against the drivers of
tests/drivers/faulty.py on the session's Valkey."""

from __future__ import annotations

from test_driver import check, faulty

from emq_kit.ports.driver_client import STARTUP, DriverTarget


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

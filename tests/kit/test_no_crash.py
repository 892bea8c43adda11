"""No Hypothesis error ever ends a run. Generation does not follow the
target's timing (the server clock) nor a driver's restart; a failure outside a step is
exit 2 with one line (specs/driver-protocol.md DP-17)."""

from __future__ import annotations

import shlex

import pytest

from emq_kit.check.clock import ServerClock
from emq_kit.check.profiles import PROFILES
from emq_kit.check.run import run_check
from emq_kit.ports.driver_client import DriverTarget
from tests.kit.processes import EMQ, check, faulty, kit_lines


def test_a_driver_that_times_out_on_its_third_reset_is_one_line_and_exit_2(valkey) -> None:
    # its first two examples run; the third one's reset times out, and the restarted
    # driver would answer: Hypothesis must not be left to make a flaky test of it
    done = check(f"{faulty('hang', 'reset')} 3", "--url", valkey.url, "--profile", "dev", "--timeout", "2")
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = kit_lines(done.stderr)
    assert "(reset) within 2 s" in line, line
    assert "Flaky" not in line and "search failed" not in line, line


@pytest.fixture(scope="module")
def live_driver(valkey):
    """The Python client's driver on the session's Valkey, in server-clock mode."""
    target = DriverTarget(f"{shlex.quote(str(EMQ))} driver --live", valkey.url, clock="server")
    yield target
    target.close()


@pytest.mark.parametrize("seed", range(20))
def test_a_server_clock_run_through_a_driver_ends_in_a_verdict(seed: int, live_driver, valkey) -> None:
    clock = ServerClock.for_url(valkey.url)
    try:  # a FlakyStrategyDefinition would be a SearchFailed here, a traceback at the command line
        report = run_check(live_driver, PROFILES["dev"], seed=seed, clock=clock)
    finally:
        clock.close()
    assert report.examples >= PROFILES["dev"].examples and report.divergence is None, report.divergence

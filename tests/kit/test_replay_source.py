"""``emq replay`` takes the trace's server and clock mode from its header, and a flag
overrides each; the driver a trace names runs only when ``--driver`` gives it (TR-9: a
trace is data; the same for its scripts: tests/kit/test_trace.py)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest

from tests.kit.processes import DRIVERS, check, emq
from tests.once import made_once

FOREIGN = f"{shlex.quote(sys.executable)} {DRIVERS / 'foreign.py'}"


def skewed(skew: int) -> str:
    return f"{shlex.quote(sys.executable)} {DRIVERS / 'skewed_clock.py'} {skew}"


def written(traces: Path) -> Path:
    """The one trace a ``--first`` run wrote into ``traces``."""
    found = sorted(traces.glob("*.json"))
    assert len(found) == 1, found
    return found[0]


def _foreign_first(traces: Path) -> None:
    done = check(FOREIGN, "--profile", "dev", "--first", "--traces", str(traces))
    assert done.returncode == 1, done.stdout + done.stderr


@pytest.fixture
def foreign_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The trace of the foreign port's first difference (a ``--first`` dev run): one run
    for the tests that replay it, in every worker of a test run."""
    return written(made_once(tmp_path_factory, "foreign-first", _foreign_first))


def test_a_partial_foreign_ports_trace_replays_through_its_own_driver(foreign_trace: Path) -> None:
    # the foreign port lacks reprocess: its trace replays through it all the same
    trace = foreign_trace
    refused = emq("replay", str(trace))
    assert refused.returncode == 2 and f"--driver {shlex.quote(FOREIGN)}" in refused.stderr, refused.stderr
    again = emq("replay", str(trace), "--driver", FOREIGN)
    assert again.returncode == 1 and "<- diverges" in again.stdout, again.stdout + again.stderr
    assert "foreign" in again.stdout and "virtual clock" in again.stdout
    fixed = emq("replay", str(trace), "--driver", f"{FOREIGN} --conform all")
    assert fixed.returncode == 0 and "conforms" in fixed.stdout, fixed.stdout + fixed.stderr


def test_a_server_clock_trace_replays_on_its_server_and_clock(valkey, tmp_path: Path) -> None:
    done = check(skewed(1000), "--clock", "server", "--url", valkey.url, "--profile", "dev", "--first",
                 "--traces", str(tmp_path))
    assert done.returncode == 1, done.stdout + done.stderr
    trace = written(tmp_path)
    again = emq("replay", str(trace), "--driver", skewed(1000))
    # replayed through the trace's driver on its server, judged on the server clock; whether
    # the late stamp still shows depends on the server's time now (the trace holds absolute
    # run_at values and not the waits between steps: specs/driver-protocol.md, replay)
    assert again.returncode in (0, 1), again.stdout + again.stderr
    assert "skewed_clock.py 1000" in again.stdout and "server clock" in again.stdout, again.stdout
    # the same steps through a port whose clock is the server's: the driver flag overrides,
    # the trace's server and clock stay
    fixed = emq("replay", str(trace), "--driver", skewed(0))
    assert fixed.returncode == 0 and "server clock" in fixed.stdout, fixed.stdout + fixed.stderr


@pytest.mark.parametrize("flags, words", [(["--clock", "server"], "replay runs no command a trace names"),
                                          (["--clock", "server", "--driver", FOREIGN],
                                           "the server clock needs a server: give --url")])
def test_the_server_clock_without_a_server_is_one_line(flags: list[str], words: str, foreign_trace: Path) -> None:
    refused = emq("replay", str(foreign_trace), *flags)
    assert refused.returncode == 2 and words in refused.stderr and len(refused.stderr.splitlines()) == 1, refused.stderr

"""The ``emq`` command and the test drivers (tests/drivers/) as processes, as a user runs
them: ``emq(...)``, ``check(driver, ...)`` and what their output says."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

from emq_kit.check.tally import PhaseName

ROOT = Path(__file__).resolve().parents[2]
DRIVERS = ROOT / "tests" / "drivers"
NODE = ROOT / "ports" / "node"
PY = shlex.quote(sys.executable)
EMQ = Path(sys.executable).with_name("emq")  # the console script, as a user runs it


def emq(*args: str, timeout: float = 300, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``emq ARGS`` as a user runs it, in ``cwd`` (a scratch directory by default: it
    writes traces there); never a traceback on stderr."""
    with tempfile.TemporaryDirectory() as scratch:
        done = subprocess.run([str(EMQ), *args], capture_output=True, text=True, timeout=timeout,
                              cwd=cwd or scratch)
    assert "Traceback" not in done.stderr + done.stdout, done.stderr + done.stdout
    return done


METER = re.compile(rf"emq check: ({'|'.join(re.escape(name) for name in PhaseName)})\b")
"""A line of ``emq check``'s progress meter off a terminal (emq_kit/cli/progress.py)."""


def kit_lines(stderr: str) -> list[str]:
    """What a command said on stderr, its progress meter's plain lines left out."""
    return [line for line in stderr.strip().splitlines() if not METER.match(line)]


def check(driver_cmd: str, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return emq("check", "--driver", driver_cmd, "--seed", "1", *args, cwd=cwd)


def verdict(done: subprocess.CompletedProcess[str]) -> dict:
    """The difference in the ``--json`` report of a check that found a counterexample (exit 1)."""
    assert done.returncode == 1, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert (report["verdict"], report["detail"]) == ("differs", "counterexample")
    return report["check"]["differences"][0]


def faulty(mode: str, op: str) -> str:
    return f"{PY} {DRIVERS / 'faulty.py'} {mode} {op}"

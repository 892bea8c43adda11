"""`emq check`: the machine conforms on the real scripts (fakeredis and Valkey) and
reaches every cell of the spec table; the gate fails a run that does not; the command's
exits, summary and JSON; the same seed gives the same run."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import emq_kit
from emq_kit import cli
from emq_kit.check import raw
from emq_kit.check.lanes import CELLS as LANE_CELLS
from emq_kit.check.live import LiveTarget
from emq_kit.check.model_target import ModelTarget
from emq_kit.check.profiles import PROFILES, Profile
from emq_kit.check.raw.rule import raw_cells
from emq_kit.check.run import run_check
from emq_kit.check.target import open_target
from emq_kit.errors import BadArgument
from emq_kit.figures import GOALS
from emq_model.spec import cells
from tests.kit.test_differences import shares
from tests.once import made_once

# A target with the lane ops (ours, the model) must also reach the lane cells.
EVERY = cells() + LANE_CELLS


@pytest.mark.slow
@pytest.mark.parametrize("backend, seed", [("fakeredis", 2), ("valkey", 1)])
def test_a_ci_run_of_our_scripts_conforms_reaches_every_cell_and_mixes_its_calls(
        backend: str, seed: int, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """One ci run of our scripts (the built-in client) on each backend, each seed its
    own, judged on everything a ci run promises at once: a ci run costs about a minute,
    and the suite once made five of them for these checks, one part each.

    On a server the run is ``emq check --url URL/9 --profile ci --wipe``'s own
    (``emq_kit.check``): under the run's suffixed names (OWN-2), with the windows of
    deferred verification on. A window's batch once went to the plain names, and seed 7
    then reported 19 differences on correct scripts; raw calls go under the run's names
    too (a raw call once went before the window's steps; tests/e2e/test_acl.py's ci run
    at seed 7 is that run as a restricted user)."""
    if backend == "valkey":
        report = emq_kit.check(url=f"{request.getfixturevalue('valkey').url}/9", profile="ci", seed=seed,
                               wipe=True, traces=str(tmp_path))
    else:
        target = LiveTarget(None)
        try:
            report = run_check(target, PROFILES["ci"], seed=seed)
        finally:
            target.close()
    assert report.exit_code == cli.EXIT_OK
    assert report.verdict == "conforms", report.divergence
    assert report.unreached == [] and report.reached == report.total == len(EVERY) + len(raw.KINDS)
    # COV-2: the rounds past the nominal examples aim at what is unreached, so the gate is
    # met near the nominal count (bench's goal for every seed)
    assert PROFILES["ci"].examples <= report.examples <= GOALS["coverage.ci.examples"], report.examples
    # INV-1..7 and INV-8 after every step but a raw call's: a refused one is judged by an
    # unchanged keyspace (emq_kit/check/raw/), an accepted one as a step
    raw_calls = sum(n for cell, n in report.hits.items() if cell.startswith("raw/"))
    assert report.checks >= 8 * (report.steps - raw_calls)
    # Raw calls: every kind sent (on a server under the run's names, OWN-2), the sweep and
    # the server-clock phase run
    assert all(report.hits[f"raw/{kind}"] > 0 for kind in raw.KINDS)
    assert report.phases["sweep"]["calls"] > len(raw.SWEPT)
    clocked = report.phases["server_clock"]
    assert clocked["examples"] == 20 and clocked["steps"] > 0
    # The op mix: our scripts take every op (batches, lanes, raw calls), so more
    # rules share the steps, and still the lifecycle is half and bad queue names a few per cent
    lifecycle, bad_queues = shares(report)
    assert lifecycle >= 0.5 and 0.01 <= bad_queues <= 0.05, (lifecycle, bad_queues)
    assert report.op_mix.get("raw", 0) > 0  # raw calls are calls of the mix too


def test_the_gate_fails_a_run_that_leaves_cells_unreached() -> None:
    tiny = Profile("tiny", examples=1, steps=2, gate=True)
    report = run_check(ModelTarget(), tiny, seed=1)
    assert report.detail == "uncovered" and report.verdict == "inconclusive" and not report.ok
    assert set(report.unreached) == set(EVERY) - {tuple(k.split("/")) for k in report.hits}


def test_the_rounds_past_the_nominal_examples_are_of_the_aimed_size() -> None:
    """COV-2: a gated run's rounds past its nominal examples are of ``aim_examples``
    (not ``round_examples``, the size of a round past a difference), each aimed at the
    cells then unreached, until the extra examples are spent."""
    profile = Profile("aimed", examples=2, steps=5, gate=True, extra_examples=12, round_examples=7, aim_examples=3)
    report = run_check(ModelTarget(), profile, seed=1)
    aim = report.phases["aim"]
    assert report.unreached and aim["rounds"] == 4 and aim["examples"] == 12, aim
    assert report.examples == 2 + 12


def test_without_the_gate_unreached_cells_are_reported_not_failed() -> None:
    report = run_check(ModelTarget(), Profile("tiny", examples=1, steps=2, gate=False), seed=1)
    assert report.detail == "no-divergence" and report.ok and report.unreached


def test_open_target_opens_the_model_itself_and_refuses_what_does_not_go_with_it() -> None:
    """bench's machine-alone figure and ``emq driver --model`` get the model through the
    one factory: a run on it is the machine against itself (no divergence)."""
    target = open_target(model=True)
    assert isinstance(target, ModelTarget)
    report = run_check(target, Profile("tiny", examples=3, steps=10, gate=False), seed=1)
    assert report.detail == "no-divergence" and report.steps > 0
    for kwargs in ({"url": "redis://127.0.0.1:1"}, {"scripts": "."}, {"driver": "cat"}):
        with pytest.raises(BadArgument, match="the model is its own target"):
            open_target(model=True, **kwargs)


def test_the_same_seed_gives_the_same_run() -> None:
    runs = [run_check(LiveTarget(), PROFILES["dev"], seed=7) for _ in range(2)]
    assert runs[0].steps == runs[1].steps and runs[0].hits == runs[1].hits


# One run of a seed in a fresh process, on the recording driver (every request it gets is
# logged): the modules named first are imported before emq_kit.
ONE_RUN = """import importlib, sys
for name in sys.argv[3:]:
    importlib.import_module(name)
import emq_kit
emq_kit.check(profile="dev", seed=1, examples=10, steps=20, traces=sys.argv[2],
              driver=f"{sys.executable} tests/drivers/recording.py {sys.argv[1]}")
"""


@pytest.mark.parametrize("first, hashseed", [(["emq_kit.cli"], "1"), (["emq_kit.cli", "emq_kit.trace.replay",
                                                                         "emq_kit.report.html", "emq_kit.bench"], "0")])
def test_the_same_seed_sends_the_same_steps_whatever_the_process_imported(first: list[str], hashseed: str,
                                                                          tmp_path: Path) -> None:
    """TR-11 across processes: the steps a seed sends do not depend on the modules the
    process loaded first (Hypothesis mixes constants of the loaded modules into its draws
    unless the kit holds them out) nor on the string hashes (PYTHONHASHSEED)."""
    root = Path(__file__).resolve().parents[2]
    sent = []
    for n, (modules, seed) in enumerate([([], "0"), (first, hashseed)]):
        log = tmp_path / f"requests{n}.log"
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run([sys.executable, "-c", ONE_RUN, str(log), str(tmp_path / "traces"), *modules],
                              cwd=root, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        sent.append(log.read_text("utf-8").splitlines()[0::2])  # the requests, without the replies
    assert len(sent[0]) > 50 and sent[0] == sent[1]


def _dev_run(tmp: Path) -> None:
    """``emq check --profile dev --seed 3`` with ``--report``: the text it printed
    (``out.txt``) and its JSON document (``check.json``), in ``tmp``."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main(["check", "--profile", "dev", "--seed", "3", "--report", str(tmp / "check.json")]) == cli.EXIT_OK
    (tmp / "out.txt").write_text(out.getvalue(), "utf-8")


@pytest.fixture(scope="module")
def dev_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """That run's directory: one run read by the summary's test and the JSON's, for all
    the workers of a test run (the same document ``--json`` prints: ``Outputs.emit``)."""
    return made_once(tmp_path_factory, "check-dev-3", _dev_run)


def test_the_command_prints_a_summary_and_exits_0(dev_run: Path) -> None:
    out = (dev_run / "out.txt").read_text("utf-8")
    assert out.startswith("emq check: INCONCLUSIVE (no-divergence)") and "not a conformance verdict" in out
    for word in ("examples", "steps", "invariant checks", "cells", "checked steps/s", "seed 3"):
        assert word in out


def test_json_summary(dev_run: Path) -> None:
    data = json.loads((dev_run / "check.json").read_text("utf-8"))
    body = data["check"]
    assert (data["verdict"], data["detail"]) == ("inconclusive", "no-divergence") and data["seed"] == 3 and body["profile"] == "dev"
    assert body["cells"]["total"] == len(EVERY) + len(raw_cells(sweep=False)) and body["differences"] == []
    assert body["steps"] > 0 and body["target"]["target"] == "fakeredis" == data["target"]


@pytest.mark.parametrize("argv, words", [
    (["--url", "redis://127.0.0.1:1"], "cannot open a queue connection to redis://127.0.0.1:1"),
    (["--url", "foo://nowhere"], "foo://nowhere: the scheme must be one of"),
    (["--scripts", "/nonexistent/dir"], "no script directory"),
])
def test_environment_errors_are_one_line_and_exit_2(argv: list[str], words: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["check", *argv]) == cli.EXIT_ENV
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1 and "Traceback" not in err


def test_a_script_dir_missing_a_transition_is_an_environment_error(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "claim.lua").write_text("return 1\n")
    assert cli.main(["check", "--scripts", str(tmp_path)]) == cli.EXIT_ENV
    assert "lacks" in capsys.readouterr().err

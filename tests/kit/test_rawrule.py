"""Raw calls in the conformance machine (emq_kit/check/raw/rule.py).

- ``emq check --scripts COPY`` (the ci profile, fewer examples) finds each one-check edit
  of lib.lua and batch.lua (``CHECK_EDITS``) on fakeredis, and a sample on Valkey; the
  divergence is a raw step citing the kind's rule, and its trace replays to the same
  divergence with ``emq replay``.
- Our scripts conform: every raw kind is a coverage cell a ci run reaches, the sweep and
  the server-clock phase run (asserted on tests/e2e/test_check.py's ci runs), and the figures
  are the same for the same seed.
- ``Run.raw_calls`` False (hostile calls off) sends none; a driver and the model take none.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from emq_kit import cli
from emq_kit.check import raw
from emq_kit.check.lanes import CELLS as LANE_CELLS
from emq_kit.check.live import LiveTarget
from emq_kit.check.model_target import ModelTarget
from emq_kit.check.pools import QUEUES
from emq_kit.check.profiles import PROFILES, Profile
from emq_kit.check.run import run_check
from emq_kit.selftest.mutation import check_mutants, copy_scripts
from emq_kit.trace.format import Trace
from emq_model import spec
from emq_model.spec import cells

MUTANTS = dict(zip((e.name for e in raw.CHECK_EDITS), check_mutants()))
SAMPLE = ("id-bound-strict", "queue-min", "keys-count", "batch-limit-off", "time-seconds", "decimal-sign")
"""One edit of each kind of check (the id bound, the queue bytes, the KEYS count, the batch
limit, the TIME arithmetic, the canonical decimal), for the Valkey leg."""


def _edited(name: str, into: Path) -> Path:
    mutant = MUTANTS[name]
    return copy_scripts(into, mutant.script, mutant.apply)


def _finds(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], url: str | None = None) -> None:
    """``emq check --scripts COPY`` exits 1 with a raw step's divergence, and ``emq
    replay`` of its trace diverges again at that step."""
    copy = tmp_path / "scripts"
    copy.mkdir()
    _edited(name, copy)
    traces = tmp_path / "traces"
    # --first: the edit's first difference, its one trace (a run reports every one by default)
    argv = ["check", "--scripts", str(copy), "--seed", "1", "--examples", "50", "--first", "--traces", str(traces)]
    # on a server, the machine's two queues under their logical names (--queue), the raw
    # calls' under the run's suffix (OWN-2)
    on_server = ["--url", url, "--queue", QUEUES[0], "--queue", QUEUES[1]] if url else []
    assert cli.main(argv + on_server) == cli.EXIT_FAIL, name
    out = capsys.readouterr().out
    assert "DIFFERS (counterexample)" in out
    [path] = traces.iterdir()
    trace = Trace.load(path)
    last = trace.steps[-1]
    assert last.op == "raw", f"{name}: found by a {last.op} step, not a raw call"
    call = raw.call_of(last.args)
    assert trace.divergence is not None
    assert trace.divergence["rule"] == (raw.RULES.get(raw.kind_of(call)) or spec.entry(call.op)["rule"])
    # the copy is given: a trace's header names its scripts, but replay loads none from it (TR-9)
    assert cli.main(["replay", str(path), "--scripts", str(copy)] + (["--url", url] if url else [])) == cli.EXIT_FAIL


@pytest.mark.slow
@pytest.mark.parametrize("name", list(MUTANTS))
def test_emq_check_finds_each_one_check_edit_on_fakeredis(name: str, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    _finds(name, tmp_path, capsys)


@pytest.mark.slow
@pytest.mark.parametrize("name", SAMPLE)
def test_emq_check_finds_a_sample_of_the_edits_on_valkey(name: str, tmp_path: Path, valkey: object,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    _finds(name, tmp_path, capsys, valkey.url)  # type: ignore[attr-defined]


# Our scripts conform and a ci run sends every raw kind: tests/e2e/test_check.py's ci run.


def test_the_same_seed_gives_the_same_figures_with_raw_calls() -> None:
    tiny = Profile("tiny", examples=15, steps=30, gate=False, sweep=True)
    runs = [run_check(LiveTarget(), tiny, seed=11) for _ in range(2)]
    assert runs[0].hits.get("raw/id", 0) + runs[0].hits.get("raw/queue", 0) > 0
    assert (runs[0].examples, runs[0].steps, runs[0].hits) == (runs[1].examples, runs[1].steps, runs[1].hits)


def test_raw_calls_off_sends_none() -> None:
    report = run_check(LiveTarget(), PROFILES["dev"], seed=3, raw_calls=False)
    assert not any(k.startswith("raw/") for k in report.hits)
    assert report.total == len(cells()) + len(LANE_CELLS) and report.phases == {}


def test_the_model_takes_no_raw_calls() -> None:
    report = run_check(ModelTarget(), PROFILES["dev"], seed=3)
    assert report.total == len(cells()) + len(LANE_CELLS) and not any(k.startswith("raw/") for k in report.hits)

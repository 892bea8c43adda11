"""Every command's one report, from real runs, small: ``--report FILE``
writes the versioned document, ``--json`` prints the same document, both hold against
specs/schemas/report.json with the exit code and times of the run; ``--html`` pages from
check, replay and soak render in Chromium; an unwritable output is refused before the run;
a failed soak keeps its history."""

from __future__ import annotations

import datetime as dt
import json
import re
import shlex
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import emq_live
from emq_kit import cli
from emq_kit.report.document import validate
from emq_kit.server import ServerProcess
from emq_live.client import Queue
from tests.browser import png_facts, render
from tests.e2e.test_bench import TINY
from tests.kit.test_soak import SplitClaim

DRIVERS = Path(__file__).parents[1] / "drivers"
CORPUS = Path(__file__).parents[1] / "corpus"
LUA = Path(emq_live.__file__).parent / "lua"
# the foreign port with one deviation left on: it accepts an empty queue name (KS-3)
FOREIGN = (f"{sys.executable} {DRIVERS / 'foreign.py'} "
           "--conform lease-bound,complete-settled,extend-dead,claim-orphan,reprocess")


def reported(argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str], exit: int) -> dict[str, Any]:
    """Run ``emq ARGV`` twice over: with ``--report`` (and the text on stdout), then with
    ``--json`` (the document alone on stdout). Both documents are valid, carry the exit
    code, and are the same run's shape."""
    report = tmp_path / f"{argv[0]}.report.json"
    before = dt.datetime.now(dt.timezone.utc)
    assert cli.main([*argv, "--report", str(report)]) == exit
    text = capsys.readouterr().out
    document = json.loads(report.read_text("utf-8"))
    validate(document)
    assert document["command"] == argv[0] and document["exit"] == exit
    started, finished = (dt.datetime.fromisoformat(document[k]) for k in ("started", "finished"))
    assert before - dt.timedelta(seconds=1) <= started <= finished <= dt.datetime.now(dt.timezone.utc)
    assert not text.lstrip().startswith("{")  # the human text, not the document
    assert cli.main([*argv, "--json"]) == exit
    printed = json.loads(capsys.readouterr().out)
    validate(printed)
    assert (printed["command"], printed["verdict"], printed["exit"]) == (argv[0], document["verdict"], exit)
    return document


def test_check_conforming(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    page = tmp_path / "check.html"
    d = reported(["check", "--profile", "dev", "--seed", "3", "--examples", "5", "--steps", "10", "--html", str(page)],
                 tmp_path, capsys, 0)
    assert (d["verdict"], d["detail"]) == ("inconclusive", "no-divergence") and d["seed"] == 3 and d["target"] == "fakeredis"
    assert d["check"]["differences"] == []
    assert d["check"]["rerun"] == "emq check --seed 3 --profile dev --examples 5 --steps 10"
    seen = render(page, tmp_path)  # nothing to draw: the verdict and the summary
    assert seen.console == [] and '<span class="verdict inconclusive ok">inconclusive (no-divergence)</span>' in seen.dom and "seed 3" in seen.dom


def test_check_and_replay_of_a_counterexample_with_html(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    traces = tmp_path / "traces"
    page = tmp_path / "check.html"
    d = reported(["check", "--driver", FOREIGN, "--profile", "dev", "--seed", "1", "--traces", str(traces),
                  "--html", str(page)], tmp_path, capsys, 1)
    assert (d["verdict"], d["detail"]) == ("differs", "counterexample")
    diff = d["check"]["differences"][0]
    assert diff["trace"] and Path(diff["trace"]).exists()
    assert diff["replay"] == shlex.join(["emq", "replay", diff["trace"], "--driver", FOREIGN])  # TR-9
    seen = render(page, tmp_path)
    assert seen.console == [] and png_facts(seen.screenshot)[2] > 50
    assert f'<span class="rule">{diff["signature"]["rule"]}</span>' in seen.dom

    trace = diff["trace"]
    replay_page = tmp_path / "replay.html"
    r = reported(["replay", trace, "--driver", FOREIGN, "--html", str(replay_page)], tmp_path, capsys, 1)
    assert (r["verdict"], r["detail"]) == ("differs", "diverges") and r["replay"]["trace"] == trace
    assert r["replay"]["difference"]["signature"]["rule"] == diff["signature"]["rule"]
    seen = render(replay_page, tmp_path / "r")
    assert seen.console == [] and f'<span class="rule">{diff["signature"]["rule"]}</span>' in seen.dom
    # the same trace on the built-in client: it agrees with the model at every step
    again = reported(["replay", trace, "--scripts", str(LUA)], tmp_path, capsys, 0)
    assert (again["verdict"], again["detail"]) == ("conforms", "conforms") and again["replay"]["difference"] is None


def test_selftest(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["selftest", "--only", "delete-write|enqueue|", "--budget", "20"]
    d = reported(argv, tmp_path, capsys, 0)
    # a part of the mutants (--only), all killed: no conformance (specs/selftest.md, Verdicts)
    assert (d["verdict"], d["detail"]) == ("inconclusive", "part-killed") and d["selftest"]["summary"]["killed"] >= 1
    # the old form, --json FILE, is refused before any work with the flag that writes a file
    old = tmp_path / "old.json"
    assert cli.main([*argv, "--json", str(old)]) == cli.EXIT_ENV
    assert f"write the report to {old} with --report {old}" in capsys.readouterr().err and not old.exists()


def test_soak_passing(valkey: ServerProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["soak", "--url", valkey.url, "--workers", "2", "--jobs", "20", "--seconds", "30"]
    d = reported(argv, tmp_path, capsys, 0)
    assert (d["verdict"], d["detail"]) == ("conforms", "clean") and d["soak"]["history"] is None and d["soak"]["failing_partition"] is None


def test_a_failed_soak_keeps_its_history_and_its_page_shows_the_failing_partition(
        valkey: ServerProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The workers (forked) claim in two round trips with a think time between: two of
    them read the same lowest id and both take it (the defect of test_soak's SplitClaim,
    raced for real here instead of interleaved by hand)."""
    monkeypatch.setattr(Queue, "claim", SplitClaim.claim)
    monkeypatch.setattr(Queue, "between", staticmethod(lambda: time.sleep(0.01)), raising=False)
    report, page = tmp_path / "soak.json", tmp_path / "soak.html"
    code = cli.main(["soak", "--url", valkey.url, "--workers", "4", "--jobs", "30", "--seconds", "30",
                     "--report", str(report), "--html", str(page)])
    d = json.loads(report.read_text("utf-8"))
    validate(d)
    kept = Path(d["soak"]["history"])
    try:
        assert code == 1 and d["exit"] == 1 and (d["verdict"], d["detail"]) == ("differs", "violations")
        assert kept.is_dir() and sorted(p.name for p in kept.glob("w*.jsonl"))
        assert str(kept) in capsys.readouterr().out
        failing = d["soak"]["failing_partition"]
        assert failing is not None and failing["verdict"] == "illegal"
        seen = render(page, tmp_path)
        assert seen.console == [] and png_facts(seen.screenshot)[2] > 50
        assert f'id="failing-job">{failing["job"]}</span>' in seen.dom
        assert seen.dom.count('<rect class="op failing"') >= 2
    finally:
        shutil.rmtree(kept, ignore_errors=True)


def test_bench(valkey: ServerProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # the report's shape only: the coverage figure (ten ci runs by default) is
    # test_bench.py's
    d = reported(["bench", *TINY, "--coverage-seeds", "0", "--url", valkey.url], tmp_path, capsys, 0)
    assert (d["verdict"], d["detail"]) == ("conforms", "measured") and d["figures"]["rtt.valkey"] > 0


def test_audit(valkey: ServerProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with emq_live.connect(valkey.url) as conn:
        conn.queue("outputs-audit").enqueue("JOB00000000001", b"x")
    d = reported(["audit", valkey.url, "--queue", "outputs-audit", "--quiet"], tmp_path, capsys, 0)
    assert (d["verdict"], d["detail"]) == ("conforms", "clean") and d["audit"]["queues"][0]["counts"]["pending"] == 1


@pytest.mark.parametrize("argv", [
    ["check", "--profile", "dev"], ["replay", str(CORPUS / "retry-two-sets.json")], ["selftest"],
    ["soak", "--url", "redis://127.0.0.1:1"], ["bench", "--url", "redis://127.0.0.1:1"],
    ["audit", "redis://127.0.0.1:1"],
])
@pytest.mark.parametrize("flag, bad", [("--report", "no/such/dir/r.json"), ("--report", "."),
                                       ("--html", "/proc/page.html")])
def test_an_unwritable_output_is_refused_before_the_run(argv: list[str], flag: str, bad: str, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """Exit 2 with the path named, before any run: the URLs here lead nowhere, and a run
    would have said so instead."""
    if flag == "--html" and argv[0] not in ("check", "replay", "soak"):
        return
    assert cli.main([*argv, flag, bad]) == cli.EXIT_ENV
    err = capsys.readouterr().err
    assert f"cannot write the {'report' if flag == '--report' else 'HTML page'} {bad}" in err, err


def test_the_rerun_line_keeps_the_layout_and_the_refence() -> None:
    """Without them a bullmq run's rerun checks the four sets, and a re-fenced server's
    exits 2 on the fence."""
    from emq_kit.check.options import CheckOptions

    url = "redis://u:secret@h:1/0"
    assert CheckOptions(layout="bullmq", url=url, profile="dev").command(3) == \
        "emq check --seed 3 --profile dev --layout bullmq --url 'redis://***@h:1/0'"
    assert CheckOptions(url=url, refence=True, profile="dev").command(3) == \
        "emq check --seed 3 --profile dev --url 'redis://***@h:1/0' --refence"


def test_check_writes_a_markdown_summary_of_every_difference(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                            ) -> None:
    """``--summary FILE`` (a CI's ``$GITHUB_STEP_SUMMARY``): the verdict and seed, a row
    per difference with its trace and replay command, its steps folded, the rerun line."""
    summary, report = tmp_path / "summary.md", tmp_path / "r.json"
    assert cli.main(["check", "--driver", f"{sys.executable} {DRIVERS / 'foreign.py'}", "--profile", "dev",
                     "--seed", "3", "--traces", str(tmp_path / "t"), "--summary", str(summary),
                     "--report", str(report)]) == 1
    d = json.loads(report.read_text())
    text = summary.read_text()
    differences = d["check"]["differences"]
    assert text.startswith("### ❌ emq check: ") and "seed **3**" in text
    rows = [line for line in text.splitlines() if re.match(r"\| \d+ \| `", line)]
    assert len(rows) == len(differences) >= 3
    for row, diff in zip(rows, differences):
        assert f"`{diff['signature']['cell']} {diff['signature']['rule']}`" in row and f"`{diff['replay']}`" in row
    assert text.count("<details>") == len(differences) and text.count("<- diverges") == len(differences)
    assert f"run the search again: `{d['check']['rerun']}`" in text

"""``emq matrix`` (specs/campaign.md CMP-8): two check reports with different verdicts
drawn as one matrix, in JSON and as a self-contained page in a real headless Chromium;
a file that is no report of this version is one line, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from emq_kit import cli
from emq_kit.report.document import validate
from tests.broken import broken_dir, variant
from tests.browser import png_facts, render
from tests.e2e.test_harm import one_line, run

SMALL = ["--profile", "dev", "--examples", "25", "--steps", "25", "--seed", "1", "--first"]


@pytest.fixture(scope="module")
def two_reports(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict]:
    """A check of our scripts that conforms and one of a broken copy that differs, both
    on fakeredis, as --report files; and the broken one's document."""
    where = tmp_path_factory.mktemp("reports")
    broken = broken_dir(variant("missing-del"), where)
    ours, theirs = where / "ours.json", where / "broken.json"
    assert cli.main(["check", *SMALL, "--report", str(ours), "--traces", str(where / "t")]) == 0
    assert cli.main(["check", *SMALL, "--scripts", str(broken), "--report", str(theirs),
                     "--traces", str(where / "t")]) == 1
    return ours, theirs, json.loads(theirs.read_text())


def test_the_matrix_of_two_reports_with_different_verdicts(two_reports: tuple[Path, Path, dict], tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """A column per report; the broken copy's difference is ``differs`` with its trace in
    its column and ``conforms`` in ours where ours reached it; every cell of either
    report is a row; the cause is a row of its own; the page draws the same."""
    ours, theirs, broken = two_reports
    code, out, _ = run(["matrix", str(ours), str(theirs), "--report", str(tmp_path / "m.json"), "--html",
                        str(tmp_path / "m.html")], capsys)
    assert code == cli.EXIT_FAIL
    doc = json.loads((tmp_path / "m.json").read_text())
    validate(doc)
    body = doc["matrix"]
    assert doc["verdict"] == "differs" and [c["source"] for c in body["columns"]] == [str(ours), str(theirs)]
    rows = {r["name"]: r for r in body["rows"] if r["kind"] == "cell"}
    ((difference),) = broken["check"]["differences"]
    cell = difference["signature"]["cell"]
    mine, its = rows[cell]["cells"]
    assert its == {"state": "differs", "rule": difference["signature"]["rule"], "trace": difference["trace"],
                   "replay": difference["replay"]}
    assert mine["state"] in ("conforms", "unreached")
    assert len(rows) == broken["check"]["cells"]["total"]
    assert all(r["cells"][0]["state"] != "differs" for r in body["rows"])
    causes = [r for r in body["rows"] if r["kind"] == "cause"]
    assert [[c["state"] for c in r["cells"]] for r in causes] == [["conforms", "differs"]]
    assert out.startswith(f"emq matrix: DIFFERS  2 columns, {len(body['rows'])} rows\n") and f"{cell}: " in out
    seen = render(tmp_path / "m.html", tmp_path)
    assert seen.console == []
    assert seen.dom.count('<td class="differs"') == 2 and cell in seen.dom  # the cell's and the cause's
    assert seen.dom.count('<tr class="cell">') == len(rows)
    assert png_facts(seen.screenshot)[2] > 20


@pytest.mark.parametrize("text, says", [
    ("{", "is not JSON"),
    ('{"format": "other"}', "is not an emq report"),
    ('{"format": "emq-report", "version": 1, "command": "check"}', "is of version 1; this kit reads 2 and 3"),
    ('{"format": "emq-report", "version": 4, "command": "check"}', "is of version 4; this kit reads 2 and 3"),
    ('{"format": "emq-report", "version": 2, "command": "soak"}', "is of emq soak"),
    ('{"format": "emq-report", "version": 2, "command": "check", "verdict": "pass"}',
     "(version 2) has the verdict 'pass', which emq check never gave"),
])
def test_a_file_that_is_no_report_is_one_line(text: str, says: str, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "r.json").write_text(text)
    code, out, err = run(["matrix", str(tmp_path / "r.json"), "--html", str(tmp_path / "m.html")], capsys)
    assert code == cli.EXIT_ENV and out == "" and says in one_line(err) and not (tmp_path / "m.html").exists()


def test_a_version_2_report_is_read_with_its_verdict_word_mapped(two_reports: tuple[Path, Path, dict],
                                                                 tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """specs/trace.md TR-18: a version 2 report (its verdict the command's own word, no
    detail) draws the same matrix as the version 3 report it was; the old word is the
    detail and the verdict is specs/verdicts.json's."""
    from emq_kit.campaign.matrix import load

    ours, theirs, broken = two_reports
    old = {k: v for k, v in broken.items() if k != "detail"} | {"version": 2, "verdict": broken["detail"]}
    (tmp_path / "old.json").write_text(json.dumps(old))
    read = load(tmp_path / "old.json")
    assert (read["version"], read["verdict"], read["detail"]) == (3, "differs", "counterexample") == (
        broken["version"], broken["verdict"], broken["detail"])
    validate(read)
    now = [run(["matrix", str(ours), str(path), "--json"], capsys) for path in (theirs, tmp_path / "old.json")]
    bodies = [json.loads(out)["matrix"] for _, out, _ in now]
    for body in bodies:
        body["columns"][1].pop("source")
    assert [code for code, _, _ in now] == [cli.EXIT_FAIL] * 2 and bodies[0] == bodies[1]

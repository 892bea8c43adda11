"""``emq matrix`` (specs/campaign.md CMP-8): two check reports with different verdicts
drawn as one matrix, in JSON and as a self-contained page in a real headless Chromium;
a file that is no report of this version is one line, exit 2; the README's picture
(scripts/matrix.py) is the summary of the page committed beside it."""

from __future__ import annotations

import html
import importlib.util
import json
import re
import tomllib
from pathlib import Path
from types import ModuleType
from typing import Any

import jsonschema
import pytest

from emq_kit import cli
from emq_kit.campaign.matrix import MARKERS, STATES, matrix, summary, with_summary
from emq_kit.campaign.plan import schema as plan_schema
from emq_kit.errors import BadArgument
from emq_kit.report.document import validate
from tests import unreadable
from tests.broken import broken_dir, variant
from tests.browser import png_facts, render
from tests.e2e.test_harm import one_line, run
from tests.once import made_once

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["--profile", "dev", "--examples", "25", "--steps", "25", "--seed", "1", "--first"]


def _two_reports(where: Path) -> None:
    """A check of our scripts that conforms and one of a broken copy that differs, both
    on fakeredis, as --report files ``ours.json`` and ``broken.json`` in ``where``."""
    broken = broken_dir(variant("missing-del"), where)
    assert cli.main(["check", *SMALL, "--report", str(where / "ours.json"), "--traces", str(where / "t")]) == 0
    assert cli.main(["check", *SMALL, "--scripts", str(broken), "--report", str(where / "broken.json"),
                     "--traces", str(where / "t")]) == 1


@pytest.fixture(scope="module")
def two_reports(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict]:
    """Those two reports, made once for all the workers of a test run; and the broken
    one's document."""
    where = made_once(tmp_path_factory, "matrix-reports", _two_reports)
    ours, theirs = where / "ours.json", where / "broken.json"
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
    *unreadable.KINDS.items(),  # refused before a byte is read (TR-9c)
])
def test_a_file_that_is_no_report_is_one_line(text: str, says: str, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    unreadable.write(tmp_path / "r.json", text)
    code, out, err = run(["matrix", str(tmp_path / "r.json"), "--html", str(tmp_path / "m.html")], capsys)
    assert code == cli.EXIT_ENV and out == "" and says in one_line(err) and not (tmp_path / "m.html").exists()


def test_a_matrix_of_reports_that_did_not_conform_is_unearned_never_conforms(
        two_reports: tuple[Path, Path, dict], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """CMP-8: no column differs, yet the dev report it draws is inconclusive: the matrix
    is inconclusive (``unearned``, exit 0), the column said not earned; the same report
    as a conforming one's gives CONFORMS."""
    ours, _, _ = two_reports
    code, out, _ = run(["matrix", str(ours), "--report", str(tmp_path / "m.json")], capsys)
    doc = json.loads((tmp_path / "m.json").read_text())
    validate(doc)
    assert code == cli.EXIT_OK and out.startswith("emq matrix: INCONCLUSIVE (unearned)"), out
    assert (doc["verdict"], doc["detail"]) == ("inconclusive", "unearned") and "(not earned:" in out
    assert [c["earned"] for c in doc["matrix"]["columns"]] == [False]
    code, out, _ = run(["matrix", str(ours), str(ours)], capsys)  # one target's two reports: told apart
    assert out.count(f" from {ours}: ") == 2, out
    (tmp_path / "c.json").write_text(json.dumps(json.loads(ours.read_text()) | {"verdict": "conforms",
                                                                                  "detail": "conforms"}))
    code, out, _ = run(["matrix", str(tmp_path / "c.json")], capsys)
    assert code == cli.EXIT_OK and out.startswith("emq matrix: CONFORMS") and "not earned" not in out, out


def test_what_a_terminal_acts_on_is_shown_inert(two_reports: tuple[Path, Path, dict], tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """A report's target (a foreign CI artifact) and a path given, each holding an escape
    sequence and a newline, are shown as escapes: no byte a terminal acts on, one line."""
    _, _, broken = two_reports
    (tmp_path / "r.json").write_text(json.dumps(broken | {"target": "evil\x1b]0;TITLE\x07\x1b[31m\nport"}))
    code, out, err = run(["matrix", str(tmp_path / "r.json")], capsys)
    assert code == cli.EXIT_FAIL and "\x1b" not in out + err and "evil\\x1b]0;TITLE\\x07" in out, out
    code, out, err = run(["matrix", str(tmp_path / "no\x1b[31mne\n.json")], capsys)
    assert code == cli.EXIT_ENV and "\x1b" not in err and "no\\x1b[31mne\\x0a.json" in one_line(err), err


GONE = object()
"""``_changed``'s value for a key taken out."""


def _changed(doc: dict, path: tuple[str | int, ...], value: object = GONE) -> dict:
    """A copy of ``doc`` with ``value`` at ``path`` (the key gone for ``GONE``)."""
    out = json.loads(json.dumps(doc))
    held = out
    for key in path[:-1]:
        held = held[key]
    if value is GONE:
        del held[path[-1]]
    else:
        held[path[-1]] = value
    return out


BODIES = {
    "no body": (lambda d: _changed(d, ("check",)), "at (top)"),
    "cells a string": (lambda d: _changed(d, ("check", "cells"), "lots"), "at check/cells"),
    "no signature": (lambda d: _changed(d, ("check", "differences", 0, "signature")), "at check/differences/0"),
    "no profile": (lambda d: _changed(d, ("check", "profile")), "at check"),
    "target a number": (lambda d: _changed(d, ("target",), 5), "at target"),
    "a verdict no command gives": (lambda d: _changed(d, ("verdict",), "great"), "'great'"),
}


@pytest.mark.parametrize("case", BODIES)
def test_a_report_whose_body_is_not_a_reports_is_one_line(case: str, two_reports: tuple[Path, Path, dict],
                                                          tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """CMP-8: a report of the right format and version whose body is not a report's (a
    key gone, a value of another type, a word no command says) is one line naming where,
    exit 2: never ``emq bug``, never a column drawn from what was misread."""
    _, _, broken = two_reports
    spoil, says = BODIES[case]
    (tmp_path / "r.json").write_text(json.dumps(spoil(broken)))
    code, out, err = run(["matrix", str(tmp_path / "r.json")], capsys)
    line = one_line(err)
    assert code == cli.EXIT_ENV and out == "" and "emq bug" not in line, line
    assert "is no report of specs/schemas/report.json" in line and says in line, line


def test_a_report_nested_past_reading_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "r.json").write_text("[" * 200_000 + "]" * 200_000)
    code, out, err = run(["matrix", str(tmp_path / "r.json")], capsys)
    assert code == cli.EXIT_ENV and "is nested deeper than JSON is read here" in one_line(err)


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


def test_a_driver_without_raw_calls_has_its_raw_cells_not_implemented(two_reports: tuple[Path, Path, dict],
                                                                     tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """The model driver declares no raw capability, so the kit never sends it a raw call:
    its column's raw cells are ``not-implemented`` with that reason, not ``unreached``,
    and its own report says why. Our scripts take raw calls: each of their raw cells is
    ``conforms`` where reached and ``unreached`` where not, never ``not-implemented``."""
    from tests.kit.processes import EMQ

    ours, _, _ = two_reports
    driven = tmp_path / "driver.json"
    code, out, _ = run(["check", "--driver", f"{EMQ} driver --model", *SMALL, "--report", str(driven),
                        "--traces", str(tmp_path / "t")], capsys)
    assert code == 0 and "raw calls: the target does not declare the raw capability" in out, out
    code, out, _ = run(["matrix", str(ours), str(driven), "--json", "--html", str(tmp_path / "m.html")], capsys)
    body = json.loads(out)["matrix"]
    ours_doc = json.loads(ours.read_text())["check"]["cells"]
    raw = {r["name"]: r["cells"] for r in body["rows"] if r["kind"] == "cell" and r["name"].startswith("raw/")}
    assert raw and set(raw) == {c for c in [*ours_doc["hits"], *ours_doc["unreached"]] if c.startswith("raw/")}
    assert {mine["state"] for mine, _ in raw.values()} == {"conforms", "unreached"}  # seed 1 leaves some unreached
    for name, (mine, model) in raw.items():
        assert model == {"state": "not-implemented", "why": "the target does not declare the raw capability"}, name
        assert mine["state"] == ("conforms" if ours_doc["hits"].get(name) else "unreached"), name
    assert body["columns"][1]["counts"]["unreached"] == len(json.loads(driven.read_text())["check"]["cells"]["unreached"])
    assert "not-implemented: the target does not declare the raw capability" in (tmp_path / "m.html").read_text()


def _script() -> ModuleType:
    """scripts/matrix.py, imported as the module it is (scripts/ is no package)."""
    spec = importlib.util.spec_from_file_location("matrix_script", ROOT / "scripts" / "matrix.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_readme_picture_is_the_summary_of_docs_matrix_page() -> None:
    """scripts/matrix.py writes docs/matrix.html and the README's table from one matrix:
    the table committed is ``summary`` of the counts and causes the committed page draws
    (so neither is edited or regenerated alone)."""
    page = (ROOT / "docs" / "matrix.html").read_text("utf-8")
    names = re.findall(r"<th>([^<]+)<br><small>", page)
    counts = re.search(r"<tr><th>cells</th>(.*?)</tr>", page)
    assert names and counts is not None
    tallies = [dict((s, int(n)) for n, s in re.findall(r"(\d+) ([a-z-]+)", td))
               for td in re.findall(r"<td>(.*?)</td>", counts.group(1))]
    causes = re.findall(r'<tr class="cause"><th class="row">([^<]+)</th>', page)
    body = {"columns": [{"name": n, "counts": t} for n, t in zip(names, tallies, strict=True)],
            "rows": [{"kind": "cause", "name": html.unescape(c)} for c in causes]}
    readme = (ROOT / "README.md").read_text("utf-8")
    said = MARKERS.search(readme)
    assert said is not None
    seed = re.search(r"seed (\d+),", said.group(2))
    assert seed is not None and said.group(2) == summary(body, int(seed.group(1)))
    assert [c.name for c in _targets()] == names  # the five targets the script plans, in its order


def _targets() -> list[Any]:
    from emq_kit.campaign.plan import PlanTarget

    data = tomllib.loads(_script().plan("redis://127.0.0.1:1/0", "redis://127.0.0.1:2/0", 1, "/tmp/lua"))
    jsonschema.validate(data, plan_schema())
    return [PlanTarget(**t) for t in data["targets"]]


def test_the_summary_of_a_matrix_goes_between_the_readme_markers(two_reports: tuple[Path, Path, dict]) -> None:
    """``summary`` counts each column's cells by state and names the causes; ``with_summary``
    replaces only what is between the markers, and a README without them is refused."""
    ours, theirs, _ = two_reports
    body = matrix([(str(ours), json.loads(ours.read_text())), (str(theirs), json.loads(theirs.read_text()))])
    table = summary(body, 1)
    rows = [line.split(" | ") for line in table.splitlines()[2:4]]
    assert [[int(n) for n in r[1:-1]] + [int(r[-1].rstrip(" |"))] for r in rows] == [
        [c["counts"][s] for s in STATES] for c in body["columns"]]
    cause = next(r["name"] for r in body["rows"] if r["kind"] == "cause")
    assert f"causes found: {cause}." in table
    readme = "intro\n<!-- matrix: made by scripts/matrix.py -->\nold\n<!-- /matrix -->\nrest\n"
    assert with_summary(readme, table) == readme.replace("old\n", table)
    with pytest.raises(BadArgument, match="no matrix markers"):
        with_summary("intro\n", table)

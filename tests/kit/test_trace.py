"""Traces (specs/trace.md): the format round-trips and matches its schema; a shrunk
counterexample is written with readable ids and replays to the same divergence on
fakeredis and Valkey; `emq replay` exits 1 while it diverges and 0 once fixed; the
regression test written by `--pytest` fails on the broken scripts and passes on ours;
the committed corpus replays."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import given
from hypothesis import strategies as st

from emq_kit import cli
from emq_kit.check.focus import Focus
from emq_kit.check.live import LiveTarget
from emq_kit.check.profiles import PROFILES
from emq_kit.check.run import run_check
from emq_kit.check.step import Step
from emq_kit.report.document import check_document
from emq_kit.report.html import check_html
from emq_kit.report.text import format_report
from emq_kit.trace.format import Trace, decode, encode, header
from emq_kit.trace.replay import replay, traced, write_trace
from emq_model import branded_id
from emq_model.errors import StaleError
from emq_model.lanes import LaneClaimed
from emq_model.model import Claimed
from emq_model.snapshot import Snapshot
from emq_model.spec import text
from tests.broken import broken_dir, variant
from tests.once import made_once

SCHEMA = json.loads(text("schemas/trace.json"))
OURS = str(resources.files("emq_live").joinpath("lua"))
CORPUS = sorted(Path(__file__).parents[1].joinpath("corpus").glob("*.json"))

values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(), st.binary(),
              st.builds(Claimed, st.text(), st.binary(), st.integers(1, 9)),
              st.builds(LaneClaimed, st.text(), st.binary(), st.integers(1, 9), st.text()), st.just(StaleError("x"))),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.tuples(inner, inner),
                            st.dictionaries(st.text().filter(lambda k: not k.startswith("$")), inner, max_size=3)),
    max_leaves=8,
)


@given(values)
def test_values_round_trip_through_json(value: Any) -> None:
    back = decode(json.loads(json.dumps(encode(value))))
    assert back == value and type(back) is type(value)


def test_nan_round_trips_as_a_tagged_float() -> None:
    back = decode(json.loads(json.dumps(encode(float("nan")))))
    assert isinstance(back, float) and back != back


def _record(where: Path) -> None:
    """A real counterexample: the machine against complete-from-schedule, recorded in
    ``where``: the trace as written (``trace.json``), where the broken scripts are
    (``scripts.txt``), and the run's report, printout and page as written by
    ``write_trace`` into ``traces/`` (``report.json``, ``printout.txt``, ``page.html``)."""
    scripts = broken_dir(variant("complete-from-schedule"), where)
    target = LiveTarget(None, str(scripts))
    try:
        # Raw calls off: a trace with raw steps keeps its ids (TR-5), and this
        # counterexample is the client's, whose ids are renamed. The first difference
        # is the one recorded (``--first``): the search for the others cost a minute.
        report = run_check(target, PROFILES["ci"], seed=1, raw_calls=False, focus=Focus(report=False))
        assert report.divergence is not None
        # The shrunk steps are the diverging example's own, ending at the divergence (not
        # whatever machine Hypothesis built last).
        assert report.shrunk == report.divergence.steps and report.shrunk[-1] is report.divergence.step
        # Listed because a replay of its steps (ids renamed, TR-5/TR-7) showed it: the
        # trace is that replay's.
        [d] = report.differences
        assert d.reproduced and d.replays == 1 and d.names and d.shrunk == list(d.replayed.steps)
        head = header(target.describe(), seed=1, profile="ci", clock="virtual")
        traced(d.replayed, head, d.names).write(where / "trace.json")
        write_trace(report, where / "traces")
        now = dt.datetime.now(dt.timezone.utc)
        (where / "report.json").write_text(json.dumps(check_document(report, exit=1, started=now, finished=now,
                                                                     rerun="")), "utf-8")
        (where / "printout.txt").write_text(format_report(report), "utf-8")
        (where / "page.html").write_text(check_html(report), "utf-8")
    finally:
        target.close()
    (where / "scripts.txt").write_text(str(scripts), "utf-8")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """That counterexample's directory, recorded once per test run."""
    return made_once(tmp_path_factory, "trace-found", _record)


@pytest.fixture(scope="module")
def found(recorded: Path) -> tuple[Trace, Path]:
    """The recorded trace, read back (its round trip is the test below), and the broken
    scripts it diverges on."""
    return Trace.load(recorded / "trace.json"), Path((recorded / "scripts.txt").read_text("utf-8"))


def test_the_report_printout_and_page_carry_the_trace_ids(recorded: Path) -> None:
    """TR-5: the JSON report's shrunk steps carry the ids the trace file carries (renamed
    readably), as the printout and the HTML page do; no original id is left in any."""
    listed = json.loads((recorded / "report.json").read_text("utf-8"))["check"]["differences"][0]
    written = json.loads(Path(listed["trace"]).read_text("utf-8"))
    originals = set(written["renamed"].values())
    assert [s["args"] for s in listed["shrunk_steps"]] == [s["args"] for s in written["steps"]]
    ids = {s["args"]["id"] for s in listed["shrunk_steps"] if isinstance(s["args"].get("id"), str)}
    assert ids and all(i.startswith("JOB0000000000") for i in ids) and originals and not ids & originals
    for shown in ((recorded / "printout.txt").read_text("utf-8"), (recorded / "page.html").read_text("utf-8")):
        assert any(i[-8:] in shown for i in ids) and not any(o in shown for o in originals)


def test_a_recorded_trace_matches_the_schema_and_round_trips(recorded: Path) -> None:
    path = recorded / "trace.json"  # as the recorded trace itself wrote it
    data = json.loads(path.read_text())
    jsonschema.Draft202012Validator(SCHEMA).validate(data)
    again = Trace.load(path)
    assert again.to_json() == data
    assert again.divergence is not None and again.divergence["step"] == len(again.steps)
    assert set(again.snapshots) == {"model", "target"} and again.snapshots["model"] != again.snapshots["target"]


def test_snapshot_rows_are_bytes_as_everywhere_and_old_traces_still_read(found: tuple[Trace, Path],
                                                                          tmp_path: Path) -> None:
    """TR-4, version 3: a snapshot's row values are {"b64"} like every other bytes value
    (any byte kept); a version 2 trace's latin-1 text is still read as the same bytes."""
    trace, _ = found
    job = branded_id.encode("JOB", 5)
    odd = Snapshot.from_json({**trace.snapshots["target"].to_json(),
                              "rows": {job: {"state": "pending", "attempts": "0", "payload": "\x00\xff\u00e9"}}})
    trace = Trace(trace.header, trace.steps, trace.divergence, {**trace.snapshots, "target": odd})
    data = json.loads(trace.write(tmp_path / "t.json").read_text())
    assert data["version"] == 3
    assert data["divergence"]["target_snapshot"]["rows"][job]["payload"] == {"b64": "AP/p"}
    assert Trace.load(tmp_path / "t.json").snapshots["target"] == odd
    old = {**data, "version": 2, "divergence": {**data["divergence"], "target_snapshot": odd.to_json(),
                                                "model_snapshot": trace.snapshots["model"].to_json()}}
    (tmp_path / "old.json").write_text(json.dumps(old))
    assert Trace.load(tmp_path / "old.json").snapshots["target"] == odd


def test_ids_are_renamed_readably_in_byte_order(found: tuple[Trace, Path]) -> None:
    trace, _ = found
    ids = {s.args["id"] for s in trace.steps if "id" in s.args}
    ids |= {item[0] for s in trace.steps for item in s.args.get("jobs", ())}  # a batch's (id, ...) items
    assert ids and all(i.startswith("JOB0000000000") for i in ids)
    assert sorted(trace.header["renamed"]) == sorted(ids)
    originals = [trace.header["renamed"][i] for i in sorted(ids)]
    assert originals == sorted(originals) and all(branded_id.is_valid(o, "JOB") for o in originals)


def test_replay_diverges_identically_on_fakeredis_and_valkey(found: tuple[Trace, Path], valkey: Any) -> None:
    trace, scripts = found
    runs = []
    for url in (None, valkey.url):
        target = LiveTarget(url, str(scripts))
        try:
            runs.append(replay(trace.steps, target))
        finally:
            target.close()
    fake, real = runs
    assert fake.index == real.index == trace.divergence["step"]
    assert fake.divergence.rule == real.divergence.rule == trace.divergence["rule"]
    assert [(s.model, s.target) for s in fake.steps] == [(s.model, s.target) for s in real.steps]
    assert (fake.model, fake.target) == (real.model, real.target) == (trace.snapshots["model"], trace.snapshots["target"])


def test_emq_replay_exits_1_while_broken_and_0_on_our_scripts(found: tuple[Trace, Path], tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    trace, scripts = found
    path = str(trace.write(tmp_path / "t.json"))
    assert cli.main(["replay", path]) == cli.EXIT_ENV  # the header names the broken scripts: not loaded from it
    assert f"--scripts {scripts}" in capsys.readouterr().err  # TR-9
    assert cli.main(["replay", path, "--scripts", str(scripts)]) == cli.EXIT_FAIL
    out = capsys.readouterr().out
    assert "<- diverges" in out and trace.divergence["rule"] in out
    assert cli.main(["replay", path, "--scripts", OURS]) == cli.EXIT_OK
    assert "conforms" in capsys.readouterr().out


@pytest.mark.parametrize("url", [None, "valkey"])
def test_a_queue_step_agrees_when_both_sides_accept_its_name_or_both_refuse_it(url: str | None, request) -> None:
    """A trace's ``queue`` step may name any queue (the rule draws names KS-3 refuses):
    a name both sides accept is no difference (it was: ``queue/EMQARG KS-3`` on our own
    scripts), one both refuse alike neither."""
    target = LiveTarget(None if url is None else request.getfixturevalue(url).url)
    try:
        done = replay([Step("", "queue", {"name": "important"}), Step("", "queue", {"name": ""})], target)
    finally:
        target.close()
    assert done.divergence is None, done.divergence
    assert [type(s.target).__name__ for s in done.steps] == ["Queue", "ArgError"]


def test_an_unreadable_trace_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "something else"}')
    assert cli.main(["replay", str(bad)]) == cli.EXIT_ENV
    assert "cannot read trace" in capsys.readouterr().err


def test_no_more_than_a_traces_bound_and_a_byte_is_read_whatever_the_size_says(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """TR-9c: the bound holds on what is read, not on the size ``stat`` gives: a /proc
    file says 0 bytes (as a file still being written says fewer than it will hold)."""
    from emq_kit.trace import validate

    status = Path("/proc/self/status")
    assert status.stat().st_size == 0 and len(status.read_bytes()) > 100
    monkeypatch.setattr(validate, "MAX_BYTES", 100)
    assert cli.main(["replay", str(status)]) == cli.EXIT_ENV
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "101 bytes read and more to come, more than a trace holds (100)" in err, err


@pytest.mark.parametrize("args, words", [
    ({"key": "nonsense", "kind": "string"}, "args/key: 'nonsense' is no key"),
    ({"key": "pending", "kind": "blob"}, "args/kind: 'blob' is not one of"),
    ({"key": "row", "kind": "set"}, "key 'row' takes id"),
])
def test_a_malformed_key_fault_is_exit_2_naming_it(found: tuple[Trace, Path], tmp_path: Path, args: dict, words: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    data = json.loads(found[0].write(tmp_path / "t.json").read_text())
    data["steps"] = [{**data["steps"][0], "op": "spoil_key", "args": args}]
    (tmp_path / "bad.json").write_text(json.dumps(data))
    assert cli.main(["replay", str(tmp_path / "bad.json")]) == cli.EXIT_ENV
    err = capsys.readouterr().err
    assert words in err and len(err.strip().splitlines()) == 1 and "emq bug" not in err


def test_the_pytest_file_fails_while_broken_and_passes_when_fixed(found: tuple[Trace, Path], tmp_path: Path) -> None:
    trace, broken = found
    path = str(trace.write(tmp_path / "t.json"))
    test = tmp_path / "test_regression.py"
    assert cli.main(["replay", path, "--scripts", str(broken), "--pytest", str(test)]) == cli.EXIT_FAIL
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMQ_")}

    def run(**extra: str) -> int:
        return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test)],
                              env={**env, **extra}, cwd=tmp_path, capture_output=True).returncode

    assert run() == 1  # the scripts the trace names are not loaded from it (TR-9)
    assert run(EMQ_SCRIPTS=str(broken)) == 1
    assert run(EMQ_SCRIPTS=OURS) == 0


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.stem)
def test_corpus_conforms_on_our_scripts_and_diverges_on_its_variant(path: Path, tmp_path: Path, valkey: Any) -> None:
    trace = Trace.load(path)
    for url in (None, valkey.url):
        target = LiveTarget(url)
        try:
            assert replay(trace.steps, target).conforms, f"{path.name} diverges on our scripts at {url or 'fakeredis'}"
        finally:
            target.close()
    target = LiveTarget(None, str(broken_dir(variant(trace.header["variant"]), tmp_path)))
    try:
        result = replay(trace.steps, target)
    finally:
        target.close()
    assert result.index == trace.divergence["step"] and result.divergence.rule == trace.divergence["rule"]


def test_the_corpus_is_not_empty() -> None:
    assert len(CORPUS) >= 5

"""The regression corpus (emq_kit/check/corpus.py): traces named by their content, so a
counterexample found again is the same file; a check replays the traces already in its
traces directory before its search and reports which still fail (the run fails on
them), which pass now, and which it could not replay here."""

from __future__ import annotations

import copy
import datetime as dt
import json
import sys
from pathlib import Path

import emq_kit
from emq_kit.check import corpus
from emq_kit.report.document import check_document, validate
from emq_kit.report.html import check_html
from emq_kit.report.text import format_report
from emq_kit.trace.format import Trace
from tests import unreadable

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "corpus"
FOREIGN = f"{sys.executable} {ROOT / 'tests' / 'drivers' / 'foreign.py'}"
DEVIATING = f"{FOREIGN} --conform lease-bound,complete-settled,extend-dead,claim-orphan,reprocess"  # KS-3 only
CONFORMING = f"{FOREIGN} --conform all"


def test_a_traces_name_is_its_content_not_its_seed_time_or_answers() -> None:
    trace = Trace.load(CORPUS / "retry-two-sets.json")
    other = copy.deepcopy(trace)
    other.header.update(seed=99, created="2030-01-01T00:00:00+00:00")
    other.steps[-1].target = "an answer with an address 0x7f00"
    other.divergence = {**trace.divergence, "evidence": ["said otherwise"]}
    assert corpus.name(other) == corpus.name(trace)
    assert corpus.name(trace).startswith(f"{trace.divergence['rule']}-") and corpus.name(trace).endswith(".json")
    moved = copy.deepcopy(trace)
    moved.steps[0].args = {**moved.steps[0].args, "payload": b"another"}
    assert corpus.name(moved) != corpus.name(trace)


def test_a_corpus_entry_that_is_no_regular_file_is_skipped_unread_and_said(tmp_path: Path) -> None:
    """specs/trace.md TR-9c, TR-17: a FIFO (whose open would wait for a writer), a link
    to /dev/zero (read, it never ends) and a directory among the traces are skipped
    without a byte read, each with its reason, and the run goes on to the traces beside."""
    traces = tmp_path / "traces"
    traces.mkdir()
    for kind in unreadable.KINDS:
        unreadable.make(traces / f"{kind}.json", kind)
    (traces / "known.json").write_bytes((CORPUS / "retry-two-sets.json").read_bytes())
    known, _ = corpus.replay_corpus(traces, None, lambda *a: None, layout="echomq", clock_mode="elsewhere")
    by_name = {k.path.name: k for k in known}
    assert sorted(by_name) == sorted([f"{kind}.json" for kind in unreadable.KINDS] + ["known.json"])
    for kind, says in unreadable.KINDS.items():
        assert by_name[f"{kind}.json"].verdict == "skipped" and says in by_name[f"{kind}.json"].reason
    assert "clock virtual" in by_name["known.json"].reason  # read, and found another clock's


def test_known_traces_replay_first_and_the_same_counterexample_is_the_same_file(tmp_path: Path) -> None:
    traces = tmp_path / "traces"
    first = emq_kit.check(driver=DEVIATING, profile="dev", seed=4, traces=str(traces))
    (ks3,) = [d for d in first.differences if d.signature.rule == "KS-3"]
    assert first.corpus == [] and ks3.trace.name == corpus.name(Trace.load(ks3.trace))
    written = ks3.trace.read_bytes()
    (traces / "notes.json").write_text("{}")  # no trace: said, not fatal
    server_clock = Trace.load(CORPUS / "retry-two-sets.json")
    server_clock.header["clock"] = "server"
    server_clock.write(traces / "server-clock.json")

    again = emq_kit.check(driver=DEVIATING, profile="dev", seed=5, traces=str(traces))
    by_path = {k.path.name: k for k in again.corpus}
    assert by_path[ks3.trace.name].verdict == "fails" and str(by_path[ks3.trace.name].now) == "queue/EMQARG KS-3"
    assert by_path["notes.json"].verdict == "skipped" and "not a trace" in by_path["notes.json"].reason
    assert by_path["server-clock.json"].verdict == "skipped" and "clock server" in by_path["server-clock.json"].reason
    assert not again.ok and again.exit_code == 1
    assert list(again.phases)[0] == "corpus" and again.phases["corpus"]["fails"] == 1
    if any(d.signature.rule == "KS-3" for d in again.differences):  # found again: the same file, untouched
        assert [p.name for p in traces.glob("KS-3-*.json")] == [ks3.trace.name]
        assert ks3.trace.read_bytes() == written
    text = format_report(again)
    assert "KNOWN TRACES, replayed first: 1 still fail" in text and f"still fails: {ks3.trace}" in text
    doc = check_document(again, exit=1, started=_now(), finished=_now(), rerun=again.rerun)
    validate(doc)
    assert {k["trace"]: k["verdict"] for k in doc["check"]["corpus"]}[str(ks3.trace)] == "fails"
    for listed in doc["check"]["differences"]:  # the report's ids are its trace's (renamed, TR-5)
        steps = json.loads(Path(listed["trace"]).read_text())["steps"]
        assert [s["args"] for s in listed["shrunk_steps"]] == [s["args"] for s in steps]
    assert 'id="corpus"' in check_html(again)

    # the port fixed: the known trace passes, and a run that finds nothing new passes
    fixed = emq_kit.check(driver=CONFORMING, profile="dev", seed=4, examples=10, traces=str(traces))
    assert {k.path.name: k.verdict for k in fixed.corpus}[ks3.trace.name] == "passes"
    assert fixed.ok and fixed.exit_code == 0
    expect = tmp_path / "expect.toml"
    expect.write_text('[[difference]]\nsignature = "queue/EMQARG KS-3"\nreason = "empty names are fine here"\n')
    excused = emq_kit.check(driver=DEVIATING, profile="dev", seed=4, examples=5, traces=str(traces),
                            expect=str(expect), corpus=True)
    assert [k.expected for k in excused.corpus if k.verdict == "fails"] == ["empty names are fine here"]
    assert excused.ok
    skipped = emq_kit.check(driver=DEVIATING, profile="dev", seed=4, examples=5, traces=str(traces), corpus=False)
    assert skipped.corpus == [] and "corpus" not in skipped.phases


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)

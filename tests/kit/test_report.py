"""The one report: every command's result, turned into the versioned
document by emq_kit/report/document.py, is valid against specs/schemas/report.json — and the
schema has teeth: a document missing its body, its version or a signature is refused."""

from __future__ import annotations

import copy
import datetime as dt
from pathlib import Path
from typing import Any

import jsonschema
import pytest

import emq_live
from emq_kit import bench, figures
from emq_kit.audit import audit
from emq_kit.check.focus import Focus
from emq_kit.check.live import LiveTarget
from emq_kit.check.profiles import PROFILES
from emq_kit.check.run import run_check
from emq_kit.report import document as report
from emq_kit.selftest import mutation as selftest
from emq_kit.soak import history
from emq_kit.soak.ledger import account
from emq_kit.soak.workload import SoakConfig, SoakReport
from emq_kit.trace.format import Trace
from emq_kit.trace.replay import replay, replay_command, target_for
from emq_live.urls import redact
from emq_model import keyspace
from tests.broken import broken_dir, variant
from tests.kit.test_soak import J1, SplitClaim, b_claims, interleave
from tests.livekit import J
from tests.shown import ROOT

START = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)
END = START + dt.timedelta(seconds=3)
CORPUS = Path(__file__).parents[1] / "corpus"


def valid(doc: dict[str, Any], command: str) -> dict[str, Any]:
    report.validate(doc)
    assert doc["command"] == command and doc["version"] == report.VERSION and command in doc
    assert doc["started"].startswith("2026-01-02T03:04:05") and doc["emq"]
    return doc


def test_a_conforming_check() -> None:
    target = LiveTarget(None)
    try:
        r = run_check(target, PROFILES["dev"], examples=3, steps=5, seed=1)
    finally:
        target.close()
    doc = valid(report.check_document(r, exit=0, started=START, finished=END, rerun="emq check --seed 1"), "check")
    assert doc["check"]["differences"] == [] and doc["target"] == "fakeredis" and doc["seed"] == 1
    assert doc["check"]["cells"]["total"] == r.total and doc["figures"]["steps"] == r.steps


def test_a_counterexample_has_its_signature_class_steps_and_replay(tmp_path: Path) -> None:
    from emq_kit.trace.replay import write_trace

    scripts = broken_dir(variant("retry-two-sets"), tmp_path)
    target = LiveTarget(None, scripts=str(scripts))
    try:
        # raw_calls off: an accepted raw retry meets the same break as raw/ok (T-retry); the
        # document of the client's own retry is the one shown here
        r = run_check(target, PROFILES["dev"], examples=200, steps=30, seed=1, focus=Focus(report=False),
                      raw_calls=False)
        assert r.divergence is not None
        write_trace(r, tmp_path / "traces")
    finally:
        target.close()
    doc = valid(report.check_document(r, exit=1, started=START, finished=END, rerun="emq check --seed 1"), "check")
    (d,) = doc["check"]["differences"]
    assert d["signature"] == {"cell": "retry/dead", "rule": r.differences[0].signature.rule} and d["class"] == "lifecycle"
    assert doc["check"]["causes"] == [{"title": doc["check"]["causes"][0]["title"], "class": "lifecycle",
                                       "ops": ["retry"], "differences": [0], "representative": 0}]
    assert doc["check"]["unreproduced"] == []
    assert d["trace"] == str(r.trace) and d["replay"] == replay_command(r.trace, r.target)  # with its --scripts
    assert len(d["shrunk_steps"]) == len(r.shrunk) and d["step"] == len(r.shrunk)
    assert (doc["verdict"], doc["detail"]) == ("differs", "counterexample")


def test_a_replay_of_a_corpus_trace(tmp_path: Path) -> None:
    path = CORPUS / "retry-two-sets.json"
    trace = Trace.load(path)
    scripts = broken_dir(variant(trace.header["variant"]), tmp_path)
    target, clock = target_for(trace.header, url=None, scripts=str(scripts), driver=None)
    try:
        result = replay(trace.steps, target, clock)
        described = target.describe()
    finally:
        target.close()
    doc = valid(report.replay_document(path, result, described, exit=1, started=START, finished=END), "replay")
    assert doc["detail"] == "diverges" and doc["replay"]["difference"]["signature"]["rule"] == trace.divergence["rule"]
    assert doc["replay"]["violations"] and all(v["invariant"].startswith("INV-") for v in doc["replay"]["violations"])


def test_a_selftest() -> None:
    """Verdicts of every status on the real mutants (running the machine on them is
    tests/kit/test_selftest.py's business; here the document is)."""
    mutants = selftest.all_mutants()[:3]
    verdicts = [selftest.MutantVerdict(mutants[0], "killed", 0.4, 12, shrunk=3, rule="INV-2"),
                selftest.MutantVerdict(mutants[1], "equivalent", 0.0, 0, reason="the write is repeated below"),
                selftest.MutantVerdict(mutants[2], "survived", 5.0, 800)]
    doc = valid(report.selftest_document(verdicts, selftest.summary(verdicts), target=None, seed=0, exit=1,
                                         started=START, finished=END), "selftest")
    assert [m["key"] for m in doc["selftest"]["mutants"]] == [m.key for m in mutants]
    assert (doc["verdict"], doc["detail"]) == ("differs", "survivors") and doc["figures"]["survived"] == 1 and doc["target"] == "fakeredis"


def failed_soak(url: str) -> SoakReport:
    """A real failing history: a claim split in two round trips, raced (tests/kit/test_soak.py)."""
    events, final = interleave(url, SplitClaim, b_claims)
    checked = history.check_history(events, seconds=10)
    return SoakReport(SoakConfig(workers=2, jobs=2), "valkey", final.queue, 0.1, account(events, final), [], 1,
                      events, checked, 0, False)


def test_a_failed_soak_names_the_failing_partition(valkey, tmp_path: Path) -> None:
    soak = failed_soak(valkey.url)
    doc = valid(report.soak_document(soak, tmp_path, target=valkey.url, exit=1, started=START, finished=END), "soak")
    part = doc["soak"]["failing_partition"]
    assert (doc["verdict"], doc["detail"]) == ("differs", "violations") and doc["soak"]["linearizability"] == "illegal"
    assert part["job"] == J1 and part["verdict"] == "illegal" and any("A: claim" in op for op in part["ops"])
    assert doc["soak"]["history"] == str(tmp_path)


def test_bench_figures_keep_their_ceilings() -> None:
    figs = [figures.Figure("rtt.valkey", 9000.0, "calls/s", ceiling=12000.0, ceiling_by="valkey-benchmark"),
            figures.Figure("audit.valkey.seconds.10", 0.01, "s")]
    b = figures.Bench(figures.Params(), bench.machine(), {"python": "3"}, figs)
    doc = valid(report.bench_document(b, target="redis://:pw@h:1", exit=0, started=START, finished=END), "bench")
    assert doc["target"] == "redis://***@h:1" and doc["bench"]["figures"][0]["ratio"] == 0.75


def test_an_audit_with_bytes_that_are_not_utf8(valkey) -> None:
    url = valkey.url + "/3"
    with emq_live.connect(url) as conn:
        conn.redis.flushdb()
        conn.queue("rq").enqueue(J(1), b"x")
        conn.redis.zadd(keyspace.queue_key("rq", "pending"), {b"\xff<b>": 0})
    result = audit(url)
    doc = valid(report.audit_document(result, target=url, exit=1, started=START, finished=END), "audit")
    ids = {v["id"] for v in doc["audit"]["violations"]}
    assert "\\xff<b>" in ids and (doc["verdict"], doc["detail"]) == ("differs", "violations") and doc["figures"]["jobs"] == 2


@pytest.mark.parametrize("spoil", [
    lambda d: d.pop("version"),
    lambda d: d.update(version=1),
    lambda d: d.pop("audit"),
    lambda d: d.update(verdict="differs"),  # not the verdict of its detail, clean (specs/verdicts.json)
    lambda d: d.update(detail="pass"),  # no word of emq audit's
    lambda d: d.pop("detail"),
    lambda d: d["audit"]["violations"].append({"invariant": "INV-1", "id": "x"}),
    lambda d: d.update(check={}),
    lambda d: d["audit"]["queues"][0]["counts"].update(limbo=1),
])
def test_the_schema_refuses_a_spoiled_document(valkey, spoil: Any) -> None:
    with emq_live.connect(valkey.url + "/3") as conn:
        conn.redis.flushdb()
        conn.queue("rq").enqueue(J(1), b"x")
    doc = report.audit_document(audit(valkey.url + "/3"), target=valkey.url, exit=0, started=START, finished=END)
    report.validate(doc)
    bad = copy.deepcopy(doc)
    spoil(bad)
    with pytest.raises(jsonschema.ValidationError):
        report.validate(bad)


def test_a_password_never_reaches_the_report() -> None:
    assert redact("redis://user:s3cret@h:6379/0") == "redis://***@h:6379/0"
    assert redact("rediss+cluster://:s3cret@h:1") == "rediss+cluster://***@h:1"
    assert redact("redis://h:1") == "redis://h:1" and redact("fakeredis") == "fakeredis"


def test_a_difference_is_listed_by_its_signature_and_the_class_it_is_given() -> None:
    from emq_kit.check.step import Divergence

    trace = Trace.load(CORPUS / "write-before-validation.json")
    last = trace.steps[-1]
    listed = report.difference(Divergence("answer", "T-retry", last, ["model refused"]), "surface", len(trace.steps),
                               trace.steps, None)
    assert listed["class"] == "surface" and listed["signature"] == {"cell": "retry/EMQSTALE", "rule": "T-retry"}
    assert listed["trace"] is None and listed["replay"] is None
    assert report.difference(Divergence("snapshot", "INV-8", last, []), "lifecycle", 1, trace.steps,
                             "t.json")["replay"] == "emq replay t.json"


def test_one_verdict_vocabulary_written_once_and_said_alike() -> None:
    """specs/trace.md TR-18: specs/verdicts.json gives every command's detail words, each
    with one of three verdicts; the schema's verdict words are its, docs/reports.md's
    table is it row for row, and the headline says the verdict then the detail."""
    import json

    from emq_kit.report import verdicts
    from emq_model.spec import text

    assert verdicts.VERDICTS == ("conforms", "differs", "inconclusive")
    file = json.loads(text("schemas/report.json"))
    assert file["properties"]["verdict"]["enum"] == list(verdicts.VERDICTS)
    assert set(file["properties"]["command"]["enum"]) == set(verdicts.DETAILS)
    assert all(row["verdict"] in verdicts.VERDICTS for rows in verdicts.DETAILS.values() for row in rows.values())
    doc = (ROOT / "docs" / "reports.md").read_text("utf-8")
    table = doc.split("<!-- verdicts:")[1].split("\n\n")[0].splitlines()[3:]
    listed = [[cell.strip() for cell in line.strip("|").split("|")] for line in table]
    assert [(c, d.split("`")[1], v, m) for c, d, v, m in listed] == [
        (c, d, row["verdict"], row["meaning"]) for c, rows in verdicts.DETAILS.items() for d, row in rows.items()]
    assert verdicts.headline("check", "counterexample") == "emq check: DIFFERS (counterexample)"
    assert verdicts.headline("replay", "conforms") == "emq replay: CONFORMS"
    with pytest.raises(KeyError):
        verdicts.verdict("audit", "pass")
    old = {"format": "emq-report", "version": 2, "command": "campaign", "verdict": "environment",
           "campaign": {"runs": [{"verdict": "uncovered"}, {"verdict": None}]}}
    new = verdicts.upgrade(old, "r.json")  # a version 2 campaign: its runs' check words mapped too
    assert (new["version"], new["verdict"], new["detail"]) == (3, "inconclusive", "environment")
    assert [(r["verdict"], r["detail"]) for r in new["campaign"]["runs"]] == [("inconclusive", "uncovered"), (None, None)]
    assert verdicts.upgrade({"command": "selftest", "verdict": "pass"}, "r.json")["detail"] == "all-killed"

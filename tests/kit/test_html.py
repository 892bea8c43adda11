"""The HTML report in a real headless Chromium: each page renders to a
non-trivial screenshot with no console message (no script, no blocked load), shows the
expected ids, and escapes hostile bytes (a payload that would run or load something if
it were not escaped would log to the console)."""

from __future__ import annotations

import copy
import re
import sys
from html import escape
from pathlib import Path

import pytest

import emq_kit
import emq_live
from emq_kit.check.raw.contract import queue_of, step_args
from emq_kit.check.raw.variants import KINDS, calls
from emq_kit.check.step import Step
from emq_kit.report import html
from emq_kit.soak import history
from emq_kit.soak.workload import Recorder
from emq_kit.trace.format import Trace
from emq_kit.trace.replay import replay_command
from emq_model.model import QueueModel
from emq_model.snapshot import Snapshot
from tests.browser import png_facts, render
from tests.kit.test_soak import J1, SplitClaim, b_claims, interleave, unique

CORPUS = Path(__file__).parents[1] / "corpus"
HOSTILE = "<script>console.error('xss')</script><img src=x onerror=console.error(1)>\xff"


def test_the_console_check_has_teeth(tmp_path: Path) -> None:
    """The control: a page that logs, and one that reaches for the network, are caught;
    a blank page's screenshot is trivial."""
    noisy = tmp_path / "noisy.html"
    noisy.write_text("<!DOCTYPE html><p>x</p><script>console.error('boom-marker')</script>")
    assert any("boom-marker" in line for line in render(noisy, tmp_path / "n").console)
    fetches = tmp_path / "fetches.html"
    fetches.write_text(html._page("t", '<img src="http://example.invalid/x.png">'))
    assert any("example.invalid" in line for line in render(fetches, tmp_path / "f").console)
    blank = tmp_path / "blank.html"
    blank.write_text(html._page("blank", ""))
    assert png_facts(render(blank, tmp_path / "b").screenshot)[2] < 20


def hostile(trace: Trace) -> Trace:
    """``trace`` with a payload and a row of bytes that would run script if shown raw."""
    t = copy.deepcopy(trace)
    for step in t.steps:
        if "payload" in step.args:
            step.args["payload"] = HOSTILE.encode("utf-8", "surrogateescape")
    target = t.snapshots["target"].to_json()
    for row in target["rows"].values():
        row["payload"] = HOSTILE.encode("utf-8").decode("latin-1")
    t.snapshots["target"] = Snapshot.from_json(target)
    return t


@pytest.mark.parametrize("name", sorted(p.stem for p in CORPUS.glob("*.json")))
def test_a_counterexample_page(name: str, tmp_path: Path) -> None:
    trace = hostile(Trace.load(CORPUS / f"{name}.json"))
    page = html.write(tmp_path / f"{name}.html", html.counterexample_page(trace, source=f"tests/corpus/{name}.json"))
    seen = render(page, tmp_path)
    assert seen.console == [], seen.console
    width, height, colours = png_facts(seen.screenshot)
    assert (width, height) == (1400, 1800) and colours > 50
    d = trace.divergence
    assert f"emq counterexample: <span class=\"rule\">{d['rule']}</span>" in seen.dom
    assert seen.dom.count('<div class="step') == len(trace.steps)
    assert 'class="step diverges"' in seen.dom and f'id="step-{d["step"]}"' in seen.dom
    ids = {m for s in trace.snapshots.values() for _, m, _ in s.members()}
    for job in ids:
        assert f'data-id="{job}"' in seen.dom
    assert "&lt;script&gt;" in seen.dom and "<script>" not in seen.dom
    if trace.snapshots["model"] != trace.snapshots["target"] and d["kind"] == "snapshot":
        assert 'class="id differs"' in seen.dom or "row " in seen.dom


@pytest.mark.parametrize("name", sorted(p.stem for p in CORPUS.glob("*.json")))
def test_the_model_replayed_agrees_with_every_corpus_trace(name: str) -> None:
    trace = Trace.load(CORPUS / f"{name}.json")
    seen = html.model_keyspaces(trace.steps)
    assert [html._answer(k[2]) for k in seen if k] == [html._answer(s.model) for s, k in zip(trace.steps, seen) if k]
    assert "may not be the run's" not in html.counterexample_page(trace)


def test_the_keyspace_before_and_after_each_step_is_the_models() -> None:
    trace = Trace.load(CORPUS / "retry-two-sets.json")
    seen = html.model_keyspaces(trace.steps)
    assert seen[0][0].ids() == set() and seen[0][1].pending == (("JOB00000000001", 0),)
    assert seen[1][1].active and not seen[1][1].pending
    assert seen[2][1].dead == (("JOB00000000001", 0),) == trace.snapshots["model"].dead
    assert [html._answer(k[2]) for k in seen] == [html._answer(s.model) for s in trace.steps]
    assert "may not be the run's" not in html.counterexample_page(trace)


def test_a_raw_calls_keyspace_is_the_models_as_the_contract_decodes_its_bytes() -> None:
    """A trace's raw step (a difference a raw call showed) is drawn from the model run on
    the call the contract decodes; a refused one names no queue and has no keyspace."""
    made = [c for kind in KINDS for c in calls(kind, "enqueue", QueueModel("q"))]
    accepted = next(c for c in made if c.expected is None)
    refused = next(c for c in made if c.expected is not None)
    steps = [Step(queue_of(c) or "", "raw", step_args(c)) for c in (accepted, refused)]
    seen = html.model_keyspaces(steps)
    assert seen[0] is not None and seen[0][2] == "enqueued" and seen[1] is None, seen
    assert not seen[0][0].ids() and len(seen[0][1].pending) == 1


def test_a_failed_soak_page(valkey, tmp_path: Path) -> None:
    events, _ = interleave(valkey.url, SplitClaim, b_claims)
    with emq_live.connect(valkey.url) as conn:
        Recorder(conn.queue(unique("hostile")), "P<b>", events.append).call("enqueue", id="JOB0000000000Z",
                                                                            payload=HOSTILE)
    checked = history.check_history(events, seconds=10)
    assert [p.key for p in checked.linearizability.illegal] == [J1]
    page = html.write(tmp_path / "soak.html", html.soak_page(events, checked, title="soak <run>"))
    seen = render(page, tmp_path)
    assert seen.console == [], seen.console
    assert png_facts(seen.screenshot)[2] > 50
    assert f'id="failing-job">{J1}</span>' in seen.dom
    bars = seen.dom.count('<rect class="op')
    hot = seen.dom.count('<rect class="op failing"')
    failing = {(str(o.process), o.invoke, o.ret) for o in checked.linearizability.illegal[0].ops}
    assert bars == len(events) and hot == sum((e.process, e.invoke, e.ret) in failing for e in events) >= 2
    assert "&lt;script&gt;" in seen.dom and "P&lt;b&gt;" in seen.dom and "soak &lt;run&gt;" in seen.dom
    assert 'aria-label="throughput"' in seen.dom and 'aria-label="median latency"' in seen.dom


def test_rates_over_time() -> None:
    ev = [history.Event("p", "enqueue", {}, "enqueued", t, t + 1_000_000) for t in range(0, 10_000_000_000, 100_000_000)]
    through, latency = html.rates(ev, buckets=10)
    width = through[0][0]  # seconds per bucket
    assert len(through) == 10 and sum(rate * width for _, rate in through) == pytest.approx(100)
    assert all(ms == pytest.approx(1.0) for _, ms in latency)


FOREIGN = f"{sys.executable} {Path(__file__).parents[1] / 'drivers' / 'foreign.py'}"


def scroll_width(page: Path, work: Path) -> int:
    """The page's laid-out width in Chromium's 1400-pixel window: a copy of ``page``
    with a script that writes ``scrollWidth`` into the DOM (the page itself runs none)."""
    probe = work / f"{page.stem}-probe.html"
    text = page.read_text()
    text = text[:text.index('<meta http-equiv="Content-Security-Policy"')] + text[text.index("<title>"):]
    probe.write_text(text.replace("</body>", "<script>document.body.dataset.scrollWidth="
                                              "document.documentElement.scrollWidth</script></body>"))
    dom = render(probe, work / "probe").dom
    return int(re.search(r'data-scroll-width="(\d+)"', dom).group(1))


@pytest.fixture(scope="module")
def foreign_check(tmp_path_factory):
    """One dev run on the foreign port (several differences in several causes), its
    traces written."""
    traces = tmp_path_factory.mktemp("traces")
    return emq_kit.check(driver=FOREIGN, profile="dev", seed=3, traces=str(traces))


def test_a_check_page_draws_every_difference_under_its_cause(foreign_check, tmp_path: Path) -> None:
    report = foreign_check
    assert len(report.differences) >= 3 and len(report.causes) >= 2
    page = html.write(tmp_path / "check.html", html.check_html(report))
    seen = render(page, tmp_path)
    assert seen.console == [], seen.console
    width, height, colours = png_facts(seen.screenshot)
    assert (width, height) == (1400, 1800) and colours > 50
    sections = re.findall(r'<section class="difference" id="diff-(\d+)" data-signature="([^"]*)"', seen.dom)
    assert [s for _, s in sections] == [html._e(str(d.signature)) for c in report.causes
                                        for d in [c.representative] + [x for x in c.differences
                                                                        if x is not c.representative]]
    assert sorted(int(n) for n, _ in sections) == list(range(1, len(report.differences) + 1))
    for d in report.differences:  # each its steps, its replay command and the rerun
        n = report.differences.index(d) + 1
        section = seen.dom[seen.dom.index(f'id="diff-{n}"'):].split("</section>", 1)[0]
        assert escape(replay_command(d.trace, report.target), quote=False) in section  # as the DOM serialises text
        assert escape(report.rerun, quote=False) in section
        assert section.count(f'id="d{n}-row-') == len(d.shrunk)
    assert seen.dom.index('id="cause-1"') < seen.dom.index('id="cause-2"') < seen.dom.index('id="summary"')
    cells = re.findall(r'<g class="cell ([a-z-]+)" data-cell="([^"]+)" data-hits="(\d+)"', seen.dom)
    assert {c: int(n) for s, c, n in cells if s == "reached"} == {c: n for c, n in report.hits.items() if n}
    assert {c for s, c, _ in cells if s == "unreached"} == {f"{op}/{o}" for op, o in report.unreached}
    assert {c for s, c, _ in cells if s == "not-implemented"} == {f"{op}/{o}" for op, o in report.not_implemented}
    assert 'class="id differs"' in seen.dom and 'class="field differs"' in seen.dom
    assert scroll_width(page, tmp_path) <= 1400


def test_a_conforming_check_page_is_its_figures_and_coverage_without_a_sideways_scroll(tmp_path: Path) -> None:
    report = emq_kit.check(profile="dev", seed=1, examples=20, steps=30, traces=str(tmp_path / "traces"))
    assert report.ok
    page = html.write(tmp_path / "ok.html", html.check_html(report))
    seen = render(page, tmp_path)
    assert seen.console == [] and png_facts(seen.screenshot)[2] > 50
    assert 'class="verdict inconclusive ok"' in seen.dom and "<svg" in seen.dom and 'class="summary"' in seen.dom
    reached = re.findall(r'<g class="cell reached" data-cell="([^"]+)"', seen.dom)
    assert len(reached) == len([n for n in report.hits.values() if n]) > 10
    assert scroll_width(page, tmp_path) <= 1400


def test_the_keyspace_shows_lanes_ring_paused_limits_weights_and_stray_keys_marked() -> None:
    def snap(weight: int, stray: tuple[str, ...]) -> Snapshot:
        return Snapshot.build("q", {}, {"JOBLANE0000001": {"state": b"pending", "group": b"g1"}},
                              stray=stray, lanes={"g1": [("JOBLANE0000001", 5)]}, ring=["g1", "g2"],
                              paused=["g2"], hashes={"glimit": {"g1": 2}, "gactive": {"g1": 0},
                                                     "gweight": {"g1": weight}})

    model, target = snap(1, ()), snap(3, ("emq:{q}:junk",))
    table = html._keyspace_table([("after (model)", model, target, "differs"),
                                  ("after (target)", target, model, "differs")])
    assert "<th>lanes</th>" in table and "<th>stray keys</th>" in table
    assert table.count('data-id="JOBLANE0000001"') == 2 and "lane g1" in table
    assert "g1 → g2" in table and "paused: " in table and "limits: " in table
    assert table.count('<span class="differs">g1=') == 2  # the weights differ, nothing else
    assert '<span class="id differs" data-id="emq:{q}:junk">' in table
    plain = html._keyspace_table([("before", Snapshot.build("q", {}, {}), None, "")])
    assert "lanes" not in plain and "stray" not in plain

"""Every verdict true, reproducible, minimal and grouped by cause (specs/trace.md TR-4c,
TR-7, TR-12..15): a difference is listed only if a
replay of its trace shows it, under the one signature check, replay, the trace, the JSON
report and the HTML page all give it; one that does not reproduce is kept apart; a
server-clock trace is minimized with its waits as steps; a difference is classed by its
effect; differences are grouped into causes; a phase's seconds are wall time of the run.

The port is tests/drivers/foreign.py with its planted defects: ``kind-as-arg`` (one
refusal answered wrongly on every op that takes an id), ``reap-uncapped`` (a difference
only an expired lease shows), ``batch-counts`` (a difference no step-by-step replay
shows) and ``--store server`` (its queues on a server, for the server clock)."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest

from emq_kit import cli
from emq_kit.check import effect
from emq_kit.check.causes import causes_of
from emq_kit.check.focus import Focus
from emq_kit.check.profiles import PROFILES
from emq_kit.check.run import Difference, run_check
from emq_kit.check.signature import Signature, signature
from emq_kit.check.step import SLEEP, Crash, Divergence, Step
from emq_kit.ports.driver_client import DriverError, DriverTarget
from emq_kit.report import html
from emq_kit.report.document import validate
from emq_kit.trace.format import Trace
from emq_kit.trace.replay import replay, target_for
from emq_model.errors import ArgError, KindError, WrongTypeError
from emq_model.model import QueueModel
from tests.browser import render
from tests.once import made_once

FOREIGN = f"{sys.executable} {Path(__file__).parents[1] / 'drivers' / 'foreign.py'}"
OTHERS = "--conform empty-queue,lease-bound,complete-settled,extend-dead,claim-orphan,reprocess"


def check(argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str], exit: int) -> tuple[dict, str]:
    """``emq check ARGV`` with its traces, its report and its page in ``tmp_path``: the
    JSON document (valid) and the text printed."""
    report, page = tmp_path / "check.json", tmp_path / "check.html"
    assert cli.main(["check", *argv, "--traces", str(tmp_path / "traces"), "--report", str(report),
                     "--html", str(page)]) == exit
    document = json.loads(report.read_text("utf-8"))
    validate(document)
    return document, capsys.readouterr().out


def _plant(tmp: Path) -> None:
    """One dev run on the foreign port with every deviation and ``kind-as-arg``: its
    report, page, traces and the text it printed (``out.txt``), in ``tmp``."""
    from contextlib import redirect_stdout
    from io import StringIO

    argv = ["check", "--driver", f"{FOREIGN} --plant kind-as-arg", "--profile", "dev", "--seed", "3",
            "--traces", str(tmp / "traces"), "--report", str(tmp / "check.json"), "--html", str(tmp / "check.html")]
    out = StringIO()
    with redirect_stdout(out):
        assert cli.main(argv) == cli.EXIT_FAIL
    (tmp / "out.txt").write_text(out.getvalue(), "utf-8")


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, str, Path]:
    """That run's document (valid), the text it printed and its page: one run for all
    the workers of a test run."""
    tmp = made_once(tmp_path_factory, "planted", _plant)
    document = json.loads((tmp / "check.json").read_text("utf-8"))
    validate(document)
    return document, (tmp / "out.txt").read_text("utf-8"), tmp / "check.html"


# -- a difference is listed only if its trace reproduces it, under one signature ----------


def test_every_listed_difference_replays_to_the_signature_it_is_listed_with(planted) -> None:
    document, text, _ = planted
    listed = document["check"]["differences"]
    assert len(listed) >= 5 and document["check"]["phases"]["reproduce"]["unreproduced"] == 0
    for d in listed:
        sig = d["signature"]
        trace = Trace.load(d["trace"])
        assert (trace.divergence["cell"], trace.divergence["rule"]) == (sig["cell"], sig["rule"])  # the file's
        target, clock = target_for(trace.header, driver=trace.header["target"]["driver"])  # TR-9: given, not read
        try:
            again = replay(trace.steps, target, clock)  # as emq replay runs it
        finally:
            target.close()
        assert again.divergence is not None and signature(again.divergence) == Signature(sig["cell"], sig["rule"])
    for cause in document["check"]["causes"]:  # the text draws each representative's trace
        sig = listed[cause["representative"]]["signature"]
        assert f"<- diverges ({sig['cell']} {sig['rule']})" in text
    # the names check and replay once gave apart: a refused argument is its validation rule in both
    assert any(d["signature"]["rule"] in ("ID-7", "CC-5") for d in listed)


def test_emq_replay_prints_and_reports_the_signature_the_check_listed(planted, tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    document, _, _ = planted
    d = next(d for d in document["check"]["differences"] if d["signature"]["rule"] == "ID-7")
    report = tmp_path / "replay.json"
    # the command the report prints, the driver given (TR-9)
    assert cli.main([*shlex.split(d["replay"])[1:], "--report", str(report)]) == cli.EXIT_FAIL
    printed = capsys.readouterr().out
    assert f"diverges ({d['signature']['cell']} ID-7)" in printed
    replayed = json.loads(report.read_text("utf-8"))["replay"]["difference"]
    assert replayed["signature"] == d["signature"] and replayed["class"] == d["class"]


def test_a_difference_no_replay_shows_is_kept_apart_never_listed(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """batch-counts: the search meets stale counts inside a batch; its steps replayed one
    by one conform every time."""
    document, text = check(["--driver", f"{FOREIGN} --conform all --plant batch-counts", "--profile", "dev",
                            "--seed", "1"], tmp_path, capsys, cli.EXIT_FAIL)
    body = document["check"]
    assert (document["verdict"], document["detail"]) == ("inconclusive", "unreproduced") and body["differences"] == [] and body["causes"] == []
    [apart] = body["unreproduced"]
    assert apart["signature"]["cell"] == "counts/ok" and apart["replays"] == 6  # 3 rounds, renamed and not
    assert apart["seen"] == ["conforms"] * 6 and Path(apart["trace"]).exists()
    assert "DID NOT REPRODUCE (timing-dependent, or a target that is not deterministic: DET-1): 1 difference" in text
    assert "replayed 6 times: conformed 6 times" in text and "distinct difference" not in text
    seen = render(tmp_path / "check.html", tmp_path / "page")
    assert seen.console == [] and 'id="unreproduced"' in seen.dom and "counts/ok R-counts" in seen.dom


def test_a_replay_that_diverges_elsewhere_does_not_reproduce() -> None:
    """The list never slips: steps whose replay diverges first at another difference are
    not that difference's trace."""
    from emq_kit.check.reproduce import reproduce

    target = DriverTarget(f"{FOREIGN} --conform all --plant kind-as-arg", partial=True)
    try:
        steps = [Step("alpha", "enqueue", {"id": "JOB", "payload": b"p"}),
                 Step("alpha", "claim", {"lease_ms": 5, "now": 1})]
        made = reproduce(steps, Signature("claim/empty", "T-claim"), target, replay)
    finally:
        target.close()
    assert not made.reproduced and made.replays == 3 and made.seen == ["enqueue/EMQKIND ID-7"] * 3


# -- server-clock traces are minimized, their waits steps ---------------------------------


def test_a_server_clock_difference_is_minimized_with_the_wait_it_needs(valkey, tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    document, text = check(["--driver", f"{FOREIGN} --store server {OTHERS} --plant reap-uncapped",
                            "--url", valkey.url, "--clock", "server", "--profile", "dev", "--seed", "4",
                            "--skip-ops", "spoil_key,mend_key"], tmp_path, capsys, cli.EXIT_FAIL)
    body = document["check"]
    [d] = body["differences"]
    assert d["signature"] == {"cell": "reap/requeued", "rule": "INV-8"} and d["class"] == "lifecycle"
    ops = [s["op"] for s in d["shrunk_steps"]]
    assert ops == ["enqueue", "claim", SLEEP, "reap"], ops  # the lease must have expired: a wait, as a step
    assert body["phases"]["minimize"]["steps"] > 0 and body["phases"]["reproduce"]["reproduced"] == 1
    trace = Trace.load(d["trace"])
    assert trace.header["clock"] == "server" and trace.steps[2].op == SLEEP and trace.steps[2].args["ms"] >= 1
    assert [s.at is not None for s in trace.steps] == [False, True, False, True]  # each clock op's clock (TR-2)
    assert trace.steps[3].at - trace.steps[1].at >= trace.steps[2].args["ms"]  # the replay waited it out
    assert "may not be the run's" not in html.counterexample_page(trace)  # the page's model runs at those clocks
    target, clock = target_for(trace.header, driver=trace.header["target"]["driver"])
    try:
        again = replay(trace.steps, target, clock)
    finally:
        target.close()
        clock.close()
    assert again.divergence is not None and str(signature(again.divergence)) == "reap/requeued INV-8"


def test_a_sleep_step_is_what_makes_a_lease_expire_on_replay(valkey) -> None:
    """The same steps with a lease of 300 ms: with the wait the reap finds it expired
    (the planted defect shows), without it the reap finds it live (both agree)."""
    trace = [Step("alpha", "enqueue", {"id": "JOB0KHTOWnGLuC", "payload": b"p"}),
             Step("alpha", "claim", {"lease_ms": 300}),
             Step("", SLEEP, {"ms": 400}),
             Step("alpha", "reap", {"limit": 1, "max_attempts": 1})]
    head = {"target": {"url": valkey.url}, "clock": "server"}
    target, clock = target_for(head, driver=f"{FOREIGN} --store server --conform all --plant reap-uncapped")
    try:
        waited = replay(trace, target, clock)
        unwaited = replay([s for s in trace if s.op != SLEEP], target, clock)
    finally:
        target.close()
        clock.close()
    assert waited.divergence is not None and str(signature(waited.divergence)) == "reap/requeued INV-8"
    assert unwaited.conforms and unwaited.steps[-1].model == 0


# -- class by effect ------------------------------------------------------------------------


def test_a_wrong_refusal_that_changes_nothing_is_surface_and_blames_no_kit_key(valkey, tmp_path: Path,
                                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """The port on a server never checks a key's type: it answers the server's WRONGTYPE
    where the contract says EMQTYPE, and changes nothing. Surface, one cause; the key the
    kit spoiled is no invariant of the target's breaking."""
    document, text = check(["--driver", f"{FOREIGN} --store server --conform all", "--url", valkey.url,
                            "--profile", "dev", "--seed", "1"], tmp_path, capsys, cli.EXIT_FAIL)
    body = document["check"]
    typed = [d for d in body["differences"] if d["signature"]["cell"].endswith("/EMQTYPE")]
    assert len(typed) >= 3 and all(d["class"] == "surface" for d in typed)
    [cause] = [c for c in body["causes"] if set(c["differences"]) & {body["differences"].index(d) for d in typed}]
    assert cause["class"] == "surface" and len(cause["ops"]) >= 3 and "WRONGTYPE" in cause["title"]
    assert "outside the grammar" not in text  # the spoiled key is the model's too
    assert "the keyspace of queue 'alpha' is the model's" in text


def test_the_class_is_the_effect_on_the_keyspace() -> None:
    empty = QueueModel("alpha").snapshot()
    moved = QueueModel("alpha")
    moved.enqueue("JOB0KHTOWnGLuC", b"p")
    assert effect.klass("answer", "claim", empty, empty) == effect.SURFACE
    assert effect.klass("answer", "claim", empty, moved.snapshot()) == effect.LIFECYCLE
    assert effect.klass("answer", "claim", empty, None) == effect.LIFECYCLE  # unknown keyspace: not the model's
    assert effect.klass("snapshot", "claim", empty, empty) == effect.LIFECYCLE
    assert effect.klass("answer", "queue", None, None) == effect.SURFACE  # a queue name opens no key


# -- causes ----------------------------------------------------------------------------------


def test_one_refusal_answered_wrongly_on_every_op_is_one_cause(planted) -> None:
    document, text, _ = planted
    body = document["check"]
    kinds = [n for n, d in enumerate(body["differences"]) if d["signature"]["rule"] == "ID-7"]
    [cause] = [c for c in body["causes"] if c["title"].startswith("EMQKIND expected, EMQARG answered")]
    assert sorted(cause["differences"]) == kinds and len(cause["ops"]) == len(kinds) >= 3
    steps = [len(body["differences"][n]["shrunk_steps"]) for n in kinds]
    assert len(body["differences"][cause["representative"]]["shrunk_steps"]) == min(steps)
    assert len(body["causes"]) < len(body["differences"])
    every = sorted(n for c in body["causes"] for n in c["differences"])
    assert every == list(range(len(body["differences"])))  # each difference in exactly one cause
    # the text lists causes first, lifecycle then surface, each with its ops
    assert text.index("cause 1:") < text.index("SURFACE") < text.index("EMQKIND expected, EMQARG answered (ID-7) — ")
    assert f"{len(kinds)} ops: " in text.split("EMQKIND expected, EMQARG answered (ID-7) — ")[1].splitlines()[0]


def test_the_html_lists_the_causes_each_with_its_representative(planted, tmp_path: Path) -> None:
    document, _, page = planted
    seen = render(page, tmp_path)
    assert seen.console == []
    causes = document["check"]["causes"]
    assert seen.dom.count('<section class="cause"') == len(causes)
    for n, cause in enumerate(causes, 1):
        k = cause["representative"] + 1  # the page numbers the differences from 1
        rep = document["check"]["differences"][k - 1]
        section = seen.dom.split(f'id="cause-{n}"')[1].split('<section class="cause"')[0]
        assert section.split('<section class="difference" id="diff-')[1].split('"')[0] == str(k)  # shortest first
        assert f'id="d{k}-step-{rep["step"]}"' in section  # its counterexample drawn, ids its own
    # every difference drawn once, under its cause (the table above only indexes them)
    assert seen.dom.count('<section class="difference"') == len(document["check"]["differences"])
    assert seen.dom.index('id="cause-1"') < seen.dom.index('<section class="difference"')


def test_causes_group_by_refusal_failure_or_rule() -> None:
    def made(op: str, model: object, target: object, kind: str = "answer", rule: str = "") -> Difference:
        step = Step("alpha", op, {}, model, target, index=1)
        d = Divergence(kind, rule or f"T-{op}", step, [], [step])
        return Difference(signature(d), d, [step], 0.0, klass=effect.SURFACE)

    wrongtype = Crash(DriverError("the driver failed at request 12 (claim): ResponseError: WRONGTYPE x"))
    wrongtype2 = Crash(DriverError("the driver failed at request 40 (state): ResponseError: WRONGTYPE x"))
    found = [made("claim", WrongTypeError("EMQTYPE k"), wrongtype), made("state", WrongTypeError("EMQTYPE k"), wrongtype2),
             made("enqueue", KindError("EMQKIND x"), ArgError("EMQARG x")), made("job", KindError("EMQKIND x"), None),
             made("claim", ArgError("EMQARG lease"), None), made("complete", "ok", "gone"),
             made("claim", None, None, "snapshot", "INV-8"), made("reap", 1, 1, "snapshot", "INV-8")]
    causes = causes_of(found)
    assert [len(c.differences) for c in causes] == [2, 1, 1, 1, 1, 1, 1]
    assert causes[0].title == ("EMQTYPE never answered: the target fails with DriverError: the driver failed: "
                               "ResponseError: WRONGTYPE x") and causes[0].ops == ["claim", "state"]
    mixed = causes_of([found[0], made("counts", {"pending": 0}, wrongtype)])  # one failure, other answers expected
    assert [c.title for c in mixed] == ["the target fails where the model answers: DriverError: the driver failed: "
                                        "ResponseError: WRONGTYPE x"]
    assert causes[1].title == "EMQKIND expected, EMQARG answered (ID-7)"
    assert causes[2].title == "EMQKIND expected, the call accepted (ID-7)"
    assert causes[3].title == "EMQARG expected, the call accepted (CC-5)"


# -- accounting -----------------------------------------------------------------------------


def test_every_phase_is_wall_time_inside_the_run() -> None:
    target = DriverTarget(f"{FOREIGN} --plant kind-as-arg", partial=True)
    try:
        report = run_check(target, PROFILES["dev"], seed=3, focus=Focus(ops=frozenset(target.offered)))
    finally:
        target.close()
    assert report.differences and {"shrink", "minimize", "reproduce"} <= set(report.phases)
    for name, figures in report.phases.items():
        assert 0 <= figures["seconds"] <= report.seconds, (name, figures, report.seconds)
    assert sum(report.phases[p]["seconds"] for p in ("shrink", "minimize", "reproduce")) <= report.seconds

"""Issue 13: every difference of a port in one run, classified; partial ports; focus;
every bad value of the machine's lists reachable."""

from __future__ import annotations

import sys
from pathlib import Path

from emq_kit.check.machine import ARGS_MAX, BAD_IDS, BADS, SPOILS, Focus, _bad_values
from emq_kit.check.run import PROFILES, run_check
from emq_kit.check.signature import Signature, parse, signature
from emq_kit.ports.driver_client import DriverTarget
from emq_model import spec

FOREIGN = f"{sys.executable} {Path(__file__).parent / 'drivers' / 'foreign.py'}"


def _foreign_run(hostile: str, seed: int = 3, profile: str = "dev"):
    target = DriverTarget(FOREIGN, partial=True)
    try:
        return run_check(target, PROFILES[profile], seed=seed,
                         focus=Focus(ops=frozenset(target.offered), hostile=hostile))
    finally:
        target.close()


def test_one_run_reports_the_foreign_ports_differences_each_once_lifecycle_first() -> None:
    # the ci profile, as a port author runs it: a dev run's 30 examples meet some of the
    # port's differences only on some seeds (and Hypothesis versions)
    report = _foreign_run("both", profile="ci")
    sigs = [d.signature for d in report.differences]
    assert len(sigs) == len(set(sigs)) >= 4
    assert Signature("queue/EMQARG", "KS-3") in sigs  # empty-queue
    assert Signature("complete/EMQSTALE", "T-complete") in sigs  # complete-settled
    assert any(s.cell.startswith("claim/") and s.rule == "T-claim" for s in sigs)  # claim-orphan
    classes = [s.klass for s in sigs]
    assert classes == sorted(classes, key=lambda k: k == "surface") and set(classes) == {"lifecycle", "surface"}
    assert all(len(d.shrunk) <= 6 for d in report.differences)
    assert {op for op, _ in report.not_implemented} == {"reprocess"}  # missing op: not a difference
    assert "reprocess" not in report.op_mix and not report.ok
    lifecycle_ops = sum(report.op_mix.get(op, 0) for op in ("claim", "complete", "retry", "extend", "reap", "promote"))
    assert lifecycle_ops * 2 >= sum(n for op, n in report.op_mix.items() if op != "spoiled")

    import datetime as dt

    from emq_kit.report.document import check_document, validate

    now = dt.datetime.now(dt.timezone.utc)
    doc = check_document(report, exit=1, started=now, finished=now, rerun="emq check --seed 3")
    validate(doc)
    assert [d["signature"] for d in doc["check"]["differences"]] == [{"cell": s.cell, "rule": s.rule} for s in sigs]
    assert doc["check"]["cells"]["not_implemented"] and doc["check"]["op_mix"] == report.op_mix


def test_hostile_off_leaves_only_lifecycle_differences() -> None:
    report = _foreign_run("off", seed=5)
    assert report.differences and all(d.signature.klass == "lifecycle" for d in report.differences)
    assert "queue" not in report.op_mix and "spoiled" not in report.op_mix
    assert report.out_of_focus and all(o in ("EMQKIND", "EMQARG") for _, o in report.out_of_focus)


def test_every_bad_value_of_every_argument_is_reachable() -> None:
    spoils = {(victim, bad) for spoiled, victim in SPOILS if spoiled for bad in BADS}
    for op, entry in spec.OPS.items():
        table = entry["args"] + ([{"name": "now", "type": "time", "optional": True}] if entry["clock"] else [])
        for i, arg in enumerate(table):
            bad = _bad_values(arg)
            reached = {b % len(bad) for v, b in spoils if v % len(table) == i}
            assert reached == set(range(len(bad))), (op, arg["name"])
    assert len(BADS) >= len(BAD_IDS) and ARGS_MAX >= max(len(e["args"]) + 1 for e in spec.OPS.values())


def test_a_signature_prints_and_parses_back() -> None:
    s = Signature("claim/EMQARG", "CC-5")
    assert parse(str(s)) == s and s.klass == "surface" and Signature("claim/empty", "T-claim").klass == "lifecycle"


def test_a_refused_argument_cites_the_validation_rule_not_the_ops() -> None:
    from emq_kit.check.machine import Divergence, Step
    from emq_model.errors import ArgError

    step = Step("alpha", "claim", {"lease_ms": 2**48}, model=ArgError("EMQARG lease"), target=None, index=1)
    assert signature(Divergence("answer", "T-claim", step, [])) == Signature("claim/EMQARG", "CC-5")


def test_expectations_pin_known_differences_and_report_fixed_ones(tmp_path: Path, capsys) -> None:
    from emq_kit import cli

    pinned = tmp_path / "expect.toml"
    base = ["check", "--driver", FOREIGN, "--profile", "dev", "--examples", "5", "--seed", "3",
            "--traces", str(tmp_path / "traces")]
    assert cli.main([*base, "--write-expect", str(pinned)]) == cli.EXIT_FAIL
    first = capsys.readouterr().out
    assert "distinct differences" in first and "run the search again: emq check --seed 3 --profile dev" in first
    assert "--driver" in first.split("run the search again:")[1] and "--examples 5" in first
    written = pinned.read_text("utf-8")
    assert written.count("[[difference]]") >= 1
    assert cli.main([*base, "--expect", str(pinned)]) == cli.EXIT_OK
    assert "differences are expected" in capsys.readouterr().out
    pinned.write_text(written + '[[difference]]\nsignature = "remove/gone T-remove"\nreason = "was a bug"\n', "utf-8")
    assert cli.main([*base, "--expect", str(pinned)]) == cli.EXIT_OK
    assert f"fixed — remove it from {pinned}: remove/gone T-remove" in capsys.readouterr().out
    assert cli.main([*base, "--expect", str(pinned), "--strict"]) == cli.EXIT_FAIL


def test_the_expectations_file_written_matches_its_schema(tmp_path: Path) -> None:
    import tomllib

    import jsonschema

    from emq_kit.check import expect
    from emq_kit.check.machine import Divergence, Step
    from emq_kit.check.run import Difference

    step = Step("alpha", "claim", {}, model=None, target=1, index=2)
    report = type("R", (), {"differences": [Difference(Signature("claim/empty", "T-claim"),
                                                       Divergence("answer", "T-claim", step, []), [step], 0.1)]})()
    path = expect.write(tmp_path / "e.toml", report)
    schema = __import__("json").loads(spec.text("schemas/expect.json"))
    jsonschema.Draft202012Validator(schema).validate(tomllib.loads(path.read_text("utf-8")))
    assert expect.load(path) == {Signature("claim/empty", "T-claim"): "lifecycle difference first met at step 2: explain it"}

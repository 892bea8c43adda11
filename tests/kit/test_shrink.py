"""Hypothesis's shrinking runs on a budget of checked steps (``run_check(shrink_steps=)``,
``emq check --shrink-steps``): past it the round ends with the shortest divergence so far
(``ShrinkCut``) and the kit's minimizer makes that 1-minimal (emq_kit/check/minimize.py).
The budget is counted in steps, not seconds, so the counterexample of a seed does not
depend on the machine's load; the report says what was spent (``phases.shrink``)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from emq_kit import cli
from emq_kit.check.focus import Focus
from emq_kit.check.profiles import PROFILES
from emq_kit.check.run import Report, run_check
from emq_kit.check.signature import signature
from emq_kit.check.step import Step
from emq_kit.check.tally import SHRINK_STEPS
from emq_kit.check.target import open_target
from emq_kit.errors import BadArgument
from emq_kit.targets.protocol import Target
from emq_kit.trace.replay import replay
from tests.broken import broken_dir, variant

DEV = PROFILES["dev"]


@pytest.fixture(scope="module")
def scripts(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(broken_dir(variant("missing-zrem"), tmp_path_factory.mktemp("shrink")))


@pytest.fixture
def target(scripts: str) -> Iterator[Target]:
    t = open_target(None, scripts, observe=False)
    yield t
    t.close()


def check(target: Target, budget: int, seed: int = 1) -> Report:
    report = run_check(target, DEV, seed=seed, examples=100, shrink_steps=budget, focus=Focus(report=False))
    assert report.divergence is not None, "the broken scripts were not caught"
    return report


def test_the_budget_ends_hypothesis_shrinking_and_is_reported(target: Target) -> None:
    free = check(target, 10**6)
    spent = free.phases["shrink"]["steps"]
    assert free.phases["shrink"]["cut"] == 0 and spent > 40  # unbounded, it shrinks further than the cut below
    cut = check(target, 40)
    shrink = cut.phases["shrink"]
    assert shrink["budget"] == 40 and shrink["cut"] == 1
    assert 40 <= shrink["steps"] <= 40 + DEV.steps  # checked when an example starts: one example's overrun at most
    assert signature(cut.divergence) == signature(free.divergence)  # type: ignore[arg-type]


def test_a_budget_of_none_leaves_the_counterexample_to_the_minimizer_alone(target: Target) -> None:
    report = check(target, 0)
    assert report.phases["shrink"] == {"steps": 0, "budget": 0, "cut": 1, "seconds": report.phases["shrink"]["seconds"]}
    assert report.divergence is not None
    sig, steps = signature(report.divergence), report.shrunk
    again = replay([Step(s.queue, s.op, s.args) for s in steps], target).divergence
    assert again is not None and signature(again) == sig
    for i in range(len(steps) - 1):  # 1-minimal: without any one step it conforms or differs otherwise
        rest = [Step(s.queue, s.op, s.args) for j, s in enumerate(steps) if j != i]
        other = replay(rest, target).divergence
        assert other is None or signature(other) != sig


def test_a_seed_and_a_budget_shrink_to_the_same_counterexample(target: Target) -> None:
    first, second = check(target, 60, seed=4), check(target, 60, seed=4)
    assert [(s.op, s.args) for s in first.shrunk] == [(s.op, s.args) for s in second.shrunk]
    assert first.phases["shrink"]["steps"] == second.phases["shrink"]["steps"]


@pytest.mark.parametrize("bad", [-1, True, 1.5, "10"])
def test_a_bad_budget_is_refused_before_any_call(target: Target, bad: object) -> None:
    with pytest.raises(BadArgument, match="shrink_steps"):
        run_check(target, DEV, seed=1, shrink_steps=bad)  # type: ignore[arg-type]


def test_the_command_takes_the_budget_and_repeats_it_in_its_rerun_line(scripts: str, tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as refused:
        cli.main(["check", "--shrink-steps", "-3"])
    assert refused.value.code == 2 and "--shrink-steps: must be at least 0" in capsys.readouterr().err
    code = cli.main(["check", "--scripts", scripts, "--profile", "dev", "--seed", "1", "--first", "--shrink-steps", "25",
                     "--traces", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == cli.EXIT_FAIL
    assert "shrink phase: steps " in out and "budget 25" in out
    assert "--shrink-steps 25" in out.split("run the search again:")[1]
    assert "\n1 distinct difference in 1 cause (lifecycle first" in out  # --first: one, and said so
    code = cli.main(["check", "--scripts", scripts, "--profile", "dev", "--seed", "1", "--first", "--traces", str(tmp_path)])
    assert code == cli.EXIT_FAIL
    assert f"budget {SHRINK_STEPS}" in (out := capsys.readouterr().out) and "--shrink-steps" not in out

"""Deferred verification (emq_kit/check/window.py): on a server the machine sends windows
of steps in one pipeline and judges them afterwards, and finds what step-by-step
verification finds: the same verdict, the same first diverging step, the same shrunk
counterexample."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from emq_kit.check.live import LiveTarget
from emq_kit.check.profiles import PROFILES
from emq_kit.check.run import Report, run_check
from emq_kit.check.signature import signature
from emq_kit.trace.replay import replay
from tests.broken import VARIANTS, broken_dir
from tests.livekit import flush_url

DEV = dataclasses.replace(PROFILES["dev"], gate=False)


class Counting(LiveTarget):
    """A live target that counts the windows it was sent and the calls in them;
    ``windows=False`` verifies step by step."""

    def __init__(self, url: str, scripts: str | None = None, *, windows: bool = True) -> None:
        super().__init__(url, scripts, observe=True)
        if not windows:
            self.capabilities = dataclasses.replace(self.capabilities, batch_max=0)
        self.sent: list[int] = []

    def batch(self, calls: Any, snapshots: bool = True) -> Any:
        self.sent.append(len(calls))
        return super().batch(calls, snapshots)


def check(url: str, scripts: str | None, *, windows: bool, seed: int = 1) -> tuple[Report, Counting]:
    """A run of up to 200 examples: enough to find each variant below."""
    target = Counting(url, scripts, windows=windows)
    try:
        return run_check(target, DEV, seed=seed, examples=200 if scripts else None), target
    finally:
        target.close()


def test_a_conforming_run_is_windowed_and_checks_every_step(valkey) -> None:
    windowed, target = check(flush_url(valkey), None, windows=True, seed=7)
    stepwise, plain = check(flush_url(valkey), None, windows=False, seed=7)
    assert windowed.ok and stepwise.ok
    assert not plain.sent and target.sent and max(target.sent) > 1  # the window is really used
    # the same examples and the same checked steps: windowing changes no draw
    assert (windowed.examples, windowed.steps, windowed.checks) == (stepwise.examples, stepwise.steps, stepwise.checks)
    assert windowed.hits == stepwise.hits


@pytest.mark.parametrize("variant", [v for v in VARIANTS if v.name in ("missing-zrem", "token-not-checked",
                                                                        "state-not-written")], ids=lambda v: v.name)
def test_a_window_reports_the_divergence_step_by_step_verification_reports(variant: Any, valkey,
                                                                           tmp_path: Path) -> None:
    scripts = str(broken_dir(variant, tmp_path))
    windowed, target = check(flush_url(valkey), scripts, windows=True)
    stepwise, _ = check(flush_url(valkey), scripts, windows=False)
    assert target.sent, "no window was sent"
    assert windowed.divergence is not None and stepwise.divergence is not None
    got = windowed.divergence
    # The first difference found of each, as found (the listing puts lifecycle ones first,
    # and the class is the effect of each run's own trace, TR-13: an extend that accepts a
    # stale token and writes the deadline the lease already had changes nothing)
    first, other = (min(r.differences, key=lambda d: d.seconds).divergence for r in (windowed, stepwise))
    assert (first.kind, first.rule) == (other.kind, other.rule)
    # Shrunk step by step from the same failing example: as short. (Not always the very
    # same steps: the shrinker's random state differs between one Hypothesis run and a
    # search followed by a shrink, and it may settle on claim where the other took
    # claim_many.)
    assert len(windowed.shrunk) <= len(stepwise.shrunk)
    assert windowed.shrunk[-1] is got.step and got.steps == windowed.shrunk  # it ends at the diverging step
    # Every difference the windowed run reports is one: replayed step by step on a fresh
    # target, its steps diverge with its signature. (The two runs need not find the same
    # set past the first: once a known difference stops an example, the window has
    # already run the model past it, and the preconditions of the draws after it — a
    # pending job to vandalize, a lane to claim, a key to spoil — read that model, so a
    # round's later examples differ.)
    for d in windowed.differences:
        fresh = LiveTarget(flush_url(valkey), scripts)
        try:
            again = replay(d.shrunk, fresh).divergence
        finally:
            fresh.close()
        assert again is not None and signature(again) == d.signature, d.signature
    assert windowed.differences[0].signature in {d.signature for d in stepwise.differences}

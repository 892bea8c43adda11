"""A counterexample is 1-minimal after the search (emq_kit/check/minimize.py): the
foreign port's claim of an orphan, met after three enqueues and two claims, comes out
as the three steps it needs, and no single step of that can go."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from emq_kit.check.minimize import minimize
from emq_kit.check.signature import Signature, signature
from emq_kit.check.step import Step
from emq_kit.ports.driver_client import DriverTarget
from emq_kit.trace.replay import replay

FOREIGN = f"{sys.executable} {Path(__file__).parents[1] / 'drivers' / 'foreign.py'}"
NOW = {"lease_ms": 1, "now": 1_750_000_000_000}
A, B, C = "JOB000004Zqt8b", "JOB0000099hlD8", "JOB00000DjYdHf"
# What a ci run's shrinker stopped at (seed 3): which pending job a hand-deleted row is
# depends on the jobs before it, so deleting an enqueue alone moves the later claims.
SHRUNK = [Step("alpha", "enqueue", {"id": j, "payload": b"backlog"}) for j in (A, B, C)] + [
    Step("alpha", "claim", dict(NOW)), Step("alpha", "claim", dict(NOW)),
    Step("alpha", "forget_row", {"id": C}), Step("alpha", "claim", dict(NOW))]
ORPHAN = Signature("claim/empty", "T-claim")


@pytest.fixture(scope="module")
def foreign():
    """The foreign port's driver, started once for the module: every replay resets it first."""
    target = DriverTarget(FOREIGN, partial=True)
    yield target
    target.close()


def test_the_foreign_ports_orphan_claim_comes_out_as_its_three_steps(foreign: DriverTarget) -> None:
    found = replay(SHRUNK, foreign).divergence
    assert found is not None and signature(found) == ORPHAN
    made = minimize(found, ORPHAN, foreign, replay)
    small = made.divergence
    assert made.replayed > 0 and not made.cut
    assert [(s.op, s.args.get("id")) for s in small.steps] == [("enqueue", C), ("forget_row", C), ("claim", None)]
    assert signature(small) == ORPHAN
    for i in range(len(small.steps) - 1):  # 1-minimal: without any one step it conforms or differs otherwise
        rest = [Step(s.queue, s.op, s.args) for j, s in enumerate(small.steps) if j != i]
        again = replay(rest, foreign).divergence
        assert again is None or signature(again) != ORPHAN


def test_steps_that_do_not_replay_to_the_signature_are_left_as_they_are(foreign: DriverTarget) -> None:
    found = replay(SHRUNK, foreign).divergence
    assert found is not None
    other = Signature("claim/claimed", "T-claim")
    assert minimize(found, other, foreign, replay).divergence is found


def test_a_budget_of_no_replays_changes_nothing(foreign: DriverTarget) -> None:
    found = replay(SHRUNK, foreign).divergence
    assert found is not None
    made = minimize(found, ORPHAN, foreign, replay, budget=0)
    assert made == (found, 0, True)  # not one step may be replayed, and it says so

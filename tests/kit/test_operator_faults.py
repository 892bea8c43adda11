"""The kit's own faults never make a divergence (specs/lifecycle.md FLT-1..6): a row deleted
by hand, a key spoiled and mended, a stray key written and dropped, in any order a
replayed or minimized trace may hold them, leave the model and the target (our scripts
on fakeredis and Valkey, ``emq driver --model``) equal, and the invariants they break are
the operator's, never the target's nor taken for the model's defect. Long examples reach
the fault and lane interleavings the default profiles rarely do: a search over many seeds
with 1,000-step examples finds nothing."""

from __future__ import annotations

import os
import shlex
import time
from typing import Any, Iterator

import pytest

from emq_kit.check.faults import Damage
from emq_kit.check.machine import START, Conformance
from emq_kit.check.pools import POOL
from emq_kit.check.profiles import PROFILES
from emq_kit.check.run import run_check
from emq_kit.check.step import ModelBroken, Step
from emq_kit.check.tally import Run
from emq_kit.check.target import open_target
from emq_kit.errors import KitBug
from emq_kit.trace.replay import replay
from emq_model.invariants import beyond, check_invariants
from emq_model.model import QueueModel
from tests.kit.processes import EMQ
from tests.livekit import flush_url

A, B = POOL[0], POOL[1]
MODEL_DRIVER = f"{shlex.quote(str(EMQ))} driver --model"


def s(op: str, **args: Any) -> Step:
    return Step("alpha", op, args)


def lane_active(job: str = A, group: str = "g") -> list[Step]:
    """A grouped job made active: its group's ``gactive`` counts it."""
    return [s("lane_enqueue", id=job, payload=b"p", group=group), s("lane_wclaim", lease_ms=5, now=START)]


TRACES = {
    # seed 6's false counterexample: the row of a job a grouped claim just made active
    "active grouped row": [*lane_active(), s("forget_row", id=A)],
    # ... then its orphan reaped (no row, no group: gactive stays), its id reused
    "reaped and reused": [*lane_active(), s("forget_row", id=A), s("reap", limit=5, max_attempts=None, now=START + 9),
                          *lane_active(), s("lane_claim", lease_ms=3, now=START + 10)],
    # a lane's orphan, its id reused in another lane, claimed there, its row deleted
    "reused beside an orphan": [s("lane_enqueue", id=A, payload=b"p", group="0"), s("forget_row", id=A),
                                *lane_active(), s("forget_row", id=A), s("lane_claim", lease_ms=3, now=START)],
    # a spoiled row deleted by hand: the mend puts nothing back
    "spoiled row forgotten": [*lane_active(), s("spoil_key", key="row", id=A, kind="string"),
                              s("forget_row", id=A), s("mend_key", key="row", id=A)],
    # the active set spoiled while an active job's row goes, then mended
    "forgotten under a spoil": [*lane_active(), s("spoil_key", key="active", kind="set"), s("forget_row", id=A),
                                s("mend_key", key="active"), s("counts")],
    # a minimizer's deletions: a mend with no spoil, a spoil never mended, two spoils
    "mend alone": [s("enqueue", id=A, payload=b"p"), s("mend_key", key="pending"), s("mend_key", key="row", id=A)],
    "spoiled twice": [s("enqueue", id=A, payload=b"p"), s("spoil_key", key="pending", kind="string"),
                      s("spoil_key", key="pending", kind="hash"), s("claim", lease_ms=5, now=START),
                      s("mend_key", key="pending"), s("claim", lease_ms=5, now=START)],
    "never mended": [s("enqueue", id=A, payload=b"p"), s("spoil_key", key="row", id=A, kind="list"),
                     s("claim", lease_ms=5, now=START), s("enqueue", id=B, payload=b"p")],
    # faults about nothing: a row never written, a stray key never written
    "nothing there": [s("forget_row", id=A), s("drop_key", key="x"), s("stray_key", key="x", kind="string"),
                      s("stray_key", key="x", kind="list"), s("drop_key", key="x"), s("drop_key", key="x")],
    # rows of every location deleted by hand: T-promote-3, T-reap-4, T-remove on orphans
    "every location": [s("enqueue", id=A, payload=b"p"), s("claim", lease_ms=2, now=START), s("forget_row", id=A),
                       s("schedule", id=B, payload=b"p", delay_ms=1, now=START), s("forget_row", id=B),
                       s("promote", limit=5, now=START + 5), s("reap", limit=5, max_attempts=None, now=START + 5),
                       s("enqueue", id=A, payload=b"q"), s("retry", id=A, token=1, delay_ms=0, max_attempts=1,
                                                           error="e", now=START + 5),
                       s("forget_row", id=A), s("remove", id=A)],
}


@pytest.fixture(scope="module", params=["fakeredis", "valkey", "model driver"])
def target(request: pytest.FixtureRequest) -> Iterator[Any]:
    """Our scripts on the embedded fakeredis and on Valkey, and the model behind the
    driver protocol: each opened once for the traces (a replay resets its target first,
    as each example of a run does), not a driver process started per trace."""
    if request.param == "model driver":
        t = open_target(driver=MODEL_DRIVER)
    else:
        t = open_target(None if request.param == "fakeredis" else flush_url(request.getfixturevalue("valkey")))
    yield t
    t.close()


@pytest.mark.parametrize("name", TRACES)
def test_a_trace_of_faults_in_any_order_conforms(name: str, target: Any) -> None:
    result = replay(TRACES[name], target)
    assert result.conforms, (result.divergence, [(x.op, x.model, x.target) for x in result.steps])


def test_the_damage_excuses_exactly_the_operators_violations() -> None:
    model, damage = QueueModel("alpha"), Damage()
    model.lane_enqueue(A, b"p", "g")
    model.lane_enqueue(B, b"p", "g")
    model.lane_wclaim(5, now=START)
    model.lane_weight("g", 1)
    damage.note(model, "forget_row", {"id": A})
    model.forget_row(A)
    snap = model.snapshot()
    broken = check_invariants(snap)
    assert {(v.invariant, v.id) for v in broken} == {("INV-2", A), ("INV-11", "g")}
    assert all(damage.excuses(v, snap, model) for v in broken)
    # a gactive one further off than the rows deleted is no longer the operator's
    model.lanes.gactive["g"] += 1
    snap = model.snapshot()
    assert [v.id for v in check_invariants(snap) if not damage.excuses(v, snap, model)] == ["g"]


def test_a_violation_no_fault_explains_is_the_models_defect_not_a_difference() -> None:
    target = open_target(model=True)  # the model against itself: the snapshots are equal
    machine = Conformance.factory(target, Run())()
    machine.execute("alpha", "lane_enqueue", {"id": A, "payload": b"p", "group": "g"})
    machine.models["alpha"].lanes.gactive["g"] = 2  # the model's gactive off, the target's alike
    target.queue("alpha").lanes.gactive["g"] = 2
    with pytest.raises(KitBug, match="emq bug in the model: ModelBroken: after step 2 counts") as bug:
        machine.execute("alpha", "counts", {})
    assert isinstance(bug.value.cause, ModelBroken) and "INV-11 g: gactive is 2" in str(bug.value)


def test_the_evidence_beside_a_divergence_leaves_the_operators_damage_out() -> None:
    mine, theirs = QueueModel("alpha"), QueueModel("alpha")
    for model in (mine, theirs):
        model.enqueue(A, b"p")
        model.spoil("pending")  # the kit's own spoiled key: INV-6 on both sides
    theirs.rows[B] = {"state": b"pending", "attempts": b"0", "payload": b"p"}  # the target's own orphan row
    both = {(v.invariant, v.id) for v in check_invariants(theirs.snapshot())}
    assert ("INV-6", "emq:{alpha}:pending") in both
    assert [(v.invariant, v.id) for v in beyond(theirs.snapshot(), mine.snapshot())] == [("INV-2", B)]


SEEDS = int(os.environ.get("EMQ_FAULT_SEEDS", "0"))
"""Seeds of the long search (``EMQ_FAULT_SEEDS=20``: dev and ci over seed 6 and 19 more,
as lifecycle.md FLT-6 is held to; hours on two cores). Unset, the suite runs seed 6's
dev run alone: where the false INV-11 was met."""


@pytest.mark.slow
@pytest.mark.parametrize("name", ["fakeredis", "model driver"])
def test_long_examples_over_many_seeds_find_nothing_on_our_scripts_and_the_model_driver(name: str) -> None:
    """dev and ci with 1,000-step examples over ``SEEDS`` seeds (seed 6 first), on our
    scripts on fakeredis and on ``emq driver --model``, each target its own test (two
    workers take them at once); unset, seed 6's dev run."""
    seeds = [6, *range(1000, 1000 + SEEDS - 1)]
    profiles = ("dev", "ci") if SEEDS else ("dev",)
    target = open_target() if name == "fakeredis" else open_target(driver=MODEL_DRIVER)
    try:
        started = time.perf_counter()
        for profile in profiles:
            for seed in seeds:
                report = run_check(target, PROFILES[profile], seed=seed, steps=1000)
                assert report.divergence is None, (name, profile, seed, report.divergence)
        took = time.perf_counter() - started
    finally:
        target.close()
    print(f"seeds {seeds} x {profiles} at 1000 steps: {name} {took:.0f} s")

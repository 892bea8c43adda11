"""A deep run (specs/lifecycle.md DEPTH-1, DEPTH-2): ``emq check --depth N`` fills each
queue with N background jobs through the target's own ops before every example, so a
defect that shows only in a deep queue is found, shrunk and replayed like any other."""

from __future__ import annotations

from pathlib import Path

import pytest

from emq_kit import cli
from emq_kit.check.focus import Focus
from emq_kit.check.options import CheckOptions
from emq_kit.check.orders import Orders
from emq_kit.check.pools import POOL, background
from emq_kit.check.profiles import PROFILES
from emq_kit.check.run import run_check
from emq_kit.check.target import open_target
from emq_kit.check.window import window_size
from emq_kit.errors import BadArgument
from tests.kit.test_operator_faults import MODEL_DRIVER
from tests.livekit import edited_scripts

DEV = PROFILES["dev"]
# A claim that skips the lowest pending member once pending holds more than 500: right on
# every queue the machine makes at depth 0, wrong in a deep one.
SHALLOW = 'local page = redis.call("ZRANGE", k.pending, rank, rank + n - #take - 1)'
DEEP_ONLY = ('local skip = redis.call("ZCARD", k.pending) > 500 and 1 or 0\n'
             '  local page = redis.call("ZRANGE", k.pending, rank + skip, rank + skip + n - #take - 1)')


@pytest.fixture(scope="module")
def deep_only(tmp_path_factory: pytest.TempPathFactory) -> str:
    return edited_scripts(tmp_path_factory.mktemp("depth"), "claim", SHALLOW, DEEP_ONLY)


CALLS = frozenset({"enqueue", "enqueue_many", "claim", "complete", "retry", "extend", "promote", "reap",
                   "reprocess", "schedule"})
"""The calls of the four sets: no operator's fault, no lane."""


def test_background_ids_are_apart_from_the_pool_and_after_it_in_byte_order() -> None:
    ids = background(1200)
    assert len(set(ids)) == 1200 and not set(ids) & set(POOL)
    assert sorted(ids) == ids and max(POOL) < ids[0]


def test_a_deep_run_fills_every_queue_through_the_targets_batches_and_conforms() -> None:
    target = open_target(None, observe=False)
    try:
        report = run_check(target, DEV, seed=3, examples=3, steps=15, focus=Focus(depth=501))
    finally:
        target.close()
    assert report.ok and not report.differences
    # two enqueue_many a queue an example (500, then 1), in every example
    assert report.op_mix["enqueue_many"] >= 2 * 2 * report.examples
    assert ("claim", "empty") in report.out_of_focus and ("claim", "empty") not in report.unreached
    # DEPTH-5: the fill's steps apart from those after it, every checked step in one or the other
    part = report.phases["depth"]
    assert part["jobs"] == 501 * 2 * report.examples and part["fill_steps"] == 2 * 2 * report.examples
    assert part["fill_steps"] + part["steps"] == report.steps and part["steps"] > 0
    assert 0 < part["fill_seconds"] + part["seconds"] + part["end_seconds"] <= report.seconds


def test_a_deep_runs_orders_are_made_by_its_fill(monkeypatch: pytest.MonkeyPatch) -> None:
    """DEPTH-5: the orders the rules draw from are made whole at the fill's end (work that
    grows with the depth); the steps after it only patch them (no fault replaces a
    location whole here, no lane comes back whole)."""
    made: list[bool] = []
    preparing: list[bool] = []
    make, prepare = Orders._made, Orders.prepare

    def counted(self: Orders, loc: str) -> None:
        made.append(bool(preparing))
        make(self, loc)

    def prepared(self: Orders) -> None:
        preparing.append(True)
        try:
            prepare(self)
        finally:
            preparing.pop()

    monkeypatch.setattr(Orders, "_made", counted)
    monkeypatch.setattr(Orders, "prepare", prepared)
    target = open_target(model=True)
    try:
        report = run_check(target, DEV, seed=3, examples=4, steps=20,
                           focus=Focus(ops=CALLS, depth=300))
    finally:
        target.close()
    assert report.ok and report.op_mix["claim"] and made and all(made), (made, report.op_mix)


def test_a_shallow_run_has_no_depth_phase() -> None:
    target = open_target(model=True)
    try:
        report = run_check(target, DEV, seed=3, examples=2, steps=10)
    finally:
        target.close()
    assert report.ok and "depth" not in report.phases


def test_a_defect_only_a_deep_queue_shows_is_found_shrunk_and_replayed(deep_only: str) -> None:
    target = open_target(None, deep_only, observe=False)
    try:
        shallow = run_check(target, DEV, seed=1, examples=10, steps=20, focus=Focus(report=False))
        deep = run_check(target, DEV, seed=1, examples=10, steps=20, focus=Focus(report=False, depth=501))
    finally:
        target.close()
    assert shallow.divergence is None
    assert deep.divergence is not None and deep.differences and deep.differences[0].reproduced
    shrunk = deep.differences[0].shrunk
    assert any(s.op == "enqueue_many" for s in shrunk)  # the fill is in its trace: the replay is deep too
    assert shrunk[-1].op == "claim"


@pytest.mark.parametrize("bad", [-1, 10**5 + 1, 1.5, True])
def test_a_bad_depth_is_refused_when_the_options_are_made(bad: object) -> None:
    with pytest.raises(BadArgument, match="--depth"):
        CheckOptions(depth=bad)  # type: ignore[arg-type]


def test_a_depth_needs_the_four_set_layout() -> None:
    with pytest.raises(BadArgument, match="--depth .* echomq"):
        CheckOptions(depth=10, layout="bullmq", url="redis://127.0.0.1:1/0")


def test_the_command_refuses_a_bad_depth_in_one_line_and_repeats_a_good_one(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(SystemExit) as refused:
        cli.main(["check", "--depth", "-3"])
    err = capsys.readouterr().err
    assert refused.value.code == 2 and "--depth: must be at least 0" in err and len(err.strip().splitlines()) == 1
    assert CheckOptions(profile="dev", depth=7).command(seed=1) == "emq check --seed 1 --profile dev --depth 7"
    monkeypatch.chdir(tmp_path)
    code = cli.main(["check", "--profile", "dev", "--seed", "2", "--examples", "2", "--steps", "5", "--depth", "3"])
    out = capsys.readouterr().out
    assert code == 0
    assert "1 cells left out by --depth 3 (a deep queue is never empty): claim/empty" in out


def test_a_deep_run_in_windows_counts_every_step_in_the_fill_or_after_it() -> None:
    """DEPTH-5 where a window holds the steps (a driver: its snapshot is whole, DEPTH-3):
    the fill's steps are judged before the steps after it start, so each checked step is
    counted, and timed, in the fill or after it, the window's last ones included."""
    target = open_target(driver=MODEL_DRIVER)
    try:
        assert window_size(target, "virtual", 60) > 2 * 60  # the whole fill fits in one window
        report = run_check(target, DEV, seed=3, examples=2, steps=10, focus=Focus(depth=60))
    finally:
        target.close()
    assert report.ok
    part = report.phases["depth"]
    assert part["fill_steps"] == 2 * 60 * report.examples  # one enqueue a job: the driver takes no batches
    assert part["fill_steps"] + part["steps"] == report.steps and part["steps"] > 0

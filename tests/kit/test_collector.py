"""The collector's schedule while the kit runs a machine (emq_kit/check/collector.py):
young collections ``YOUNG`` allocations apart during a check and during bench's floor,
the process's own schedule before and after, however the run ends, in every thread."""

from __future__ import annotations

import gc
import threading
from typing import Any, Callable, Iterator

import hypothesis.stateful
import pytest

from emq_kit import bench, figures
from emq_kit.check import collector
from emq_kit.check.model_target import ModelTarget
from emq_kit.check.profiles import Profile
from emq_kit.check.run import run_check

TINY = Profile("tiny", examples=3, steps=5, gate=False)


class Watching(ModelTarget):
    """The model as a target, noting the collector's schedule at every call (``fail``:
    the call that raises instead)."""

    def __init__(self, fail: int | None = None) -> None:
        super().__init__()
        self.seen: list[tuple[int, int, int]] = []
        self.fail = fail

    def call(self, name: str, op: str, args: dict[str, Any], meanwhile: Callable[[], None] | None = None) -> Any:
        self.seen.append(gc.get_threshold())
        if self.fail is not None and len(self.seen) >= self.fail:
            raise KeyboardInterrupt  # as a Ctrl-C would, inside the search
        return super().call(name, op, args, meanwhile)


@pytest.fixture
def schedule() -> Iterator[tuple[int, int, int]]:
    """A schedule of the process's own that no default matches, put back after."""
    was = gc.get_threshold()
    gc.set_threshold(900, 11, 12)
    yield gc.get_threshold()
    gc.set_threshold(*was)


def test_a_check_runs_with_young_collections_spaced_and_puts_the_schedule_back(schedule) -> None:
    target = Watching()
    report = run_check(target, TINY, seed=1)
    assert report.steps > 0 and target.seen
    assert set(target.seen) == {(collector.YOUNG, 11, 12)}  # the older generations' own
    assert gc.get_threshold() == schedule


def test_a_run_that_raises_puts_the_schedule_back(schedule) -> None:
    target = Watching(fail=3)
    with pytest.raises(KeyboardInterrupt):
        run_check(target, TINY, seed=1)
    assert target.seen[-1] == (collector.YOUNG, 11, 12)
    assert gc.get_threshold() == schedule


@pytest.mark.parametrize("young", [0, 50_000])
def test_a_schedule_switched_off_or_sparser_is_left_as_it_is(young: int) -> None:
    was = gc.get_threshold()
    gc.set_threshold(young, 10, 10)
    try:
        target = Watching()
        run_check(target, TINY, seed=1)
        assert set(target.seen) == {(young, 10, 10)}
        assert gc.get_threshold() == (young, 10, 10)
    finally:
        gc.set_threshold(*was)


def test_runs_in_two_threads_put_the_schedule_back_when_the_last_one_ends(schedule) -> None:
    """A run that ends while another is on leaves the spaced schedule to it, though it
    came first; the last one to end puts the process's back (a campaign's worker may run
    checks in threads)."""
    first_in, second_in = threading.Event(), threading.Event()

    def first() -> None:
        with collector.spaced():
            first_in.set()
            second_in.wait(60)

    thread = threading.Thread(target=first)
    thread.start()
    assert first_in.wait(60)
    target = Watching()
    with collector.spaced():  # the second run, in this thread, outlives the first
        second_in.set()
        thread.join(60)
        assert not thread.is_alive()
        run_check(target, TINY, seed=2)
        assert gc.get_threshold() == (collector.YOUNG, 11, 12)
    assert set(target.seen) == {(collector.YOUNG, 11, 12)}
    assert gc.get_threshold() == schedule


def test_bench_measures_its_floor_under_a_checks_schedule(schedule, monkeypatch: pytest.MonkeyPatch) -> None:
    """``hypothesis.floor`` is the floor of every ``check.*`` figure: its machine runs
    under the schedule theirs do."""
    seen: list[tuple[int, int, int]] = []
    real = hypothesis.stateful.run_state_machine_as_test

    def noting(*args: Any, **kwargs: Any) -> None:
        seen.append(gc.get_threshold())
        real(*args, **kwargs)

    monkeypatch.setattr(hypothesis.stateful, "run_state_machine_as_test", noting)
    assert bench.hypothesis_floor(figures.Params(examples=2, steps=3, repeat=1)) > 0
    assert seen == [(collector.YOUNG, 11, 12)]
    assert gc.get_threshold() == schedule

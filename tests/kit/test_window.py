"""Deferred verification (emq_kit/check/window.py): on a server the machine sends a
window's steps as it makes them (or whole, in one pipeline) and judges them afterwards,
and finds what step-by-step verification finds: the same verdict, the same first
diverging step, the same shrunk counterexample."""

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
from tests.livekit import J, flush_url

DEV = dataclasses.replace(PROFILES["dev"], gate=False)


class Counting(LiveTarget):
    """A live target that counts the windows it answered and the calls in them; ``mode``
    ``ahead`` (as ``emq check`` opens it: each call posted as its step is made),
    ``whole`` (a window sent as one batch, as to a driver) or ``stepwise`` (no windows)."""

    def __init__(self, url: str, scripts: str | None = None, *, mode: str = "ahead") -> None:
        super().__init__(url, scripts, observe=True)
        assert self.capabilities.ahead
        if mode != "ahead":
            self.capabilities = dataclasses.replace(self.capabilities, ahead=False,
                                                    batch_max=self.capabilities.batch_max if mode == "whole" else 0)
        self.sent: list[int] = []
        self.posts = 0
        self.ops: set[str] = set()  # the ops windows held

    def post(self, calls: Any) -> None:
        self.posts += 1
        self.ops.update(op for op, _, _ in calls)
        super().post(calls)

    def collect(self) -> Any:
        replies = super().collect()
        self.sent.append(len(replies))
        return replies


def check(url: str, scripts: str | None, *, mode: str, seed: int = 1) -> tuple[Report, Counting]:
    """A run of up to 200 examples: enough to find each variant below."""
    target = Counting(url, scripts, mode=mode)
    try:
        return run_check(target, DEV, seed=seed, examples=200 if scripts else None), target
    finally:
        target.close()


def test_a_conforming_run_is_windowed_and_checks_every_step(valkey) -> None:
    ahead, posting = check(flush_url(valkey), None, mode="ahead", seed=7)
    whole, batching = check(flush_url(valkey), None, mode="whole", seed=7)
    stepwise, plain = check(flush_url(valkey), None, mode="stepwise", seed=7)
    assert ahead.ok and whole.ok and stepwise.ok
    assert not plain.sent and batching.sent and max(batching.sent) > 1  # the window is really used
    # ahead, every step of a window went out on its own before the window was judged;
    # whole, each window went out at once
    assert posting.sent == batching.sent and posting.posts == sum(posting.sent) > batching.posts == len(batching.sent)
    assert {"lane_enqueue", "lane_claim", "claim", "complete"} <= posting.ops == batching.ops  # the lane ops too
    # the same examples and the same checked steps: windowing changes no draw
    for run in (ahead, whole):
        assert (run.examples, run.steps, run.checks) == (stepwise.examples, stepwise.steps, stepwise.checks)
        assert run.hits == stepwise.hits


# Each variant with its calls posted ahead (the built-in client's windows); one sent whole
# too, as a driver's go (the drivers' own tests run those on every port).
@pytest.mark.parametrize(("name", "mode"), [("missing-zrem", "ahead"), ("token-not-checked", "ahead"),
                                            ("state-not-written", "ahead"), ("missing-zrem", "whole")])
def test_a_window_reports_the_divergence_step_by_step_verification_reports(name: str, mode: str, valkey,
                                                                           tmp_path: Path) -> None:
    (variant,) = [v for v in VARIANTS if v.name == name]
    scripts = str(broken_dir(variant, tmp_path))
    windowed, target = check(flush_url(valkey), scripts, mode=mode)
    stepwise, _ = check(flush_url(valkey), scripts, mode="stepwise")
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


def test_calls_posted_ahead_answer_in_order_whatever_scripts_were_flushed_between(valkey) -> None:
    """A SCRIPT FLUSH while a window's calls are out: those that met NOSCRIPT (a suffix
    of them) run again in order, so each snapshot shows exactly the calls before it."""
    target = LiveTarget(flush_url(valkey), observe=True)
    try:
        target.post([("enqueue", "a", {"id": J(1), "payload": b"1"})])
        target.conn.redis.script_flush()  # another connection: before, after or between the first's two
        target.post([("enqueue", "a", {"id": J(2), "payload": b"2"}), ("enqueue", "a", {"id": J(1), "payload": b"3"})])
        replies = target.collect()
        assert [r.answer for r in replies] == ["enqueued", "enqueued", "duplicate"]
        assert [[i for i, _ in r.snapshot.location("pending")] for r in replies] == [[J(1)], [J(1), J(2)], [J(1), J(2)]]
        assert target.collect() == []
    finally:
        target.close()


def test_a_window_left_unread_is_dropped_with_its_connection(valkey) -> None:
    """An example that ends with calls posted and never collected leaves no reply behind
    for the next one to read as its own."""
    target = LiveTarget(flush_url(valkey), observe=True)
    try:
        target.post([("enqueue", "a", {"id": J(1), "payload": b"1"})])
        target.reset()
        target.post([("enqueue", "b", {"id": J(2), "payload": b"2"})])
        (reply,) = target.collect()
        assert reply.answer == "enqueued" and reply.snapshot.row(J(2)) is not None and reply.snapshot.row(J(1)) is None
    finally:
        target.close()

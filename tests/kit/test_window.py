"""Deferred verification (emq_kit/check/window.py): on a server the machine sends a
window's steps as it makes them (or whole, in one pipeline) and judges them afterwards,
and finds what step-by-step verification finds: the same verdict, the same first
diverging step, the same shrunk counterexample."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from emq_kit.check.live import FAULT_OPS, LiveTarget
from emq_kit.check.profiles import PROFILES
from emq_kit.check.run import Report, run_check
from emq_kit.check.signature import signature
from emq_kit.errors import KitBug
from emq_kit.trace.replay import replay
from emq_live.scripts import OrderLost
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
    assert posting.posts == sum(posting.sent) > batching.posts == len(batching.sent)
    assert {"lane_enqueue", "lane_claim", "claim", "complete"} <= batching.ops  # the lane ops too
    # ahead, the operator's faults went in the windows too (a whole window holds calls
    # only), so the same steps took fewer windows
    assert posting.ops == batching.ops | set(FAULT_OPS) and not batching.ops & FAULT_OPS
    assert sum(posting.sent) > sum(batching.sent) and len(posting.sent) < len(batching.sent)
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


def test_a_flush_met_step_by_step_loads_every_script_so_a_later_window_keeps_its_order(valkey) -> None:
    """A call made step by step after a SCRIPT FLUSH loads every script again, not only
    its own: a window posted after it then meets no ``NOSCRIPT`` at one call and runs
    the next (were only the step's scripts loaded, a lane_pause would fail and its
    snapshot run, and sent again the pause would land after the snapshot that should
    show it)."""
    target = LiveTarget(flush_url(valkey), observe=True)
    try:
        target.conn.redis.script_flush()
        assert target.call("a", "enqueue", {"id": J(1), "payload": b"1"}) == "enqueued"
        assert target.snapshot("a").row(J(1)) is not None
        target.post([("lane_pause", "a", {"group": "g"})])
        (reply,) = target.collect()
        assert reply.answer == "ok" and reply.snapshot.paused == ("g",)
    finally:
        target.close()


def test_a_window_whose_calls_met_noscript_here_and_there_ends_unjudged(valkey) -> None:
    """Where another client loaded some of the scripts after a flush, a window's calls
    meet ``NOSCRIPT`` at one call and run at the next: sent again, the first would run
    after the second, so the window is not judged (``OrderLost``)."""
    target = LiveTarget(flush_url(valkey), observe=True)
    try:
        target.conn.redis.script_flush()
        target.conn.redis.script_load(target.conn.scripts["snapshot"].source)  # someone else's load
        target.post([("lane_pause", "a", {"group": "g"})])
        with pytest.raises(OrderLost, match="window cannot be judged"):
            target.collect()
    finally:
        target.close()


def test_the_operators_faults_posted_among_calls_run_in_their_order(valkey) -> None:
    """A fault posted ahead is its commands on the calls' connection, in step order: each
    snapshot after it shows it, a spoil's overwrite included, and its mend, posted once
    the spoil's window was read, puts back what the spoil read."""
    target = LiveTarget(flush_url(valkey), observe=True)
    try:
        target.post([("enqueue", "a", {"id": J(1), "payload": b"1"}),
                     ("stray_key", "a", {"key": "x", "kind": "string"}),
                     ("enqueue", "a", {"id": J(2), "payload": b"2"}),
                     ("forget_row", "a", {"id": J(2)}),
                     ("spoil_key", "a", {"key": "row", "kind": "zset", "id": J(1)}),
                     ("drop_key", "a", {"key": "x"})])
        enq, stray, enq2, forgot, spoil, drop = target.collect()
        assert [r.answer for r in (enq, stray, enq2, forgot, spoil, drop)] == ["enqueued", None, "enqueued", None, None, None]
        row = "emq:{a}:job:" + J(1)
        assert stray.snapshot.stray == ("emq:{a}:x",) and stray.snapshot.row(J(2)) is None
        assert enq2.snapshot.row(J(2)) is not None and forgot.snapshot.row(J(2)) is None
        # the spoiled row is a zset now, outside the grammar: a stray key until mended
        assert spoil.snapshot.row(J(1)) is None and spoil.snapshot.stray == ("emq:{a}:job:" + J(1), "emq:{a}:x")
        assert drop.snapshot.stray == (row,) and target.conn.redis.type(row) == b"zset"
        target.post([("mend_key", "a", {"key": "row", "id": J(1)})])
        (mend,) = target.collect()
        assert mend.answer is None and mend.snapshot.row(J(1)) == enq.snapshot.row(J(1))
    finally:
        target.close()


def test_a_mend_posted_before_its_spoil_was_read_is_a_kit_bug(valkey) -> None:
    """The machine judges a window holding a spoil before it mends: the mend puts back
    the spoil's DUMP, which only that window's replies carry."""
    target = LiveTarget(flush_url(valkey), observe=True)
    try:
        target.post([("enqueue", "a", {"id": J(1), "payload": b"1"}),
                     ("spoil_key", "a", {"key": "pending", "kind": "string"})])
        with pytest.raises(KitBug, match="before its spoil's DUMP was read"):
            target.post([("mend_key", "a", {"key": "pending"})])
    finally:
        target.close()


def test_a_flush_that_a_posted_write_overtook_ends_the_window_unjudged(valkey) -> None:
    """After a SCRIPT FLUSH the calls that met NOSCRIPT run again, in order, unless an
    operator's write sent after them already ran: then the window's order is lost, and
    the run ends as on a lost server (``OrderLost``), never judging it. A write before
    them keeps the order."""
    target = LiveTarget(flush_url(valkey), observe=True)
    try:
        target.post([("stray_key", "a", {"key": "x", "kind": "string"})])
        target.conn.redis.script_flush()
        target.post([("enqueue", "a", {"id": J(1), "payload": b"1"})])
        stray, enq = target.collect()
        assert (stray.answer, enq.answer) == (None, "enqueued") and enq.snapshot.stray
        target.conn.redis.script_flush()
        target.post([("enqueue", "a", {"id": J(2), "payload": b"2"}), ("drop_key", "a", {"key": "x"})])
        with pytest.raises(OrderLost, match="window cannot be judged"):
            target.collect()
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

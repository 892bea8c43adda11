"""A raw call judged by what the server names written (specs/lifecycle.md DEPTH-6) on a
real Valkey: the sweep of every raw call gives, call for call, the verdict the whole judge
gives (every key's DUMP and PTTL before and after the call), in a run that reads whole
and in one that reads by change, on our scripts and on scripts broken for each kind of
finding; a run, deep or not, judges every raw call so and still finds a raw call's
defect."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import emq_live
from emq_kit.check import raw as rawcalls
from emq_kit.check.focus import Focus
from emq_kit.check.live import LiveTarget
from emq_kit.check.machine import Conformance
from emq_kit.check.pools import QUEUES
from emq_kit.check.profiles import PROFILES
from emq_kit.check.raw import CHECK_EDITS, RawJudge
from emq_kit.check.raw.contract import queues_named
from emq_kit.check.run import run_check
from emq_kit.check.target import open_target
from emq_kit.selftest.mutation import check_mutants, copy_scripts
from emq_live.tracking import Tracker
from emq_model.snapshot import Snapshot
from tests.livekit import edited_scripts, flush_url

BEGIN = "local a, err = emq.begin(emq.op)\nif err then return err end\n"
BROKEN = {
    # every enqueue, refused or not, writes a key of its queue before any check
    "touch-first": ("enqueue", BEGIN, 'redis.call("INCR", KEYS[1] .. ":touched")\n' + BEGIN),
    # a refused enqueue writes a key of its queue (CC-5: a refused call writes nothing)
    "touch-on-refusal": ("enqueue", BEGIN, 'local a, err = emq.begin(emq.op)\n'
                         'if err then redis.call("INCR", (KEYS[1] or "emq:{none}:x") .. ":touched") return err end\n'),
    # an accepted complete writes a key of no queue (CC-1: a call writes its own queue's keys)
    "write-elsewhere": ("complete", BEGIN, BEGIN + 'redis.call("INCR", "emq:elsewhere")\n'),
}


# an accepted complete writes a key of no queue with the bytes it held after the first time
REWRITE = ("complete", BEGIN, BEGIN + 'redis.call("SET", "emq:elsewhere", "1")\n')


def scripts_of(case: str, into: Path) -> str | None:
    if case == "ours":
        return None
    if case in BROKEN:
        return edited_scripts(into, *BROKEN[case])
    mutant = dict(zip((e.name for e in CHECK_EDITS), check_mutants()))[case]
    return str(copy_scripts(into, mutant.script, mutant.apply))


MODES = ("whole", "keys", "change")
"""Every key's DUMP (no reader); the keys named written in a run that reads whole; and in
one that reads by change, its queue's snapshot read so too."""


def verdicts(url: str, scripts: str | None, mode: str,
             kinds: tuple[str, ...] = tuple(rawcalls.KINDS)) -> tuple[list[tuple[str, str | None]], int]:
    """The sweep's calls of ``kinds`` judged in ``mode`` with each one's finding (``what``,
    None when it passed), every queue a call names handed out first as the machine does
    (``RawCalls.send_raw``); and how many whole fingerprints the judge took."""
    target = LiveTarget(url, scripts)
    try:
        assert target.read_changes(mode == "change") == (mode == "change")
        judge = RawJudge(target.conn, match="emq:*", reader=None if mode == "whole" else target,
                         by_change=mode == "change")
        whole = [0]
        fingerprint = judge.fingerprint

        def counted() -> Any:
            whole[0] += 1
            return fingerprint()

        judge.fingerprint = counted  # type: ignore[method-assign]

        def send(call: rawcalls.RawCall) -> Any:
            for name in queues_named(call):
                target.queue(name)
            return judge.send(call)

        return [(str(call), None if f is None else f.what) for call, f in rawcalls.sweep(judge, kinds=kinds, send=send)], whole[0]
    finally:
        target.close()


@pytest.mark.parametrize("case", ["ours", "decimal-leading-zero", "id-bound-off", *BROKEN])
def test_the_sweep_judged_by_change_gives_the_whole_judges_verdicts(case: str, valkey: Any, tmp_path: Path) -> None:
    scripts = scripts_of(case, tmp_path)
    # Past a finding the server clock's calls (their TIME) make two sweeps differ: they go
    # in the sweep of our scripts only, which finds nothing.
    kinds = tuple(rawcalls.KINDS) if case == "ours" else tuple(k for k in rawcalls.KINDS if k != "server-clock")
    whole, fingerprints = verdicts(flush_url(valkey), scripts, "whole", kinds)
    assert fingerprints > 600
    for mode in MODES[1:]:
        judged, none = verdicts(flush_url(valkey), scripts, mode, kinds)
        assert none == 0
        assert [c for c, _ in judged] == [c for c, _ in whole]
        assert judged == whole, (mode, [(c, w, g) for (c, w), (_, g) in zip(whole, judged) if w != g][:5])
    found = {what for _, what in whole if what is not None}
    assert bool(found) == (case != "ours"), found
    if case in BROKEN:  # the finding only a judge of keys gives
        assert "keyspace" in found or "snapshot" in found, found


RAW_AND_SOME = frozenset({"raw", "claim", "complete", "enqueue_many"})  # many raw calls an example


@pytest.mark.parametrize("depth", [0, 40])
def test_a_run_judges_its_raw_calls_by_the_keys_named_and_finds_an_edit(depth: int, valkey: Any, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """No raw call of a run on a server takes the whole fingerprint (O(depth), DEPTH-5),
    deep or not, on our scripts (which conform) and on an enqueue that writes when it
    refuses."""
    def whole(self: RawJudge) -> Any:
        raise AssertionError("a raw call on a server was judged by every key")

    monkeypatch.setattr(RawJudge, "fingerprint", whole)
    dev = PROFILES["dev"]
    for scripts, conforms in ((None, True), (scripts_of("touch-on-refusal", tmp_path), False)):
        target = open_target(flush_url(valkey), scripts)
        try:
            report = run_check(target, dev, seed=2, examples=12, steps=30,
                               focus=Focus(ops=RAW_AND_SOME, report=False, depth=depth))
        finally:
            target.close()
        assert report.op_mix["raw"] > 0, report.op_mix
        assert report.ok == conforms, report.detail
        if not conforms:
            assert report.divergence is not None and report.divergence.step.op in ("raw", "spoiled")


# a claim that moves its job to active and leaves its row's state pending
STATE_LEFT = ("claim", 'redis.call("HSET", row, "state", emq.states.active)',
              'redis.call("HSET", row, "state", emq.states.pending)')


def test_a_deep_runs_raw_calls_are_held_to_the_model_by_change(valkey: Any, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """DEPTH-6: in a run that reads by change, a raw call's snapshots are held equal by the
    two sides' changes (INC-4): no raw step compares a machine queue's two snapshots whole
    (a cost that grows with the depth; a queue beyond them is the judge's own, empty at the
    call); and a raw claim that leaves its row's state as it was is still found there."""
    in_raw: list[bool] = []
    whole: list[bool] = []
    send_raw, equal = Conformance.send_raw, Snapshot.__eq__

    def sent(self: Any, call: Any) -> None:
        in_raw.append(True)
        try:
            send_raw(self, call)
        finally:
            in_raw.pop()

    def compared(self: Snapshot, other: object) -> Any:
        if self.queue in QUEUES:
            whole.extend(in_raw[-1:])
        return equal(self, other)

    monkeypatch.setattr(Conformance, "send_raw", sent)
    monkeypatch.setattr(Snapshot, "__eq__", compared)
    for scripts, conforms in ((None, True), (edited_scripts(tmp_path, *STATE_LEFT), False)):
        whole.clear()
        target = open_target(flush_url(valkey), scripts)
        try:
            report = run_check(target, PROFILES["dev"], seed=3, examples=12, steps=30,
                               focus=Focus(ops=frozenset({"raw"}), report=False, depth=40))
        finally:
            target.close()
        assert report.ok == conforms, report.detail
        if conforms:
            assert report.op_mix["raw"] > 20 and not whole, report.op_mix
        else:
            assert report.divergence is not None and report.divergence.step.op == "raw", report.detail


def test_a_write_of_the_bytes_a_key_held_is_named_by_change_only(valkey: Any, tmp_path: Path) -> None:
    """DEPTH-6: by change a call is held to CC-1 as written (the server named the key
    written), by a fingerprint to its effect (the same bytes): every call the whole judge
    finds, the change judge finds too, and the rewrites besides."""
    scripts = edited_scripts(tmp_path, *REWRITE)
    kinds = tuple(k for k in rawcalls.KINDS if k != "server-clock")
    whole, _ = verdicts(flush_url(valkey), scripts, "whole", kinds)
    found = {c for c, what in whole if what is not None}
    for mode in MODES[1:]:
        judged, _ = verdicts(flush_url(valkey), scripts, mode, kinds)
        named = {c for c, what in judged if what == "keyspace"}
        assert found and found < named, mode


def test_a_prefix_over_watched_ones_takes_their_place(valkey: Any) -> None:
    """The server refuses overlapping prefixes: ``emq:`` over ``emq:{a}:`` restarts the
    tracking with it alone, and a prefix under it is watched already."""
    conn = emq_live.connect(flush_url(valkey))
    client = conn.redis
    tracker = Tracker(client)
    try:
        tracker.watch("emq:{a}:")
        tracker.watch("emq:")
        tracker.watch("emq:{c}:")
        assert tracker.prefixes == ["emq:"]
        client.set("emq:{a}:x", 1)
        client.set("emq:{b}:y", 1)
        client.set("elsewhere", 1)
        assert tracker.touched() == {"emq:{a}:x", "emq:{b}:y"}
    finally:
        tracker.close()
        conn.close()

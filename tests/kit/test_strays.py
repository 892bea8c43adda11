"""Stray keys: an operator writes keys under a queue's prefix just
outside the grammar (``faults.STRAY_KEYS``); every snapshot reports exactly those keys as
stray, on the model, the embedded fakeredis (read from memory), snapshot.lua on Valkey and
Redis 7, and a driver; the calls between answer as if they were not there; the trace
step is validated and replayed."""

from __future__ import annotations

import dataclasses
import itertools
import json
from pathlib import Path
from typing import Any, Iterator

import pytest

from emq_kit.check import faults
from emq_kit.check.live import LiveTarget
from emq_kit.check.machine import Conformance
from emq_kit.check.model_target import ModelTarget
from emq_kit.check.names import Names, new_suffix, with_names
from emq_kit.check.profiles import Profile
from emq_kit.check.run import run_check
from emq_kit.check.step import Divergence
from emq_kit.check.tally import Run
from emq_kit.trace.format import step_of_json
from emq_kit.trace.replay import replay
from emq_kit.trace.validate import TraceError, check_trace
from emq_model import errors, keyspace
from emq_model.model import QueueModel
from tests.livekit import J, flush_url

Q = "q"


@pytest.fixture(params=["fakeredis", "valkey", "redis"])
def target(request: pytest.FixtureRequest) -> Iterator[LiveTarget]:
    """The kit's live target on each backend (fakeredis reads its snapshot from memory,
    the servers through snapshot.lua)."""
    url = None if request.param == "fakeredis" else flush_url(
        request.getfixturevalue("valkey" if request.param == "valkey" else "redis_server"))
    t = LiveTarget(url, observe=url is not None)
    t.queue(Q)
    yield t
    t.close()


def test_the_stray_keys_are_outside_the_grammar_and_the_grammar_keys_are_not() -> None:
    for key in faults.STRAY_KEYS:
        assert keyspace.outside(Q, keyspace.prefix(Q) + key), key
    inside = [*keyspace.KINDS, *keyspace.LANE_KINDS, "job:" + J(1), "job:x", "g:a:pending", "g:" + "g" * 64 + ":pending"]
    for key in inside:
        assert not keyspace.outside(Q, keyspace.prefix(Q) + key), key
    assert not keyspace.outside(Q, "emq:{other}:x")


@pytest.mark.parametrize("key", ["pending", "job:" + J(1), "g:a:pending", "ring", 7, None])
def test_the_model_refuses_a_stray_key_the_grammar_names(key: Any) -> None:
    model = QueueModel(Q)
    with pytest.raises(errors.ArgError):
        model.write_stray(key)
    assert model.snapshot() == QueueModel(Q).snapshot()


@pytest.mark.parametrize("key", faults.STRAY_KEYS)
def test_each_stray_key_of_each_type_is_reported_alone_and_then_gone(target: LiveTarget, key: str) -> None:
    model = QueueModel(Q)
    model.enqueue(J(1), b"a")
    target.call(Q, "enqueue", {"id": J(1), "payload": b"a"})
    for kind in faults.KINDS:
        for side, write in ((model, lambda: model.write_stray(key)), (target, lambda: target.stray_key(Q, key, kind))):
            write()
        theirs = target.snapshot(Q)
        assert theirs.stray == (keyspace.prefix(Q) + key,), kind
        assert theirs == model.snapshot(), kind
        model.drop_stray(key)
        target.drop_key(Q, key)
        assert target.snapshot(Q) == model.snapshot() and not target.snapshot(Q).stray


def test_two_stray_keys_at_once_are_both_reported(target: LiveTarget) -> None:
    """snapshot.lua appends every stray key it meets (a reply that kept only the last would
    pass every test of one)."""
    model = QueueModel(Q)
    for a, b in itertools.combinations(faults.STRAY_KEYS[:4], 2):
        for key in (a, b):
            model.write_stray(key)
            target.stray_key(Q, key, "hash")
        assert target.snapshot(Q) == model.snapshot()
        assert len(target.snapshot(Q).stray) == 2
        for key in (a, b):
            model.drop_stray(key)
            target.drop_key(Q, key)


def test_the_calls_answer_as_if_the_stray_keys_were_not_there(target: LiveTarget) -> None:
    model = QueueModel(Q)
    for key in faults.STRAY_KEYS:
        model.write_stray(key)
        target.stray_key(Q, key, "zset")
    calls = [("enqueue", {"id": J(1), "payload": b"a"}), ("lane_enqueue", {"id": J(2), "payload": b"b", "group": "a"}),
             ("claim", {"lease_ms": 5, "now": 10}), ("lane_claim", {"lease_ms": 5, "now": 10}),
             ("complete", {"id": J(1), "token": 1}), ("counts", {})]
    for op, args in calls:
        mine = getattr(model, op)(**args)
        assert target.call(Q, op, args) == mine, op
        assert target.snapshot(Q) == model.snapshot(), op


def test_a_target_refuses_to_write_a_grammar_key_as_a_stray_one(target: LiveTarget) -> None:
    with pytest.raises(errors.ArgError):
        target.stray_key(Q, "pending", "string")
    assert target.snapshot(Q) == QueueModel(Q).snapshot()


def test_the_machine_writes_strays_and_a_snapshot_that_misses_one_diverges() -> None:
    """The rule runs in an ordinary check, and a target whose snapshot forgets a stray
    key when there are two is caught as INV-8 (what snapshot.lua's ``stray[#stray + 0]``
    mutant does)."""
    report = run_check(ModelTarget(), Profile("s", examples=60, steps=40, gate=False), seed=3)
    assert report.detail == "no-divergence"
    assert report.op_mix["stray_key"] > 0 and report.op_mix["drop_key"] > 0

    class Forgetful(ModelTarget):
        def snapshot(self, name: str) -> Any:
            snap = super().snapshot(name)
            return dataclasses.replace(snap, stray=snap.stray[-1:])

    machine = Conformance.factory(Forgetful(), Run())()
    queue = machine.queues[0]
    machine.inject(queue, "stray_key", {"key": "job:", "kind": "hash"})
    with pytest.raises(Divergence, match="INV-8"):
        machine.inject(queue, "stray_key", {"key": "x", "kind": "string"})


def _trace(steps: list[dict[str, Any]]) -> dict[str, Any]:
    """The corpus's first trace with its steps replaced (a header the loader accepts)."""
    base = json.loads((Path(__file__).parents[1] / "corpus" / "retry-two-sets.json").read_text("utf-8"))
    return {**base, "steps": [{"i": n + 1, "model": None, "target": None, **s} for n, s in enumerate(steps)]}


STRAY_STEPS = [{"queue": "alpha", "op": "enqueue", "args": {"id": J(1), "payload": {"$bytes": "YQ=="}},
                "model": "enqueued", "target": "enqueued"},
               {"queue": "alpha", "op": "stray_key", "args": {"key": "job:", "kind": "hash"}},
               {"queue": "alpha", "op": "stray_key", "args": {"key": "g::pending", "kind": "zset"}},
               {"queue": "alpha", "op": "drop_key", "args": {"key": "job:"}}]


def test_a_trace_step_names_a_stray_key_outside_the_grammar() -> None:
    check_trace(_trace(STRAY_STEPS))
    for args, where in (({"key": "pending", "kind": "hash"}, "args/key"), ({"key": "x", "kind": "blob"}, "args/kind"),
                        ({"key": "x"}, "args")):
        with pytest.raises(TraceError, match=f"steps/1/{where}"):
            check_trace(_trace([STRAY_STEPS[0], {**STRAY_STEPS[1], "args": args}]))


@pytest.mark.parametrize("backend", ["fakeredis", "valkey"])
def test_a_trace_with_stray_keys_replays_and_a_forgetful_snapshot_diverges(backend: str,
                                                                          request: pytest.FixtureRequest) -> None:
    url = None if backend == "fakeredis" else flush_url(request.getfixturevalue("valkey"))
    steps = [step_of_json(s) for s in _trace(STRAY_STEPS)["steps"]]
    target = LiveTarget(url)
    try:
        done = replay(steps, target)
    finally:
        target.close()
    assert done.conforms, done.divergence
    assert len(done.steps) == len(steps)


def test_a_run_under_suffixed_names_writes_its_strays_under_the_server_names(valkey: Any) -> None:
    """``emq check --url`` runs its queues under per-run names (``Renamed``): the stray
    key goes under the server's name and is told back in the machine's."""
    inner = LiveTarget(flush_url(valkey), observe=True)
    names = Names(new_suffix(), ["alpha"])
    target = with_names(inner, names, ["alpha"])
    try:
        target.queue("alpha")
        target.stray_key("alpha", "job:", "hash")
        assert target.snapshot("alpha").stray == ("emq:{alpha}:job:",)
        assert inner.conn.redis.exists(keyspace.prefix(names.server("alpha")) + "job:") == 1
        assert inner.conn.redis.exists("emq:{alpha}:job:") == 0
        target.drop_key("alpha", "job:")
        assert target.snapshot("alpha").stray == ()
    finally:
        target.close()

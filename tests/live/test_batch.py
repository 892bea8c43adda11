"""Batches (lifecycle.md §6 "Batches", B-1..B-4): ``enqueue_many``, ``claim_many`` and
``complete_many`` are the per-item loop of their op.

- The model's batch equals the loop of single calls on a second model: same answers, same
  ``last_dropped``, same snapshot (the definition, B-2).
- The live batch (one script call) equals the model's, answer per item and whole snapshot
  after every call, on fakeredis, Valkey and Redis 7, for random programs that mix batches
  with the single ops that make tokens stale and leave orphans.
- A batch with one bad item is refused whole, with the code of the first check that fails
  (B-1), and changes nothing; the scripts called directly refuse malformed ARGV alike.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from emq_model import errors, invariants, keyspace, spec
from emq_model.model import QueueModel
from tests.livekit import J, dump, lockstep

NOW = 1_000
MOST = spec.LIMITS["limit_max"]
ids = st.integers(1, 12).map(J)
tokens = st.integers(1, 4)
payloads = st.binary(max_size=6)

# One step of a program: a batch, or a single op that stirs the state batches meet
# (stale tokens after a reap, late acks from pending, orphans for claim to drop).
steps = st.one_of(
    st.tuples(st.just("enqueue_many"), st.lists(st.tuples(ids, payloads), min_size=1, max_size=6)),
    st.tuples(st.just("claim_many"), st.integers(1, 5), st.integers(1, 20)),
    st.tuples(st.just("complete_many"), st.lists(st.tuples(ids, tokens), min_size=1, max_size=6)),
    st.tuples(st.just("claim"), st.integers(1, 20)),
    st.tuples(st.just("reap"), st.integers(0, 30)),
    st.tuples(st.just("forget_row"), ids),
)


def single_loop(model: QueueModel, op: str, *args: Any, now: int) -> Any:
    """The batch ``op`` as the loop of its single op (B-2), on ``model``."""
    if op == "enqueue_many":
        return [model.enqueue(job, payload) for job, payload in args[0]]
    if op == "complete_many":
        out = []
        for job, token in args[0]:
            try:
                out.append(model.complete(job, token))
            except errors.EmqError as err:
                out.append(err)
        return out
    n, lease = args
    jobs, dropped = [], []
    for _ in range(n):
        job = model.claim(lease, now=now)
        dropped += model.last_dropped
        if job is None:
            break
        jobs.append(job)
    model.last_dropped = tuple(dropped)
    return jobs


def apply(target: Any, step: tuple, now: int) -> Any:
    """Run one program step on a ``QueueModel`` or a live queue."""
    op, *args = step
    if op == "claim_many":
        return target.claim_many(*args, now=now)
    if op == "claim":
        return target.claim(args[0], now=now)
    if op == "reap":
        return target.reap(now=now + args[0])
    if op == "forget_row":
        return target.forget_row(args[0])
    return getattr(target, op)(*args)


@given(program=st.lists(steps, max_size=25))
@settings(max_examples=150, deadline=None)
def test_the_models_batches_are_the_loop_of_single_calls(program: list[tuple]) -> None:
    batched, looped = QueueModel("q"), QueueModel("q")
    for step in program:
        op = step[0]
        want = single_loop(looped, op, *step[1:], now=NOW) if op in spec.BATCHES else apply(looped, step, NOW)
        assert apply(batched, step, NOW) == want, step
        assert batched.last_dropped == looped.last_dropped
        assert batched.snapshot() == looped.snapshot()



@given(program=st.lists(steps, min_size=1, max_size=25))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
def test_live_batches_equal_the_model(live, program: list[tuple]) -> None:
    """One script call per batch, checked per item and on the whole snapshot."""
    previous = None
    for step, snap, forgotten in lockstep(live, "b", program, lambda side, step: outcome(apply, side, step),
                                       ("claim", "claim_many")):
        made = [v for v in invariants.check_invariants(snap, previous) if not (v.id in forgotten and "orphan member" in v.seen)]
        assert made == [], step
        previous = snap


def outcome(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args, NOW)
    except errors.EmqError as err:
        return err


def test_a_batch_answers_every_item_in_order(live) -> None:
    q, m = live.conn.queue("o"), QueueModel("o")
    jobs = [(J(n), b"p%d" % n) for n in (5, 3, 9, 3)]
    for side in (q, m):
        assert side.enqueue_many(jobs) == ["enqueued", "enqueued", "enqueued", "duplicate"]
        claimed = side.claim_many(5, 10, now=NOW)
        assert [(c.id, c.payload, c.token) for c in claimed] == [(J(3), b"p3", 1), (J(5), b"p5", 1), (J(9), b"p9", 1)]
        answers = side.complete_many([(J(3), 1), (J(3), 1), (J(5), 2), (J(9), 1), (J(4), 1)])
        assert answers[:2] == ["ok", "gone"] and answers[3:] == ["ok", "gone"]
        assert isinstance(answers[2], errors.StaleError)  # refused in place; the next item ran
    assert q.snapshot() == m.snapshot()
    assert q.counts() == {"pending": 0, "active": 1, "schedule": 0, "dead": 0}
    assert m.snapshot().completed == 2


def test_claim_many_drops_orphans_and_stops_when_empty(live) -> None:
    q, m = live.conn.queue("d"), QueueModel("d")
    for side in (q, m):
        side.enqueue_many([(J(n), b"") for n in (1, 2, 3, 4)])
    for job in (J(1), J(3)):
        m.forget_row(job)
        live.redis.delete(keyspace.job_key("d", job))
    for side in (q, m):
        assert [c.id for c in side.claim_many(10, 5, now=NOW)] == [J(2), J(4)]
        assert side.last_dropped == (J(1), J(3))
        assert side.claim_many(10, 5, now=NOW) == [] and side.last_dropped == ()
    assert q.snapshot() == m.snapshot()


BAD_BATCHES = [
    ("enqueue_many", [], errors.ArgError),
    ("enqueue_many", [(J(1), b"")] * (MOST + 1), errors.ArgError),
    ("enqueue_many", "JOB00000000001", errors.ArgError),
    ("enqueue_many", [(J(1),)], errors.ArgError),
    ("enqueue_many", [(J(1), b""), ("JOB", b"")], errors.KindError),
    ("enqueue_many", [(J(1), 7), ("ORD00000000001", b"")], errors.KindError),  # ids before other arguments
    ("enqueue_many", [(J(1), b""), (J(2), 7)], errors.ArgError),
    ("complete_many", [(J(1), 1), (J(2), 0)], errors.ArgError),
    ("complete_many", [(J(1), True)], errors.ArgError),
    ("complete_many", [(J(1), "1"), ("JOBzzzzzzzzzzz", 1)], errors.KindError),
]


@pytest.mark.parametrize("op, items, code", BAD_BATCHES, ids=lambda v: v if isinstance(v, str) else None)
def test_a_bad_item_refuses_the_whole_batch(live, op: str, items: Any, code: type) -> None:
    q, m = live.conn.queue("r"), QueueModel("r")
    for side in (q, m):
        side.enqueue_many([(J(1), b"x")])
        side.claim(5, now=NOW)
    before = dump(live.redis)
    for side in (q, m):
        with pytest.raises(code):
            getattr(side, op)(items)
    assert dump(live.redis) == before
    assert q.snapshot() == m.snapshot()


@pytest.mark.parametrize("n, lease", [(0, 5), (MOST + 1, 5), (1, 0), (True, 5), (2, None)])
def test_claim_many_refuses_bad_arguments(live, n: Any, lease: Any) -> None:
    q, m = live.conn.queue("c"), QueueModel("c")
    for side in (q, m):
        side.enqueue_many([(J(1), b"x")])
        with pytest.raises(errors.ArgError):
            side.claim_many(n, lease, now=NOW)
    assert q.snapshot() == m.snapshot() and m.counts()["pending"] == 1


KEYS6 = keyspace.queue_keys("w")

WIRE = [
    ("enqueue_many", KEYS6, [], errors.ArgError),
    ("enqueue_many", KEYS6, [J(1)], errors.ArgError),  # not a whole item
    ("enqueue_many", KEYS6, [J(1), "p", J(2)], errors.ArgError),
    ("enqueue_many", KEYS6 + [f"emq:{{w}}:job:{J(1)}"], [J(1), "p"], errors.ArgError),  # no row key
    ("enqueue_many", KEYS6[:5], [J(1), "p"], errors.ArgError),
    ("enqueue_many", keyspace.queue_keys("x")[:1] + KEYS6[1:], [J(1), "p"], errors.ArgError),
    ("enqueue_many", KEYS6[::-1], [J(1), "p", "JOB", "p"], errors.KindError),  # ids before keys
    ("enqueue_many", KEYS6, [J(1), "p"] * (MOST + 1), errors.ArgError),
    ("complete_many", KEYS6, [J(1), "1", J(2), "01"], errors.ArgError),
    ("complete_many", KEYS6, [J(1), "x", "JOB", "1"], errors.KindError),
    ("claim_many", KEYS6, ["2"], errors.ArgError),
    ("claim_many", KEYS6, ["0", "5", "1000"], errors.ArgError),
    ("claim_many", KEYS6, ["2", "5", "-1"], errors.ArgError),
    ("claim_many", KEYS6, ["10001", "5"], errors.ArgError),
]


@pytest.mark.parametrize("op, keys, argv, code", WIRE)
def test_batch_scripts_called_directly_refuse_malformed_calls(live, op: str, keys: list[str], argv: list[str],
                                                              code: type) -> None:
    q = live.conn.queue("w")
    q.enqueue_many([(J(1), b"x"), (J(2), b"y")])
    q.claim(5, now=NOW)
    before = dump(live.redis)
    with pytest.raises(code):
        live.conn.scripts.run(live.redis, op, keys, argv)
    assert dump(live.redis) == before


def test_batch_scripts_reply_per_item_on_the_wire(live) -> None:
    run = live.conn.scripts.run
    assert run(live.redis, "enqueue_many", KEYS6, [J(1), "a", J(2), "b", J(1), "c"]) == [
        b"enqueued", b"enqueued", b"duplicate"]
    assert run(live.redis, "claim_many", KEYS6, ["3", "5", "1000"]) == [[J(1).encode(), b"a", 1, J(2).encode(), b"b", 1],
                                                                       []]
    reply = run(live.redis, "complete_many", KEYS6, [J(1), "1", J(2), "9"])
    assert reply[0] == b"ok" and reply[1].startswith(b"EMQSTALE ")

"""CC-8, no partial writes under a wrong-typed key: for every op and every key it touches
(its ``touches`` in transitions.json; a row it would take for claim, promote and reap),
that key made a string, list, set, hash, sorted set and stream in turn (each type but
the grammar's), the call is refused with ``EMQTYPE`` and every key of the server is
byte for byte unchanged (DUMP + PTTL) — on fakeredis, Valkey and Redis. The model,
with that key spoiled (``QueueModel.spoil``), predicts the same refusal."""

from __future__ import annotations

from typing import Any, Callable

import pytest

from emq_model import errors, keyspace, spec
from emq_model.model import QueueModel
from tests.livekit import J, dump

Q = "t"
NOW = 1000
LATE = 10**9
ACTIVE, PENDING, DEAD, SCHEDULED, NEW = J(1), J(2), J(3), J(4), J(9)

MAKE: dict[str, Callable[[Any, str], Any]] = {
    "string": lambda r, k: r.set(k, "x"),
    "list": lambda r, k: r.rpush(k, "x"),
    "set": lambda r, k: r.sadd(k, "x"),
    "hash": lambda r, k: r.hset(k, "x", "y"),
    "zset": lambda r, k: r.zadd(k, {"x": 1}),
    "stream": lambda r, k: r.xadd(k, {"x": "y"}),
}

# op -> (the call on a queue, the row ids behind "row"/"rows")
CALLS: dict[str, tuple[Callable[[Any], Any], list[str]]] = {
    "enqueue": (lambda q: q.enqueue(NEW, b"x"), [NEW]),
    "schedule": (lambda q: q.schedule(NEW, b"x", delay_ms=5, now=NOW), [NEW]),
    "claim": (lambda q: q.claim(100, now=NOW), [PENDING]),
    "complete": (lambda q: q.complete(ACTIVE, 2), [ACTIVE]),
    "retry": (lambda q: q.retry(ACTIVE, 2, delay_ms=5, max_attempts=9, error="e", now=NOW), [ACTIVE]),
    "extend": (lambda q: q.extend(ACTIVE, 2, 100, now=NOW), [ACTIVE]),
    "promote": (lambda q: q.promote(now=LATE), [SCHEDULED]),
    "reap": (lambda q: q.reap(now=LATE, max_attempts=1), [ACTIVE]),
    "reprocess": (lambda q: q.reprocess(DEAD), [DEAD]),
    "remove": (lambda q: q.remove(PENDING), [PENDING]),
    "browse": (lambda q: q.browse(5), []),
    "counts": (lambda q: q.counts(), []),
    "state": (lambda q: q.state(PENDING), [PENDING]),
    "job": (lambda q: q.job(PENDING), [PENDING]),
    "enqueue_many": (lambda q: q.enqueue_many([(J(8), b"x"), (NEW, b"y")]), [J(8), NEW]),
    "claim_many": (lambda q: q.claim_many(2, 100, now=NOW), [PENDING]),
    "complete_many": (lambda q: q.complete_many([(PENDING, 1), (ACTIVE, 2)]), [PENDING, ACTIVE]),
}


def cases() -> list[tuple[str, str, str | None]]:
    """(op, key name, row id) for every key every op touches."""
    out = []
    for op, (_, ids) in CALLS.items():
        of = spec.BATCHES[op]["of"] if op in spec.BATCHES else op
        for name in spec.OPS[of]["touches"]:
            if name == "lanes":
                continue  # a grouped job's lane keys: test_a_wrong_typed_lane_key_...
            if name in ("row", "rows"):
                out += [(op, "row", i) for i in ids]
            else:
                out.append((op, name, None))
    return out


def populate(q: Any) -> None:
    """DEAD in dead, ACTIVE active with token 2, PENDING pending (the lowest), SCHEDULED
    due at 10: every location and both counters exist."""
    q.enqueue(DEAD, b"d")
    q.claim(100, now=0)
    q.retry(DEAD, 1, delay_ms=0, max_attempts=1, error="e", now=0)
    q.enqueue(ACTIVE, b"a")
    q.claim(1, now=0)
    q.reap(now=5)
    q.claim(100, now=NOW)
    q.enqueue(J(5), b"c")
    q.claim(100, now=0)
    q.complete(J(5), 1)
    q.enqueue(PENDING, b"p")
    q.schedule(SCHEDULED, b"s", run_at=10, now=0)


def key_of(name: str, row: str | None) -> str:
    if row is not None:
        return keyspace.job_key(Q, row)
    return keyspace.queue_key(Q, next(k for k in keyspace.KINDS if k.split(":")[-1] == name))


@pytest.mark.parametrize("op, name, row", cases())
def test_a_wrong_typed_key_is_refused_and_changes_nothing(live: Any, op: str, name: str, row: str | None) -> None:
    q = live.conn.queue(Q)
    populate(q)
    model = QueueModel(Q)
    populate(model)
    assert model.snapshot() == q.snapshot()
    key = key_of(name, row)
    call = CALLS[op][0]
    model.spoil(name, row)
    with pytest.raises(errors.WrongTypeError):
        call(model)
    for kind, make in MAKE.items():
        if kind == keyspace.KEY_TYPES[name]:
            continue
        live.redis.delete(key)
        make(live.redis, key)
        before = dump(live.redis)
        with pytest.raises(errors.WrongTypeError) as refused:
            call(q)
        assert key in str(refused.value) or op in ("browse", "job")
        assert dump(live.redis) == before, f"{op} wrote under a {kind} at {key}"
    assert model.snapshot() == q.snapshot()  # the spoiled key is stray on both sides


# Lanes (lifecycle.md §10), all in lane "g": GA active with token 1, GP pending, GS
# scheduled (due at NOW + 5), GD dead.
GA, GP, GS, GD = J(21), J(22), J(23), J(24)
LANE_KEYS = ("lane", "ring", "paused", "glimit", "gactive")
"""What "lanes" stands for in an op's touches: the lane of a grouped job the op takes
and the fixed lane keys its place on the ring depends on."""

LANE_CALLS: dict[str, Callable[[Any], Any]] = {
    "lane_enqueue": lambda q: q.lane_enqueue(NEW, b"x", "g"),
    "lane_claim": lambda q: q.lane_claim(100, now=NOW),
    "lane_wclaim": lambda q: q.lane_wclaim(100, now=NOW),
    "lane_pause": lambda q: q.lane_pause("g"),
    "lane_resume": lambda q: q.lane_resume("g"),
    "lane_limit": lambda q: q.lane_limit("g", 3),
    "lane_weight": lambda q: q.lane_weight("g", 3),
    "complete": lambda q: q.complete(GA, 1),
    "retry": lambda q: q.retry(GA, 1, delay_ms=5, max_attempts=9, error="e", now=NOW),
    "reap": lambda q: q.reap(now=LATE),
    "promote": lambda q: q.promote(now=LATE),
    "reprocess": lambda q: q.reprocess(GD),
    "remove": lambda q: q.remove(GP),
    "state": lambda q: q.state(GP),
}


def lane_cases() -> list[tuple[str, str]]:
    """(op, lane key name) for every lane key a lane op or a group-aware op touches."""
    out = []
    for op in LANE_CALLS:
        touches = spec.entry(op)["touches"]
        names = [n for n in touches if n in keyspace.KEY_TYPES and n in LANE_KEYS + ("gweight",)]
        out += [(op, n) for n in (LANE_KEYS if "lanes" in touches else ()) + tuple(names) if (op, n) not in out]
    return out


@pytest.mark.parametrize("op, name", lane_cases())
def test_a_wrong_typed_lane_key_is_refused_and_changes_nothing(live: Any, op: str, name: str) -> None:
    """CC-8 for lanes: a lane key of another type refuses the call before any write; the
    model, with that key spoiled, predicts the refusal."""
    q = live.conn.queue(Q)
    model = QueueModel(Q)
    for side in (q, model):
        for job, most in ((GS, 9), (GD, 1)):
            side.lane_enqueue(job, b"s", "g")
            side.lane_claim(100, now=0)
            side.retry(job, 1, delay_ms=NOW, max_attempts=most, error="e", now=5)
        side.lane_enqueue(GA, b"a", "g")
        side.lane_claim(100, now=NOW)
        side.lane_enqueue(GP, b"p", "g")
    assert model.snapshot() == q.snapshot()
    model.spoil(name, group="g" if name == "lane" else None)
    with pytest.raises(errors.WrongTypeError):
        LANE_CALLS[op](model)
    key = keyspace.lane_key(Q, "g") if name == "lane" else keyspace.lane_keys(Q)[name]
    for kind, make in MAKE.items():
        if kind == keyspace.KEY_TYPES[name]:
            continue
        saved = live.redis.dump(key)
        live.redis.delete(key)
        make(live.redis, key)
        before = dump(live.redis)
        with pytest.raises(errors.WrongTypeError) as refused:
            LANE_CALLS[op](q)
        assert key in str(refused.value)
        assert dump(live.redis) == before, f"{op} wrote under a {kind} at {key}"
        live.redis.delete(key)
        if saved is not None:
            live.redis.restore(key, 0, saved)
    model.mend(name, group="g" if name == "lane" else None)
    assert model.snapshot() == q.snapshot()  # the key's content is back on both sides


def test_every_touched_key_of_every_op_is_covered() -> None:
    assert {op for op, _, _ in cases()} == set(spec.OPS) | set(spec.BATCHES)
    assert set(spec.LANE_OPS) <= {op for op, _ in lane_cases()}
    assert {op for op in spec.OPS if "lanes" in spec.OPS[op]["touches"]} <= set(LANE_CALLS)
    assert all(spec.OPS[op]["touches"] for op in spec.OPS)
    assert all(errors.TYPE in spec.OPS[op]["refusals"] for op in spec.OPS)


def test_a_claim_refuses_before_dropping_orphans_when_a_later_row_is_spoiled(live: Any) -> None:
    """The orphan below the spoiled row is not dropped: claim plans before it writes."""
    q = live.conn.queue(Q)
    q.enqueue(J(1), b"a")
    q.enqueue(J(2), b"b")
    live.redis.delete(keyspace.job_key(Q, J(1)))
    live.redis.set(keyspace.job_key(Q, J(2)), "x")
    before = dump(live.redis)
    with pytest.raises(errors.WrongTypeError):
        q.claim(100, now=NOW)
    assert dump(live.redis) == before


def test_snapshot_raises_errors_other_than_wrongtype(live: Any) -> None:
    """snapshot.lua reports only WRONGTYPE as a stray key; a sound keyspace reads clean."""
    q = live.conn.queue(Q)
    populate(q)
    live.redis.set(keyspace.queue_key(Q, "active"), "x")
    assert q.snapshot().stray == (keyspace.queue_key(Q, "active"),)


@pytest.mark.parametrize("name, id", [("junk", None), ("row", None), ("pending", J(1)), ("version", None)])
def test_spoil_takes_a_key_of_the_grammar_and_an_id_with_row_only(name: str, id: str | None) -> None:
    model = QueueModel(Q)
    with pytest.raises(errors.ArgError):
        model.spoil(name, id)
    assert model.snapshot() == QueueModel(Q).snapshot()

"""Fair lanes (specs/lifecycle.md §10: LANE-1..10, T-lane_*, INV-9..14, LANE-F).

- The model: the ring turns, pauses, limits and weights are honoured, grouped jobs return
  to their lanes through promote, reap and reprocess, and gactive follows every exit from
  active (unit tests); random programs of lane ops interleaved with the core ops keep
  INV-1..7 and INV-9..14 after every step, and fairness (LANE-F) holds as a property of
  a sequence (Hypothesis).
- The scripts equal the model, answer and whole snapshot after every step, on fakeredis,
  Valkey and Redis 7 (the same test body on each), for the same random programs.
- Hostile arguments are refused with the table's code and change nothing, through the
  Python API and straight to the scripts.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from emq_model import errors, invariants, keyspace, spec
from emq_model.lanes import LaneClaimed
from emq_model.model import QueueModel
from emq_model.snapshot import Snapshot
from tests.livekit import J, dump, forget_row, lockstep

NOW = 1_000
GROUPS = ("a", "b", "c", "d")


def model_with(*jobs: tuple[int, str]) -> QueueModel:
    m = QueueModel("cm")
    for n, group in jobs:
        assert m.lane_enqueue(J(n), b"p%d" % n, group) == "enqueued"
    return m


def served(m: Any, k: int) -> list[str]:
    return [m.lane_claim(10, now=NOW).group for _ in range(k)]


# -- the model: unit tests -----------------------------------------------------------


def test_lanes_are_served_in_turn_and_each_in_mint_order() -> None:
    m = model_with((1, "a"), (2, "a"), (3, "a"), (4, "b"), (5, "c"), (6, "a"))
    got = [m.lane_claim(10, now=NOW) for _ in range(5)]
    assert [(c.id, c.group, c.token) for c in got] == [
        (J(1), "a", 1), (J(4), "b", 1), (J(5), "c", 1), (J(2), "a", 1), (J(3), "a", 1)]
    assert m.snapshot().ring == ("a",) and dict(m.snapshot().gactive) == {"a": 3, "b": 1, "c": 1}
    assert m.state(J(6)) == "pending" and m.counts()["pending"] == 0  # LANE-10: counts read the fixed sets


def test_a_plain_claim_never_serves_a_lane_and_a_lane_claim_never_serves_plain_pending() -> None:
    m = model_with((2, "a"))
    m.enqueue(J(1), b"")
    assert m.claim(10, now=NOW).id == J(1)
    assert m.claim(10, now=NOW) is None  # LANE-7
    assert m.lane_claim(10, now=NOW).id == J(2)
    assert m.lane_claim(10, now=NOW) is None and m.lane_wclaim(10, now=NOW) == []


def test_pause_takes_the_lane_off_the_ring_and_resume_puts_it_at_the_tail() -> None:
    m = model_with((1, "a"), (2, "a"), (3, "b"), (4, "c"))
    assert m.lane_pause("a") == "ok" and m.snapshot().ring == ("b", "c")
    assert served(m, 1) == ["b"]
    assert m.lane_resume("a") == "ok" and m.snapshot().ring == ("c", "a")
    assert served(m, 2) == ["c", "a"]
    assert m.lane_pause("zz") == "ok" and m.snapshot().paused == ("zz",)  # a lane may be paused before it exists
    m.lane_enqueue(J(9), b"", "zz")
    assert "zz" not in m.snapshot().ring


def test_a_lane_at_its_limit_leaves_the_ring_and_returns_when_a_job_settles() -> None:
    m = model_with((1, "a"), (2, "a"), (3, "a"), (4, "b"))
    assert m.lane_limit("a", 1) == "ok"
    assert served(m, 2) == ["a", "b"]
    assert m.lane_claim(10, now=NOW) is None and m.snapshot().ring == ()  # "a" is at its limit
    assert m.complete(J(1), 1) == "ok" and m.snapshot().ring == ("a",)
    assert m.lane_limit("a", 0) == "ok" and dict(m.snapshot().glimit) == {}  # LANE-5: 0 is no limit
    assert [c.id for c in m.lane_wclaim(10, now=NOW)] == [J(2)]


def test_lowering_a_limit_below_the_active_count_parks_the_lane() -> None:
    m = model_with((1, "a"), (2, "a"), (3, "a"))
    served(m, 2)
    m.lane_limit("a", 1)
    assert m.snapshot().ring == () and invariants.check_invariants(m.snapshot()) == []
    m.complete(J(1), 1)
    assert m.snapshot().ring == ()  # still one active: at its limit
    m.retry(J(2), 1, delay_ms=5, max_attempts=3, error="e", now=NOW)
    assert m.snapshot().ring == ("a",)


def test_a_weighted_claim_serves_its_weight_bounded_by_depth_and_headroom() -> None:
    m = model_with(*[(n, "a") for n in range(1, 6)], (6, "b"), (7, "b"))
    m.lane_weight("a", 3)
    m.lane_weight("b", 5)
    assert [c.id for c in m.lane_wclaim(10, now=NOW)] == [J(1), J(2), J(3)]
    assert [c.id for c in m.lane_wclaim(10, now=NOW)] == [J(6), J(7)]  # depth 2 < weight 5
    m.lane_limit("a", 4)
    assert [c.id for c in m.lane_wclaim(10, now=NOW)] == [J(4)]  # headroom 1 < weight 3
    assert m.lane_weight("a", 1) == "ok" and dict(m.snapshot().gweight) == {"b": 5}


def test_grouped_jobs_return_to_their_lane_through_retry_promote_reap_and_reprocess() -> None:
    m = model_with((1, "a"), (2, "b"))
    a = m.lane_claim(10, now=NOW)
    assert m.retry(a.id, a.token, delay_ms=5, max_attempts=2, error="e", now=NOW) == "scheduled"
    assert m.snapshot().gactive == () and m.promote(now=NOW + 5) == 1
    assert m.snapshot().lane_map()["a"] == {J(1): 0} and m.snapshot().ring == ("b", "a")
    assert served(m, 2) == ["b", "a"]
    assert m.reap(now=NOW + 10, max_attempts=2) == 2  # J(2) to its lane (1 attempt), J(1) dead (2)
    assert m.snapshot().ring == ("b",) and m.snapshot().gactive == ()
    assert m.reprocess(J(1)) == "ok" and m.snapshot().ring == ("b", "a")
    assert m.job(J(1))["group"] == b"a"


def test_complete_and_remove_take_a_grouped_job_out_of_its_lane() -> None:
    m = model_with((1, "a"), (2, "b"))
    c = m.lane_claim(10, now=NOW)
    m.reap(now=NOW + 10)  # back in its lane: a late ack completes it from there
    assert m.complete(c.id, c.token) == "ok" and m.snapshot().ring == ("b",)
    assert m.remove(J(2)) == "ok" and m.snapshot() == Snapshot.build("cm", {}, {}, completed=1)


def test_an_orphan_in_a_lane_is_dropped_and_a_lane_of_orphans_yields_its_turn() -> None:
    m = model_with((1, "a"), (2, "a"), (3, "b"))
    m.forget_row(J(1))
    m.forget_row(J(2))
    c = m.lane_claim(10, now=NOW)
    assert (c.id, m.last_dropped) == (J(3), (J(1), J(2)))
    assert m.snapshot().ring == () and invariants.check_invariants(m.snapshot()) == []


@pytest.mark.parametrize("group", ["", "a" * 65, "a:b", "a b", "a}", "{a", "a*", "é", "a\n", b"a", 7, None])
def test_bad_group_names_are_refused_before_anything_changes(group: Any) -> None:
    m = model_with((1, "a"))
    before = m.snapshot()
    for call in (lambda: m.lane_enqueue(J(2), b"", group), lambda: m.lane_pause(group),
                 lambda: m.lane_resume(group), lambda: m.lane_limit(group, 1), lambda: m.lane_weight(group, 2)):
        with pytest.raises(errors.ArgError):
            call()
    assert m.snapshot() == before


@pytest.mark.parametrize("op, value", [("lane_limit", -1), ("lane_limit", spec.LIMITS["limit_max"] + 1),
                                       ("lane_limit", True), ("lane_weight", 0), ("lane_weight", 1001),
                                       ("lane_weight", "2"), ("lane_weight", 2.0)])
def test_limits_and_weights_out_of_bounds_are_refused(op: str, value: Any) -> None:
    m = model_with((1, "a"))
    before = m.snapshot()
    with pytest.raises(errors.ArgError):
        getattr(m, op)("a", value)
    assert m.snapshot() == before


def test_the_id_is_checked_before_the_group() -> None:
    with pytest.raises(errors.KindError):
        QueueModel("q").lane_enqueue("ORD00000000001", b"", "a b")


def test_the_step_invariants_see_a_paused_a_limited_and_an_out_of_turn_lane() -> None:
    """INV-12..14 catch a claim that a broken implementation would make (the model's
    lanes are forced into the broken state by hand)."""
    m = model_with((1, "a"), (2, "b"), (3, "b"))
    before = m.snapshot()
    m.lanes.ring = ["b", "a"]  # b's turn taken out of order
    m.lane_claim(10, now=NOW)
    assert [v.invariant for v in invariants.check_invariants(m.snapshot(), before)] == ["INV-14"]

    m = model_with((1, "a"), (2, "b"))
    m.lane_pause("b")
    paused = m.snapshot()
    m.lanes.paused.discard("b")
    m.lanes.ring = ["b"]
    m.lane_claim(10, now=NOW)
    assert {v.invariant for v in invariants.check_invariants(m.snapshot(), paused)} == {"INV-10", "INV-12", "INV-14"}

    m = model_with((1, "a"), (2, "a"))
    m.lane_limit("a", 1)
    m.lane_claim(10, now=NOW)
    limited = m.snapshot()
    del m.lanes.glimit["a"]
    m.lanes.ring = ["a"]
    m.lane_claim(10, now=NOW)
    assert {v.invariant for v in invariants.check_invariants(m.snapshot(), limited)} == {"INV-13", "INV-14"}
    assert invariants.check_invariants(m.snapshot(), limited, one_step=False) == []


# -- the model: properties -----------------------------------------------------------

ids = st.integers(1, 14).map(J)
groups = st.sampled_from(GROUPS)
held = st.integers(0, 7)  # which of the attempts claimed so far (its token may be stale by now)
lane_enqueues = st.tuples(st.just("lane_enqueue"), ids, st.binary(max_size=3), groups)
claims = st.one_of(st.tuples(st.just("lane_claim"), st.integers(1, 20)),
                   st.tuples(st.just("lane_wclaim"), st.integers(1, 20)))
settles = st.one_of(st.tuples(st.just("complete"), held),
                    st.tuples(st.just("retry"), held, st.integers(0, 10), st.integers(1, 3)))
steps = st.one_of(
    lane_enqueues,
    claims,
    claims,
    settles,
    st.tuples(st.just("lane_pause"), groups),
    st.tuples(st.just("lane_resume"), groups),
    st.tuples(st.just("lane_limit"), groups, st.integers(0, 3)),
    st.tuples(st.just("lane_weight"), groups, st.integers(1, 4)),
    st.tuples(st.just("enqueue"), ids, st.binary(max_size=3)),
    st.tuples(st.just("claim"), st.integers(1, 20)),
    st.tuples(st.just("promote"), st.integers(0, 30)),
    st.tuples(st.just("reap"), st.integers(0, 30), st.sampled_from([None, 2])),
    st.tuples(st.just("reprocess"), ids),
    st.tuples(st.just("remove"), ids),
    st.tuples(st.just("forget_row"), ids),
)
programs = st.tuples(st.lists(lane_enqueues, min_size=2, max_size=10), st.lists(steps, max_size=40)).map(
    lambda t: t[0] + t[1])
"""Lanes with jobs first, then anything: most claims then find a lane to serve."""


class Program:
    """Runs program steps on a ``QueueModel`` or a live queue; ``attempts`` are the
    (id, token) pairs claimed so far, which complete and retry pick from."""

    def __init__(self, target: Any) -> None:
        self.target = target
        self.attempts: list[tuple[str, int]] = []

    def _attempt(self, i: int) -> tuple[str, int]:
        return self.attempts[i % len(self.attempts)] if self.attempts else (J(1), 1)

    def run(self, step: tuple) -> Any:
        """One step; a refusal is the answer."""
        op, *args = step
        t = self.target
        try:
            if op in ("lane_claim", "lane_wclaim", "claim"):
                answer = getattr(t, op)(args[0], now=NOW)
                got = answer if isinstance(answer, list) else [answer] if answer else []
                self.attempts += [(c.id, c.token) for c in got]
                return answer
            if op == "complete":
                return t.complete(*self._attempt(args[0]))
            if op == "retry":
                return t.retry(*self._attempt(args[0]), delay_ms=args[1], max_attempts=args[2], error="e", now=NOW)
            if op == "promote":
                return t.promote(now=NOW + args[0])
            if op == "reap":
                return t.reap(now=NOW + args[0], max_attempts=args[1])
            return getattr(t, op)(*args)
        except errors.EmqError as err:
            return err


@given(program=programs)
@settings(max_examples=300, deadline=None)
def test_random_programs_keep_every_invariant_after_every_step(program: list[tuple]) -> None:
    m, previous = QueueModel("cm"), None
    run = Program(m).run
    for step in program:
        if step[0] == "forget_row":
            return  # operator damage: LANE-9 says which invariants it breaks
        run(step)
        snap = m.snapshot()
        assert invariants.check_invariants(snap, previous) == [], (step, str(snap))
        previous = snap


@given(
    depths=st.lists(st.integers(1, 6), min_size=1, max_size=5),
    weights=st.lists(st.integers(1, 4), min_size=5, max_size=5),
    weighted=st.booleans(),
    rounds=st.integers(1, 4),
)
@settings(max_examples=200, deadline=None)
def test_fairness_k_serviceable_lanes_are_each_served_once_in_k_claims(
    depths: list[int], weights: list[int], weighted: bool, rounds: int
) -> None:
    """LANE-F: while k lanes stay serviceable, k consecutive grouped claims serve each of
    them once, each min(weight, depth) jobs for the weighted claim; a lane whose depth
    ran out is no longer serviceable and drops out of the next round."""
    m = QueueModel("cm")
    n = 0
    depth = {}
    for i, d in enumerate(depths):
        g = f"g{i}"
        depth[g] = d
        if weighted:
            m.lane_weight(g, weights[i])
        for _ in range(d):
            n += 1
            m.lane_enqueue(J(n), b"", g)
    for _ in range(rounds):
        live = [g for g in m.snapshot().ring]
        assert sorted(live) == sorted(g for g, d in depth.items() if d > 0)
        got: dict[str, int] = {}
        for _ in range(len(live)):
            jobs = m.lane_wclaim(10, now=NOW) if weighted else [m.lane_claim(10, now=NOW)]
            assert len({j.group for j in jobs}) == 1
            got[jobs[0].group] = got.get(jobs[0].group, 0) + len(jobs)
        want = {g: min(m.lanes.weight(g) if weighted else 1, depth[g]) for g in live}
        assert got == want
        for g, k in got.items():
            depth[g] -= k


# -- the scripts equal the model (fakeredis, Valkey, Redis 7) ----------------------------


@given(program=programs)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
def test_live_lanes_equal_the_model(live, program: list[tuple]) -> None:
    """Answer, ``last_dropped`` and whole snapshot after every step; the invariants of
    the live snapshot (those a hand-deleted row breaks aside, LANE-9)."""
    sides: dict[int, Program] = {}
    previous = None

    def call(side: Any, step: tuple) -> Any:
        return sides.setdefault(id(side), Program(side)).run(step)

    for step, snap, forgotten in lockstep(live, "l", program, call, ("lane_claim", "lane_wclaim", "claim")):
        if not forgotten:
            assert invariants.check_invariants(snap, previous) == [], step
        previous = snap


def test_live_ring_turns_like_the_models(live) -> None:
    q, m = live.conn.queue("cm"), QueueModel("cm")
    for side in (q, m):
        for n, g in ((1, "USR0KHTOWnGLuC"), (2, "USR0KHTOWnGLuC"), (3, "USR0NgWEfAEJfs")):
            assert side.lane_enqueue(J(n), b"guess", g) == "enqueued"
        assert side.lane_enqueue(J(1), b"guess", "other") == "duplicate"
        assert [side.lane_claim(10, now=NOW) for _ in range(3)] == [
            LaneClaimed(J(1), b"guess", 1, "USR0KHTOWnGLuC"), LaneClaimed(J(3), b"guess", 1, "USR0NgWEfAEJfs"),
            LaneClaimed(J(2), b"guess", 1, "USR0KHTOWnGLuC")]
    assert q.snapshot() == m.snapshot()
    assert dict(q.snapshot().gactive) == {"USR0KHTOWnGLuC": 2, "USR0NgWEfAEJfs": 1}


def test_reusing_a_lane_orphans_id_puts_it_in_two_places_until_a_grouped_claim_drops_it(live) -> None:
    """specs/lifecycle.md §8: a lane's orphan is seen by a lane_enqueue into its own lane
    only; the id reused elsewhere is in two places (INV-1, the operator's doing), the
    same on the model and the scripts, until the claim that reaches the orphan drops it."""
    q, m = live.conn.queue("orph"), QueueModel("orph")
    for side in (q, m):
        assert side.lane_enqueue(J(1), b"x", "a") == "enqueued"
    forget_row(live, m, "orph", J(1))
    for side in (q, m):
        assert side.lane_enqueue(J(1), b"y", "a") == "duplicate"  # its own lane sees it
        assert side.enqueue(J(1), b"y") == "enqueued"  # the four sets do not
    assert q.snapshot() == m.snapshot()
    assert [v.invariant for v in invariants.check_invariants(q.snapshot())] == ["INV-1", "INV-9"]
    for side in (q, m):
        assert side.lane_claim(10, now=NOW) is None and side.last_dropped == (J(1),)
    assert q.snapshot() == m.snapshot() and invariants.check_invariants(q.snapshot()) == []


# -- hostile arguments ----------------------------------------------------------------

KEYS6 = keyspace.queue_keys("h")
ROW = keyspace.job_key("h", J(1))
BAD_API = [
    ("lane_enqueue", (J(1), b"", "a b"), errors.ArgError),
    ("lane_enqueue", ("JOB", b"", "a"), errors.KindError),
    ("lane_enqueue", (J(1), 5, "a"), errors.ArgError),
    ("lane_pause", ("",), errors.ArgError),
    ("lane_resume", ("x" * 65,), errors.ArgError),
    ("lane_limit", ("a", -1), errors.ArgError),
    ("lane_limit", ("a:b", 1), errors.ArgError),
    ("lane_weight", ("a", 0), errors.ArgError),
    ("lane_weight", ("a", 1001), errors.ArgError),
]


@pytest.mark.parametrize("op, args, code", BAD_API, ids=lambda v: v if isinstance(v, str) else None)
def test_the_api_refuses_bad_lane_arguments_and_changes_nothing(live, op: str, args: tuple, code: type) -> None:
    q = live.conn.queue("h")
    q.lane_enqueue(J(9), b"", "a")
    before = dump(live.redis)
    with pytest.raises(code):
        getattr(q, op)(*args)
    with pytest.raises(code):
        getattr(QueueModel("h"), op)(*args)
    assert dump(live.redis) == before


@pytest.mark.parametrize("claim", ["lane_claim", "lane_wclaim"])
def test_the_api_refuses_a_bad_lease(live, claim: str) -> None:
    q = live.conn.queue("h")
    q.lane_enqueue(J(9), b"", "a")
    before = dump(live.redis)
    for lease in (0, -1, True, None, 2**48):
        with pytest.raises(errors.ArgError):
            getattr(q, claim)(lease, now=NOW)
    assert dump(live.redis) == before


WIRE = [
    ("lane_enqueue", [*KEYS6, ROW], [J(1), "p", "a b"], errors.ArgError),
    ("lane_enqueue", [*KEYS6, ROW], [J(1), "p", ""], errors.ArgError),
    ("lane_enqueue", [*KEYS6, ROW], [J(1), "p", "a" * 65], errors.ArgError),
    ("lane_enqueue", [*KEYS6, ROW], [J(1), "p", "a}"], errors.ArgError),
    ("lane_enqueue", [*KEYS6, ROW], [J(1), "p", "\xe9"], errors.ArgError),
    ("lane_enqueue", [*KEYS6, ROW], ["ORD00000000001", "p", "a b"], errors.KindError),  # the id first
    ("lane_enqueue", [*KEYS6, keyspace.job_key("h", J(2))], [J(1), "p", "a"], errors.ArgError),
    ("lane_enqueue", KEYS6, [J(1), "p", "a"], errors.ArgError),
    ("lane_enqueue", [*KEYS6, ROW], [J(1), "p"], errors.ArgError),
    ("lane_claim", KEYS6, ["0"], errors.ArgError),
    ("lane_claim", KEYS6, ["10", "-1"], errors.ArgError),
    ("lane_claim", KEYS6, [], errors.ArgError),
    ("lane_wclaim", KEYS6, ["1.5"], errors.ArgError),
    ("lane_wclaim", [*KEYS6[:5], "emq:{h}:junk"], ["10"], errors.ArgError),
    ("lane_pause", KEYS6, ["a*"], errors.ArgError),
    ("lane_pause", KEYS6, ["a", "b"], errors.ArgError),
    ("lane_resume", KEYS6, [":"], errors.ArgError),
    ("lane_limit", KEYS6, ["a", "-1"], errors.ArgError),
    ("lane_limit", KEYS6, ["a", "01"], errors.ArgError),
    ("lane_limit", KEYS6, ["a", "10001"], errors.ArgError),
    ("lane_limit", KEYS6, ["a b", "1"], errors.ArgError),
    ("lane_weight", KEYS6, ["a", "0"], errors.ArgError),
    ("lane_weight", KEYS6, ["a", "1001"], errors.ArgError),
    ("lane_weight", KEYS6, ["a", ""], errors.ArgError),
    ("lane_weight", KEYS6, ["a"], errors.ArgError),
]


@pytest.mark.parametrize("op, keys, args, code", WIRE)
def test_the_scripts_refuse_bad_lane_calls_and_change_nothing(live, op: str, keys: list, args: list,
                                                              code: type) -> None:
    q = live.conn.queue("h")
    q.lane_enqueue(J(9), b"", "a")
    q.lane_limit("a", 2)
    before = dump(live.redis)
    with pytest.raises(code):
        live.conn.scripts.run(live.redis, op, keys, args)
    assert dump(live.redis) == before


GROUP_AWARE = [
    ("lane_enqueue", J(1), b"x", "a"), ("lane_enqueue", J(2), b"y", "a"), ("lane_enqueue", J(3), b"z", "b"),
    ("lane_limit", "a", 1), ("lane_weight", "b", 3), ("lane_claim", 10), ("lane_wclaim", 10),
    ("lane_claim", 10), ("retry", 0, 5, 3), ("promote", 5), ("lane_claim", 10), ("reap", 30, None),
    ("lane_wclaim", 10), ("retry", 3, 0, 2), ("reprocess", J(1)), ("lane_pause", "b"), ("remove", J(3)),
    ("lane_resume", "b"), ("lane_claim", 10), ("complete", 4), ("lane_claim", 10), ("reap", 40, 1),
    ("lane_limit", "a", 0), ("lane_claim", 10), ("complete", 5),
]


def test_live_group_awareness_equals_the_model(live) -> None:
    """LANE-8 step by step: retry, promote, reap (to the lane and to dead), reprocess,
    remove, complete of grouped jobs, with a limit and a pause in force."""
    on_model, on_live = Program(QueueModel("ga")), Program(live.conn.queue("ga"))
    previous = None
    answers = []
    for step in GROUP_AWARE:
        answers.append(on_model.run(step))
        assert on_live.run(step) == answers[-1], step
        snap = on_live.target.snapshot()
        assert snap == on_model.target.snapshot(), step
        assert invariants.check_invariants(snap, previous) == [], step
        previous = snap
    assert answers[8:10] == ["scheduled", 1] and answers[11] == 2 and answers[13:15] == ["dead", "ok"]
    assert answers[16] == "ok" and answers[19] == "ok" and answers[21] == 1 and answers[23] is None
    assert on_model.target.snapshot().dead == ((J(2), 0),) and on_model.target.snapshot().ring == ()


def test_a_snapshot_with_lanes_travels_as_json_within_the_trace_schema() -> None:
    import json

    import jsonschema

    m = model_with((1, "a"), (2, "a"), (3, "b"))
    m.lane_pause("b")
    m.lane_limit("a", 2)
    m.lane_weight("a", 3)
    m.lane_claim(5, now=NOW)
    snap = m.snapshot()
    data = json.loads(json.dumps(snap.to_json()))
    schema = json.loads(spec.text("schemas/trace.json"))
    jsonschema.validate(data, {**schema["$defs"]["snapshot"], "$defs": schema["$defs"]})
    assert data["lanes"] == {"a": [[J(2), 0]], "b": [[J(3), 0]]} and data["paused"] == ["b"]
    assert Snapshot.from_json(data) == snap
    assert "lanes" not in QueueModel("q").snapshot().to_json()  # a trace without lanes is as before


def test_complete_many_settles_grouped_jobs_like_a_loop_of_completes(live) -> None:
    """B-2 with lanes: each item's lane is routed and settled on its own (LANE-8)."""
    q, m = live.conn.queue("bm"), QueueModel("bm")
    for side in (q, m):
        for n, g in ((1, "a"), (2, "a"), (3, "b"), (4, "b")):
            side.lane_enqueue(J(n), b"", g)
        side.lane_limit("a", 1)
        side.lane_limit("b", 1)
        jobs = [side.lane_claim(10, now=NOW) for _ in range(2)]
        assert side.snapshot().ring == ()
        answers = side.complete_many([(j.id, j.token) for j in jobs] + [(J(9), 1)])
        assert answers == ["ok", "ok", "gone"]
        assert side.snapshot().ring == ("a", "b") and side.snapshot().gactive == ()
    assert q.snapshot() == m.snapshot()


def test_a_trace_of_lane_steps_round_trips_and_replays_clean() -> None:
    """Lane steps written as a trace (TR-2) read back equal, answers included, and
    ``emq replay`` runs them on fakeredis without a divergence."""
    import json

    from emq_kit.check.live import LiveTarget
    from emq_kit.check.step import Step
    from emq_kit.trace.format import step_json, step_of_json
    from emq_kit.trace.replay import replay

    steps = [Step("alpha", "lane_enqueue", {"id": J(1), "payload": b"a", "group": "g"}),
             Step("alpha", "lane_enqueue", {"id": J(2), "payload": b"b", "group": "g"}),
             Step("alpha", "lane_enqueue", {"id": J(3), "payload": b"c", "group": "h"}),
             Step("alpha", "lane_weight", {"group": "g", "w": 2}),
             Step("alpha", "lane_claim", {"lease_ms": 5, "now": NOW}),
             Step("alpha", "lane_wclaim", {"lease_ms": 5, "now": NOW})]
    target = LiveTarget(None)
    try:
        done = replay(steps, target)
    finally:
        target.close()
    assert done.divergence is None
    assert done.steps[4].model == LaneClaimed(J(1), b"a", 1, "g")
    assert done.steps[5].model == [LaneClaimed(J(3), b"c", 1, "h")]
    back = [step_of_json(json.loads(json.dumps(step_json(s, i + 1)))) for i, s in enumerate(done.steps)]
    assert [(s.op, s.args, s.model, s.target) for s in back] == [(s.op, s.args, s.model, s.target) for s in done.steps]
    assert type(back[4].model) is LaneClaimed

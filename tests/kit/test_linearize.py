"""The linearizability checker (emq_kit.soak.linearize) on small hand-built histories, and the
queue's history model (emq_kit.soak.history) against the oracle QueueModel."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from emq_kit.soak import history, linearize
from emq_kit.soak.history import Event
from emq_kit.soak.linearize import ILLEGAL, OK, UNKNOWN, Model, Op
from emq_model.branded_id import JOB, encode
from emq_model.errors import EmqError
from emq_model.model import Claimed, QueueModel
from emq_model.snapshot import Snapshot

# -- the generic checker, on a register ----------------------------------------------------------


def register_step(state: int, inp: tuple[Any, ...], out: Any) -> tuple[int, ...]:
    if inp[0] == "write":
        return (inp[1],) if out == "ok" else ()
    return (state,) if out == state else ()


REGISTER = Model(init=0, step=register_step)


def test_a_read_overlapping_a_write_may_see_either_value() -> None:
    h = [Op("a", ("write", 1), "ok", 0, 10), Op("b", ("read",), 1, 2, 3), Op("c", ("read",), 0, 4, 5)]
    # b sees the write, then c (later in real time) sees the old value: that is not
    # allowed, since once the write is visible it stays visible.
    assert linearize.check_linearizable(REGISTER, h).verdict == ILLEGAL
    h = [Op("a", ("write", 1), "ok", 0, 10), Op("b", ("read",), 0, 2, 3), Op("c", ("read",), 1, 4, 5)]
    result = linearize.check_linearizable(REGISTER, h)
    assert result.verdict == OK
    order = [h[i].process for i in result.partitions[0].longest]
    assert order.index("b") < order.index("a") < order.index("c")


def test_a_read_after_a_completed_write_must_see_it() -> None:
    h = [Op("a", ("write", 1), "ok", 0, 3), Op("b", ("read",), 0, 5, 6)]
    result = linearize.check_linearizable(REGISTER, h)
    assert result.verdict == ILLEGAL
    assert result.partitions[0].longest == (0,)  # the write fits; the read after it does not


def test_equal_stamps_count_as_overlapping() -> None:
    h = [Op("a", ("write", 1), "ok", 0, 5), Op("b", ("read",), 0, 5, 6)]
    assert linearize.check_linearizable(REGISTER, h).verdict == OK


def test_the_budget_answers_unknown() -> None:
    """30 concurrent writes and a read of a value nobody wrote: refuting it means trying
    every subset of the writes, far beyond a 0.2 s budget."""
    h = [Op(i, ("write", i), "ok", 0, 100) for i in range(1, 31)] + [Op("r", ("read",), 999, 1, 99)]
    result = linearize.check_linearizable(REGISTER, h, seconds=0.2)
    assert result.verdict == UNKNOWN
    assert result.unknown and "budget" in result.unknown[0].reason
    small = linearize.check_linearizable(REGISTER, h[:3] + h[-1:], seconds=5)
    assert small.verdict == ILLEGAL


def test_the_state_cap_answers_unknown() -> None:
    h = [Op(i, ("write", i), "ok", 0, 100) for i in range(1, 31)] + [Op("r", ("read",), 999, 1, 99)]
    result = linearize.check_linearizable(REGISTER, h, seconds=60, max_states=5000)
    assert result.verdict == UNKNOWN and "states" in result.unknown[0].reason


def test_a_nondeterministic_step_is_backtracked() -> None:
    """``flip`` may leave 1 or 2; only 2 explains the later read, and only if the search
    tries the second alternative after the first fails."""

    def step(state: int, inp: tuple[Any, ...], out: Any) -> tuple[int, ...]:
        return (1, 2) if inp[0] == "flip" else register_step(state, inp, out)

    h = [Op("a", ("flip",), None, 0, 1), Op("b", ("read",), 2, 2, 3)]
    assert linearize.check_linearizable(Model(0, step), h).verdict == OK
    h = [Op("a", ("flip",), None, 0, 1), Op("b", ("read",), 3, 2, 3)]
    assert linearize.check_linearizable(Model(0, step), h).verdict == ILLEGAL


def test_partitions_are_judged_apart() -> None:
    def step(state: int, inp: tuple[Any, ...], out: Any) -> tuple[int, ...]:
        return register_step(state, inp[1:], out)

    def by_key(ops: Any) -> list[tuple[Any, list[Op]]]:
        keys = sorted({o.input[0] for o in ops})
        return [(k, [o for o in ops if o.input[0] == k]) for k in keys]

    h = [Op("a", ("x", "write", 1), "ok", 0, 1), Op("b", ("y", "read"), 0, 2, 3), Op("c", ("x", "read"), 0, 4, 5)]
    result = linearize.check_linearizable(Model(0, step, by_key), h)
    assert result.verdict == ILLEGAL
    assert [(p.key, p.verdict) for p in result.partitions] == [("x", ILLEGAL), ("y", OK)]


def test_an_op_that_returns_before_it_is_invoked_is_refused() -> None:
    try:
        linearize.check_linearizable(REGISTER, [Op("a", ("read",), 0, 5, 4)])
    except ValueError as exc:
        assert "before it is invoked" in str(exc)
    else:
        raise AssertionError("accepted an op with ret < invoke")


# -- the queue's history model, on hand-built histories --------------------------------------------

A, B, C = encode(JOB, 1000), encode(JOB, 2000), encode(JOB, 3000)
LEASE = 1000


def ev(process: str, op: str, args: dict[str, Any], output: Any, t0: int, t1: int,
       now: tuple[int, int] | None = None) -> Event:
    return Event(process, op, args, output, t0, t1, now)


def enq(job: str, t0: int, t1: int) -> Event:
    return ev("p", "enqueue", {"id": job, "payload": "x"}, "enqueued", t0, t1)


def claim(process: str, got: tuple[str, int] | None, t0: int, t1: int, now: int = 0) -> Event:
    out = None if got is None else [got[0], "x", got[1]]
    return ev(process, "claim", {"lease_ms": LEASE}, out, t0, t1, (now, now + 1))


def complete(process: str, job: str, token: int, out: str, t0: int, t1: int) -> Event:
    return ev(process, "complete", {"id": job, "token": token}, out, t0, t1)


def reap(moved: int, t0: int, t1: int, now: int) -> Event:
    return ev("reaper", "reap", {"limit": 100, "max_attempts": None}, moved, t0, t1, (now, now + 1))


def snap(t0: int, t1: int, **sets: list[tuple[str, int]]) -> Event:
    rows = {m: {"state": b"x", "attempts": str(a).encode(), "payload": b"x"} for entries in sets.values()
            for m, a in entries}
    scores = {"active": 500_000}
    locs = {loc: [(m, scores.get(loc, 0)) for m, _ in entries] for loc, entries in sets.items()}
    return ev("coordinator", "snapshot", {}, Snapshot.build("q", locs, rows), t0, t1)


def verdict(events: list[Event]) -> str:
    return history.check_history(events, seconds=10).verdict


def test_two_claims_of_one_job_without_a_reap_are_illegal() -> None:
    base = [enq(A, 0, 10)]
    double = base + [claim("w1", (A, 1), 20, 40), claim("w2", (A, 2), 25, 45)]
    assert verdict(double) == ILLEGAL
    checked = history.check_history(double)
    assert [p.key for p in checked.linearizability.illegal] == [A]
    assert verdict(base + [claim("w1", (A, 1), 20, 40), claim("w2", None, 25, 45)]) == OK


def test_a_reap_explains_a_second_claim_only_once_the_lease_can_have_expired() -> None:
    """The lease of the first claim ends at now + LEASE; a reap whose server clock window
    lies before that cannot have moved the job."""
    first = [enq(A, 0, 10), claim("w1", (A, 1), 20, 30, now=100)]
    expired = first + [reap(1, 40, 50, now=100 + LEASE + 5), claim("w2", (A, 2), 60, 70, now=100 + LEASE + 6)]
    early = first + [reap(1, 40, 50, now=100 + LEASE - 10), claim("w2", (A, 2), 60, 70, now=100 + LEASE - 9)]
    nothing = first + [reap(0, 40, 50, now=100 + LEASE + 5), claim("w2", (A, 2), 60, 70, now=100 + LEASE + 6)]
    assert verdict(expired) == OK
    assert verdict(early) == ILLEGAL
    assert verdict(nothing) == ILLEGAL  # a reap that moved nothing moved nothing


def test_an_old_token_is_stale_after_a_reclaim_and_a_second_ok_is_impossible() -> None:
    reclaimed = [enq(A, 0, 10), claim("w1", (A, 1), 20, 30, now=100), reap(1, 40, 50, now=100 + LEASE),
                 claim("w2", (A, 2), 60, 70, now=100 + LEASE + 1)]
    assert verdict(reclaimed + [complete("w1", A, 1, "EMQSTALE", 80, 90)]) == OK
    assert verdict(reclaimed + [complete("w1", A, 1, "ok", 80, 90)]) == ILLEGAL
    twice = reclaimed + [complete("w2", A, 2, "ok", 80, 90), complete("w2", A, 2, "ok", 95, 99)]
    assert verdict(twice) == ILLEGAL
    gone = reclaimed + [complete("w2", A, 2, "ok", 80, 90), complete("w1", A, 1, "gone", 95, 99)]
    assert verdict(gone) == OK


def test_a_late_ack_after_a_reap_is_ok() -> None:
    h = [enq(A, 0, 10), claim("w1", (A, 1), 20, 30, now=100), reap(1, 40, 50, now=100 + LEASE),
         complete("w1", A, 1, "ok", 60, 70)]
    assert verdict(h) == OK


def test_snapshots_pin_each_job_state_and_catch_a_lost_job() -> None:
    running = [enq(A, 0, 10), claim("w1", (A, 1), 20, 30, now=499_000)]
    assert verdict(running + [snap(40, 50, active=[(A, 1)])]) == OK
    assert verdict(running + [snap(40, 50, pending=[(A, 1)])]) == ILLEGAL  # moved with no reap
    assert verdict(running + [snap(40, 50)]) == ILLEGAL  # vanished without an ack: lost
    assert verdict(running + [snap(40, 50, active=[(A, 2)])]) == ILLEGAL  # attempts changed
    assert verdict([enq(A, 0, 10), claim("w1", (A, 1), 20, 30, now=0), snap(40, 50, active=[(A, 1)])]) == ILLEGAL


def test_claim_order_a_certainly_pending_lower_job_may_not_be_skipped() -> None:
    h = [enq(A, 0, 10), enq(B, 0, 10), claim("w1", (B, 1), 20, 30)]
    checked = history.check_history(h)
    assert checked.verdict == ILLEGAL and checked.linearizability.verdict == OK
    assert [(v.claim.output[0], v.lower) for v in checked.order] == [(B, A)]
    assert verdict([enq(A, 0, 10), enq(B, 0, 10), claim("w1", (A, 1), 20, 30)]) == OK
    # A's enqueue overlaps the claim: A may not have been there yet
    assert verdict([enq(A, 15, 25), enq(B, 0, 10), claim("w1", (B, 1), 20, 30)]) == OK
    # A was claimed by someone else during the claim: it may have been gone
    assert verdict([enq(A, 0, 10), enq(B, 0, 10), claim("w2", (A, 1), 22, 28), claim("w1", (B, 1), 20, 30)]) == OK


def test_claim_order_empty_while_a_job_is_certainly_pending_is_illegal() -> None:
    assert verdict([enq(C, 0, 10), claim("w1", None, 20, 30)]) == ILLEGAL
    assert verdict([enq(C, 0, 10), claim("w1", None, 5, 30)]) == OK


# -- the history model agrees with the oracle ---------------------------------------------------------

IDS = [encode(JOB, n) for n in (11, 22, 33)]


@st.composite
def programs(draw: Any, hidden: bool = True) -> list[tuple[str, dict[str, Any], int]]:
    """A sequence of (op, args, clock advance) on three jobs; ``hidden`` adds reap and
    promote, whose per-job effects a history does not show."""
    ops = ["enqueue", "schedule", "claim", "claim", "complete", "retry", "extend", "snapshot"]
    ops += ["reap", "promote"] if hidden else []
    out = []
    for _ in range(draw(st.integers(1, 30))):
        op = draw(st.sampled_from(ops))
        job, token = draw(st.sampled_from(IDS)), draw(st.integers(1, 3))
        args: dict[str, Any] = {
            "enqueue": {"id": job, "payload": "p"},
            "schedule": {"id": job, "payload": "p", "delay_ms": draw(st.integers(0, 30))},
            "claim": {"lease_ms": draw(st.integers(1, 40))},
            "complete": {"id": job, "token": token},
            "retry": {"id": job, "token": token, "delay_ms": draw(st.integers(0, 30)),
                      "max_attempts": draw(st.integers(1, 3)), "error": "e"},
            "extend": {"id": job, "token": token, "lease_ms": draw(st.integers(1, 40))},
            "reap": {"limit": draw(st.integers(1, 3)), "max_attempts": draw(st.sampled_from([None, 2]))},
            "promote": {"limit": draw(st.integers(1, 3))},
            "snapshot": {},
        }[op]
        out.append((op, args, draw(st.integers(0, 25))))
    return out


def run_sequentially(program: list[tuple[str, dict[str, Any], int]]) -> list[Event]:
    """Run a program on the oracle, one op at a time, recording it as a soak would with
    an exact server clock window."""
    model, now, t, events = QueueModel("q"), 1000, 0, []
    for op, args, advance in program:
        now += advance
        if op == "snapshot":
            out: Any = model.snapshot()
            window = None
        else:
            call = {**args, "now": now} if op not in ("enqueue", "complete") else args
            try:
                answer = getattr(model, op)(**call)
            except EmqError as exc:
                answer = exc
            out = answer.code if isinstance(answer, EmqError) else (
                [answer.id, answer.payload.decode(), answer.token] if isinstance(answer, Claimed) else answer)
            window = (now, now) if op not in ("enqueue", "complete") else None
        events.append(Event("solo", op, args, out, t, t + 1, window))
        t += 2
    return events


@settings(max_examples=200, deadline=None)
@given(programs())
def test_every_sequential_run_of_the_oracle_is_accepted(program: list[tuple[str, dict[str, Any], int]]) -> None:
    events = run_sequentially(program)
    for i, e in enumerate(events):  # every input has the fields INPUTS names for it
        inp = history.to_op(e, i).input
        assert len(inp) == 1 + len(history.INPUTS[inp[0]])
    checked = history.check_history(events, seconds=10)
    assert checked.verdict == OK, [line for p in checked.linearizability.illegal for line in history.explain(p)]


WRONG = {"enqueued": "duplicate", "duplicate": "enqueued", "scheduled": "duplicate", "ok": "EMQSTALE",
         "EMQSTALE": "ok", "gone": "ok", "dead": "scheduled"}


@settings(max_examples=200, deadline=None)
@given(programs(hidden=False), st.data())
def test_a_wrong_answer_about_a_job_is_illegal(program: list[tuple[str, dict[str, Any], int]], data: Any) -> None:
    """Without reap and promote every job's history is deterministic, so any one wrong
    answer about a job must be refused."""
    events = run_sequentially(program)
    about_jobs = [i for i, e in enumerate(events) if history.job_of(history.to_op(e, i)) is not None]
    if not about_jobs:
        return
    i = data.draw(st.sampled_from(about_jobs))
    e = events[i]
    if e.op == "claim":
        wrong: Any = [e.output[0], e.output[1], e.output[2] + 1]
    elif e.op == "retry" and e.output == "scheduled":
        wrong = "dead"
    else:
        wrong = WRONG[e.output]
    events[i] = Event(e.process, e.op, e.args, wrong, e.invoke, e.ret, e.now)
    assert history.check_history(events, seconds=10).verdict == ILLEGAL

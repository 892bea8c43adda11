"""QueueModel, cell by cell: every (op, outcome) of the transition table, each asserted on
the WHOLE snapshot after the call (built by hand from the rule's text, never copied from
the model), and every refusal asserted on its exact code with the snapshot unchanged.

Rules cited are those of specs/lifecycle.md. The model's state is driven through its own
API; the two fault injections are ``forget_row`` (an orphan member, T-claim-2) and
``lose_member`` below (a row in no location, R-state ``unknown``), which has no API.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import pytest

from emq_model import errors, invariants, spec
from emq_model.branded_id import encode
from emq_model.errors import EmqError
from emq_model.model import Claimed, QueueModel
from emq_model.snapshot import Snapshot, diff

Q = "q"
MS_MAX = spec.LIMITS["ms_max"]
TOKEN_MAX = spec.LIMITS["token_max"]
LIMIT_MAX = spec.LIMITS["limit_max"]
TEXT_MAX = spec.LIMITS["text_max"]
KIND, ARG, STALE, STATE, LOCK = errors.KIND, errors.ARG, errors.STALE, errors.STATE, errors.LOCK


def jid(n: int) -> str:
    """A JOB id; for one width byte order is numeric order (ID-6)."""
    return encode("JOB", n)


# The world: one job in each location. Ids in byte order A < P < S < D < N.
A, P, S, D, N = jid(1000), jid(2000), jid(3000), jid(4000), jid(5000)
X10, X20, X30, X40 = jid(10), jid(20), jid(30), jid(40)
ORD = encode("ORD", 1000)  # well-formed, wrong namespace
OVERFLOW = "JOBzzzzzzzzzzz"  # well-shaped, overflows 2^63-1 (ID-2)
BAD_IDS = [ORD, OVERFLOW, "JOB", "job" + A[3:], A + "0", A[:-1] + "!", A.encode(), None, 1000, ""]


def row(state: str, attempts: int, payload: bytes, last_error: bytes | None = None) -> dict[str, bytes]:
    r = {"state": state.encode(), "attempts": str(attempts).encode(), "payload": payload}
    if last_error is not None:
        r["last_error"] = last_error
    return r


def snap(completed: int = 0, failed: int = 0, rows: dict | None = None, **sets: Any) -> Snapshot:
    return Snapshot.build(Q, sets, rows or {}, completed, failed)


EMPTY = snap()

# What world() leaves, written from the rules (T-enqueue-2, T-claim-3, T-retry-5, T-schedule-3).
W_SETS = {"pending": [(P, 0)], "active": [(A, 1500)], "schedule": [(S, 5000)], "dead": [(D, 0)]}
W_ROWS = {
    P: row("pending", 0, b"p"),
    A: row("active", 1, b"a"),
    S: row("scheduled", 0, b"s"),
    D: row("dead", 1, b"d", b"boom"),
}


def W(completed: int = 0, failed: int = 1, rows: dict | None = None, **sets: Any) -> Snapshot:
    """The world's snapshot with some locations replaced and some rows replaced (a row
    mapped to ``None`` is deleted)."""
    r = dict(W_ROWS)
    for k, v in (rows or {}).items():
        if v is None:
            r.pop(k, None)
        else:
            r[k] = v
    return Snapshot.build(Q, {**W_SETS, **sets}, r, completed, failed)


WORLD = W()


def world(m: QueueModel) -> None:
    m.enqueue(D, b"d")
    assert m.claim(100, now=1000) == Claimed(D, b"d", 1)
    assert m.retry(D, 1, delay_ms=0, max_attempts=1, error=b"boom", now=1000) == "dead"
    m.enqueue(A, b"a")
    assert m.claim(500, now=1000) == Claimed(A, b"a", 1)
    m.enqueue(P, b"p")
    m.schedule(S, b"s", run_at=5000, now=1000)


def lose_member(m: QueueModel, job_id: str) -> None:
    """Remove ``job_id`` from its location by hand (a ZREM), leaving its row in no location."""
    for members in m.sets.values():
        members.pop(job_id, None)


def steps(*fns: Callable[[QueueModel], Any]) -> Callable[[QueueModel], None]:
    def run(m: QueueModel) -> None:
        for fn in fns:
            fn(m)

    return run


def nothing(m: QueueModel) -> None:
    pass


reaped = lambda m: m.reap(now=1500)  # A back to pending, attempts 1  # noqa: E731
# A retried to schedule at 1100 with attempts 1 (its token 1 now names a settled attempt)
retried = lambda m: m.retry(A, 1, delay_ms=100, max_attempts=5, error=b"e", now=1000)  # noqa: E731
RETRIED = W(active=[], schedule=[(S, 5000), (A, 1100)], rows={A: row("scheduled", 1, b"a", b"e")})
reclaimed = steps(reaped, lambda m: m.claim(100, now=1600))  # A active at 1700, attempts 2
RECLAIMED = W(active=[(A, 1700)], rows={A: row("active", 2, b"a")})


@dataclass
class Case:
    cell: tuple[str, str]
    setup: Callable[[QueueModel], Any]
    call: Callable[[QueueModel], Any]
    answer: Any = None
    after: Snapshot | None = None  # None for a refusal: the snapshot must not change
    code: str | None = None
    before: Snapshot | None = None  # when given, the setup must have produced exactly this
    dropped: tuple[str, ...] | None = None  # claim: the expected last_dropped
    name: str = ""
    extra: list[Any] = field(default_factory=list)


CASES: list[Any] = []


def ok(cell: str, name: str, setup: Callable, call: Callable, answer: Any, after: Snapshot, *,
       before: Snapshot | None = None, dropped: tuple[str, ...] | None = None) -> None:
    op, outcome = cell.split("/")
    CASES.append(pytest.param(Case((op, outcome), setup, call, answer, after, None, before, dropped, name),
                              id=f"{cell}:{name}"))


def no(cell_op: str, code: str, name: str, setup: Callable, call: Callable, *, before: Snapshot | None = None) -> None:
    CASES.append(pytest.param(Case((cell_op, code), setup, call, None, None, code, before, None, name),
                              id=f"{cell_op}/{code}:{name}"))


# -- enqueue (T-enqueue) ---------------------------------------------------------------

ok("enqueue/enqueued", "fresh-queue", nothing, lambda m: m.enqueue(A, b"a"), "enqueued",
   snap(pending=[(A, 0)], rows={A: row("pending", 0, b"a")}))
ok("enqueue/enqueued", "beside-others", world, lambda m: m.enqueue(N, b"n"), "enqueued",
   W(pending=[(P, 0), (N, 0)], rows={N: row("pending", 0, b"n")}), before=WORLD)
ok("enqueue/enqueued", "str-payload-utf8", world, lambda m: m.enqueue(N, "héllo ✓"), "enqueued",
   W(pending=[(P, 0), (N, 0)], rows={N: row("pending", 0, "héllo ✓".encode("utf-8"))}))
ok("enqueue/enqueued", "empty-payload", world, lambda m: m.enqueue(N, b""), "enqueued",
   W(pending=[(P, 0), (N, 0)], rows={N: row("pending", 0, b"")}))
ok("enqueue/enqueued", "bytearray-payload", world, lambda m: m.enqueue(N, bytearray(b"\x00\xff")), "enqueued",
   W(pending=[(P, 0), (N, 0)], rows={N: row("pending", 0, b"\x00\xff")}))
ok("enqueue/enqueued", "big-payload-no-bound", world, lambda m: m.enqueue(N, b"x" * (TEXT_MAX * 4)), "enqueued",
   W(pending=[(P, 0), (N, 0)], rows={N: row("pending", 0, b"x" * (TEXT_MAX * 4))}))
for _loc, _id in (("pending", P), ("active", A), ("schedule", S), ("dead", D)):
    ok("enqueue/duplicate", f"in-{_loc}", world, lambda m, i=_id: m.enqueue(i, b"other"), "duplicate", WORLD)
ok("enqueue/duplicate", "orphan-member-exists", steps(world, lambda m: m.forget_row(P)),
   lambda m: m.enqueue(P, b"new"), "duplicate", W(rows={P: None}), before=W(rows={P: None}))
ok("enqueue/duplicate", "row-in-no-location-exists", steps(world, lambda m: lose_member(m, P)),
   lambda m: m.enqueue(P, b"new"), "duplicate", W(pending=[]), before=W(pending=[]))
no("enqueue", KIND, "other-namespace", world, lambda m: m.enqueue(ORD, b"x"))
no("enqueue", KIND, "overflow-and-bad-payload", world, lambda m: m.enqueue(OVERFLOW, 5))
no("enqueue", KIND, "none-id", world, lambda m: m.enqueue(None, b"x"))
no("enqueue", ARG, "int-payload", world, lambda m: m.enqueue(N, 5))
no("enqueue", ARG, "none-payload", world, lambda m: m.enqueue(N, None))
no("enqueue", ARG, "arg-before-duplicate", world, lambda m: m.enqueue(P, ["p"]))
no("enqueue", ARG, "str-payload-not-utf8", world, lambda m: m.enqueue(N, "\ud800"))

# -- schedule (T-schedule) -------------------------------------------------------------

ok("schedule/scheduled", "run-at", world, lambda m: m.schedule(N, b"n", run_at=7000, now=1000), "scheduled",
   W(schedule=[(S, 5000), (N, 7000)], rows={N: row("scheduled", 0, b"n")}))
ok("schedule/scheduled", "delay", world, lambda m: m.schedule(N, "n", delay_ms=250, now=1000), "scheduled",
   W(schedule=[(N, 1250), (S, 5000)], rows={N: row("scheduled", 0, b"n")}))
ok("schedule/scheduled", "delay-zero", world, lambda m: m.schedule(N, b"n", delay_ms=0, now=1000), "scheduled",
   W(schedule=[(N, 1000), (S, 5000)], rows={N: row("scheduled", 0, b"n")}))
ok("schedule/scheduled", "run-at-in-the-past", world, lambda m: m.schedule(N, b"n", run_at=10, now=1000),
   "scheduled", W(schedule=[(N, 10), (S, 5000)], rows={N: row("scheduled", 0, b"n")}))
ok("schedule/scheduled", "run-at-zero", world, lambda m: m.schedule(N, b"n", run_at=0, now=0), "scheduled",
   W(schedule=[(N, 0), (S, 5000)], rows={N: row("scheduled", 0, b"n")}))
ok("schedule/scheduled", "run-at-ms-max", world, lambda m: m.schedule(N, b"n", run_at=MS_MAX, now=0), "scheduled",
   W(schedule=[(S, 5000), (N, MS_MAX)], rows={N: row("scheduled", 0, b"n")}))
ok("schedule/scheduled", "delay-ms-max-at-ms-max", world,
   lambda m: m.schedule(N, b"n", delay_ms=MS_MAX, now=MS_MAX), "scheduled",
   W(schedule=[(S, 5000), (N, 2 * MS_MAX)], rows={N: row("scheduled", 0, b"n")}))
ok("schedule/duplicate", "in-pending", world, lambda m: m.schedule(P, b"x", run_at=1, now=0), "duplicate", WORLD)
ok("schedule/duplicate", "in-active", world, lambda m: m.schedule(A, b"x", delay_ms=1, now=0), "duplicate", WORLD)
ok("schedule/duplicate", "in-schedule", world, lambda m: m.schedule(S, b"x", run_at=1, now=0), "duplicate", WORLD)
ok("schedule/duplicate", "in-dead", world, lambda m: m.schedule(D, b"x", run_at=1, now=0), "duplicate", WORLD)
ok("schedule/duplicate", "orphan-member-exists", steps(world, lambda m: m.forget_row(S)),
   lambda m: m.schedule(S, b"x", delay_ms=1, now=1000), "duplicate", W(rows={S: None}))
ok("schedule/duplicate", "row-in-no-location-exists", steps(world, lambda m: lose_member(m, S)),
   lambda m: m.schedule(S, b"x", delay_ms=1, now=1000), "duplicate", W(schedule=[]))
no("schedule", KIND, "bad-id-and-both-times-and-bad-now", world,
   lambda m: m.schedule("bad", b"x", run_at=1, delay_ms=1, now=-1))
no("schedule", KIND, "other-namespace", world, lambda m: m.schedule(ORD, b"x", run_at=1, now=0))
no("schedule", ARG, "neither-time", world, lambda m: m.schedule(N, b"x", now=1000))
no("schedule", ARG, "both-times", world, lambda m: m.schedule(N, b"x", run_at=1, delay_ms=1, now=1000))
no("schedule", ARG, "run-at-negative", world, lambda m: m.schedule(N, b"x", run_at=-1, now=1000))
no("schedule", ARG, "run-at-over-ms-max", world, lambda m: m.schedule(N, b"x", run_at=MS_MAX + 1, now=1000))
no("schedule", ARG, "delay-over-ms-max", world, lambda m: m.schedule(N, b"x", delay_ms=MS_MAX + 1, now=1000))
no("schedule", ARG, "run-at-bool", world, lambda m: m.schedule(N, b"x", run_at=True, now=1000))
no("schedule", ARG, "delay-float", world, lambda m: m.schedule(N, b"x", delay_ms=1.0, now=1000))
no("schedule", ARG, "now-over-ms-max", world, lambda m: m.schedule(N, b"x", run_at=1, now=MS_MAX + 1))
no("schedule", ARG, "bad-payload", world, lambda m: m.schedule(N, 1, run_at=1, now=1000))
no("schedule", ARG, "arg-before-duplicate", world, lambda m: m.schedule(P, b"x", now=1000))
no("schedule", ARG, "str-payload-not-utf8", world, lambda m: m.schedule(N, "a\udcff", run_at=1, now=1000))

# -- claim (T-claim) -------------------------------------------------------------------

ok("claim/claimed", "the-pending-job", world, lambda m: m.claim(300, now=2000), Claimed(P, b"p", 1),
   W(pending=[], active=[(A, 1500), (P, 2300)], rows={P: row("active", 1, b"p")}), dropped=())
ok("claim/claimed", "lowest-bytes-first", lambda m: [m.enqueue(i, i.encode()) for i in (X30, X10, X20)],
   lambda m: m.claim(10, now=0), Claimed(X10, X10.encode(), 1),
   snap(pending=[(X20, 0), (X30, 0)], active=[(X10, 10)],
        rows={X10: row("active", 1, X10.encode()), X20: row("pending", 0, X20.encode()),
              X30: row("pending", 0, X30.encode())}), dropped=())
ok("claim/claimed", "again-after-reap-token-2", steps(world, reaped), lambda m: m.claim(100, now=1600),
   Claimed(A, b"a", 2), RECLAIMED, before=W(pending=[(A, 0), (P, 0)], active=[], rows={A: row("pending", 1, b"a")}),
   dropped=())
ok("claim/claimed", "lease-ms-max", world, lambda m: m.claim(MS_MAX, now=MS_MAX), Claimed(P, b"p", 1),
   W(pending=[], active=[(A, 1500), (P, 2 * MS_MAX)], rows={P: row("active", 1, b"p")}), dropped=())
ok("claim/claimed", "lease-one-at-zero", world, lambda m: m.claim(1, now=0), Claimed(P, b"p", 1),
   W(pending=[], active=[(P, 1), (A, 1500)], rows={P: row("active", 1, b"p")}), dropped=())
ok("claim/claimed", "keeps-last-error-after-reprocess", steps(world, lambda m: m.reprocess(D), lambda m: m.claim(1, now=0)),
   lambda m: m.claim(7, now=10), Claimed(D, b"d", 2),
   W(pending=[], active=[(P, 1), (D, 17), (A, 1500)], dead=[],
     rows={P: row("active", 1, b"p"), D: row("active", 2, b"d", b"boom")}), dropped=())
ok("claim/empty", "fresh-queue", nothing, lambda m: m.claim(100, now=0), None, EMPTY, dropped=())
ok("claim/empty", "pending-drained", steps(world, lambda m: m.claim(1, now=1000)), lambda m: m.claim(100, now=1000),
   None, W(pending=[], active=[(A, 1500), (P, 1001)], rows={P: row("active", 1, b"p")}), dropped=())
ok("claim/dropped", "only-an-orphan", steps(world, lambda m: m.forget_row(P)), lambda m: m.claim(100, now=2000),
   None, W(pending=[], rows={P: None}), dropped=(P,))
ok("claim/dropped", "two-orphans-then-a-job",
   steps(lambda m: [m.enqueue(i, b"x") for i in (X10, X20, X30)], lambda m: m.forget_row(X10),
         lambda m: m.forget_row(X20)),
   lambda m: m.claim(50, now=100), Claimed(X30, b"x", 1),
   snap(active=[(X30, 150)], rows={X30: row("active", 1, b"x")}), dropped=(X10, X20),
   before=snap(pending=[(X10, 0), (X20, 0), (X30, 0)], rows={X30: row("pending", 0, b"x")}))
ok("claim/claimed", "last-dropped-resets",
   steps(lambda m: [m.enqueue(i, b"x") for i in (X10, X20)], lambda m: m.forget_row(X10),
         lambda m: m.claim(50, now=100), lambda m: m.enqueue(X30, b"y")),
   lambda m: m.claim(50, now=100), Claimed(X30, b"y", 1),
   snap(active=[(X20, 150), (X30, 150)], rows={X20: row("active", 1, b"x"), X30: row("active", 1, b"y")}),
   dropped=())
for _name, _lease in (("zero", 0), ("negative", -1), ("over-ms-max", MS_MAX + 1), ("float", 1.5),
                      ("float-integral", 100.0), ("bool", True), ("str", "100"), ("none", None)):
    no("claim", ARG, f"lease-{_name}", world, lambda m, v=_lease: m.claim(v, now=1000))
no("claim", ARG, "now-negative", world, lambda m: m.claim(100, now=-1))
no("claim", ARG, "now-none", world, lambda m: m.claim(100, now=None))
no("claim", ARG, "refusal-keeps-last-dropped",
   steps(world, lambda m: m.forget_row(P), lambda m: m.claim(100, now=2000)), lambda m: m.claim(0, now=2000))

# -- complete (T-complete) -------------------------------------------------------------

ok("complete/ok", "active", world, lambda m: m.complete(A, 1), "ok",
   W(active=[], rows={A: None}, completed=1))
ok("complete/ok", "active-second-attempt", steps(world, reclaimed), lambda m: m.complete(A, 2), "ok",
   W(active=[], rows={A: None}, completed=1), before=RECLAIMED)
ok("complete/late", "pending-after-reap", steps(world, reaped), lambda m: m.complete(A, 1), "ok",
   W(active=[], rows={A: None}, completed=1),
   before=W(pending=[(A, 0), (P, 0)], active=[], rows={A: row("pending", 1, b"a")}))
ok("complete/gone", "absent", world, lambda m: m.complete(N, 1), "gone", WORLD)
ok("complete/gone", "already-completed", steps(world, lambda m: m.complete(A, 1)), lambda m: m.complete(A, 1),
   "gone", W(active=[], rows={A: None}, completed=1))
ok("complete/gone", "orphan-member-in-active", steps(world, lambda m: m.forget_row(A)),
   lambda m: m.complete(A, 1), "gone", W(rows={A: None}))
no("complete", KIND, "overflow-id-and-token-zero", world, lambda m: m.complete(OVERFLOW, 0))
no("complete", KIND, "other-namespace", world, lambda m: m.complete(ORD, 1))
for _name, _tok in (("zero", 0), ("negative", -1), ("over-max", TOKEN_MAX + 1), ("float", 1.0), ("bool", True),
                    ("str", "1"), ("none", None)):
    no("complete", ARG, f"token-{_name}", world, lambda m, v=_tok: m.complete(A, v))
no("complete", ARG, "token-zero-before-gone", world, lambda m: m.complete(N, 0))
no("complete", STALE, "token-mismatch-active", world, lambda m: m.complete(A, 2))
no("complete", STALE, "never-claimed-pending", world, lambda m: m.complete(P, 1))
no("complete", STALE, "dead-matching-token", world, lambda m: m.complete(D, 1), before=WORLD)
no("complete", STALE, "schedule-matching-token", steps(world, retried), lambda m: m.complete(A, 1), before=RETRIED)
no("complete", STALE, "late-ack-after-reclaim", steps(world, reclaimed), lambda m: m.complete(A, 1), before=RECLAIMED)
no("complete", STALE, "row-in-no-location", steps(world, lambda m: lose_member(m, A)), lambda m: m.complete(A, 1),
   before=W(active=[]))

# -- retry (T-retry) -------------------------------------------------------------------

ok("retry/scheduled", "active", world,
   lambda m: m.retry(A, 1, delay_ms=200, max_attempts=3, error="oops", now=1100), "scheduled",
   W(active=[], schedule=[(A, 1300), (S, 5000)], rows={A: row("scheduled", 1, b"a", b"oops")}))
ok("retry/scheduled", "from-pending-after-reap", steps(world, reaped),
   lambda m: m.retry(A, 1, delay_ms=0, max_attempts=2, error=b"x", now=1600), "scheduled",
   W(active=[], schedule=[(A, 1600), (S, 5000)], rows={A: row("scheduled", 1, b"a", b"x")}))
ok("retry/scheduled", "error-text-max-bytes", world,
   lambda m: m.retry(A, 1, delay_ms=0, max_attempts=3, error=b"e" * TEXT_MAX, now=1000), "scheduled",
   W(active=[], schedule=[(A, 1000), (S, 5000)], rows={A: row("scheduled", 1, b"a", b"e" * TEXT_MAX)}))
ok("retry/scheduled", "error-text-max-bytes-multibyte", world,
   lambda m: m.retry(A, 1, delay_ms=0, max_attempts=3, error="é" * (TEXT_MAX // 2), now=1000), "scheduled",
   W(active=[], schedule=[(A, 1000), (S, 5000)], rows={A: row("scheduled", 1, b"a", "é".encode() * (TEXT_MAX // 2))}))
ok("retry/scheduled", "empty-error-delay-ms-max", world,
   lambda m: m.retry(A, 1, delay_ms=MS_MAX, max_attempts=TOKEN_MAX, error=b"", now=MS_MAX), "scheduled",
   W(active=[], schedule=[(S, 5000), (A, 2 * MS_MAX)], rows={A: row("scheduled", 1, b"a", b"")}))
ok("retry/scheduled", "second-retry-replaces-last-error",
   steps(world, lambda m: m.retry(A, 1, delay_ms=0, max_attempts=5, error=b"first", now=1000),
         lambda m: m.promote(now=1000), lambda m: m.claim(100, now=1000)),
   lambda m: m.retry(A, 2, delay_ms=10, max_attempts=5, error=b"second", now=1050), "scheduled",
   W(active=[], schedule=[(A, 1060), (S, 5000)], rows={A: row("scheduled", 2, b"a", b"second")}),
   before=W(active=[(A, 1100)], rows={A: row("active", 2, b"a", b"first")}))
ok("retry/dead", "at-cap", world,
   lambda m: m.retry(A, 1, delay_ms=200, max_attempts=1, error=b"fatal", now=1100), "dead",
   W(active=[], dead=[(A, 0), (D, 0)], rows={A: row("dead", 1, b"a", b"fatal")}, failed=2))
ok("retry/dead", "from-pending-after-reap", steps(world, reaped),
   lambda m: m.retry(A, 1, delay_ms=0, max_attempts=1, error=b"f", now=1600), "dead",
   W(active=[], dead=[(A, 0), (D, 0)], rows={A: row("dead", 1, b"a", b"f")}, failed=2))
ok("retry/dead", "attempts-over-a-lower-cap", steps(world, reclaimed),
   lambda m: m.retry(A, 2, delay_ms=0, max_attempts=1, error=b"e", now=1700), "dead",
   W(active=[], dead=[(A, 0), (D, 0)], rows={A: row("dead", 2, b"a", b"e")}, failed=2))
no("retry", KIND, "bad-id-and-every-arg-bad", world,
   lambda m: m.retry("bad", 0, delay_ms=-1, max_attempts=0, error=5, now=-1))
no("retry", KIND, "other-namespace", world,
   lambda m: m.retry(ORD, 1, delay_ms=0, max_attempts=1, error=b"", now=0))
for _name, _kw in (
    ("token-zero", {"token": 0}), ("token-bool", {"token": True}), ("delay-negative", {"delay_ms": -1}),
    ("delay-over-ms-max", {"delay_ms": MS_MAX + 1}), ("delay-str", {"delay_ms": "0"}),
    ("cap-zero", {"max_attempts": 0}), ("cap-float", {"max_attempts": 3.0}), ("cap-none", {"max_attempts": None}),
    ("error-int", {"error": 5}), ("error-text-max-plus-1", {"error": b"e" * (TEXT_MAX + 1)}),
    ("error-multibyte-over", {"error": "é" * (TEXT_MAX // 2 + 1)}), ("error-str-not-utf8", {"error": "\ud800"}),
    ("now-bool", {"now": True}),
    ("now-over-ms-max", {"now": MS_MAX + 1}),
):
    _args = {"token": 1, "delay_ms": 0, "max_attempts": 3, "error": b"e", "now": 1000, **_kw}
    no("retry", ARG, _name, world, lambda m, a=_args: m.retry(
        A, a["token"], delay_ms=a["delay_ms"], max_attempts=a["max_attempts"], error=a["error"], now=a["now"]))
no("retry", ARG, "token-zero-before-stale-on-dead", world,
   lambda m: m.retry(D, 0, delay_ms=0, max_attempts=1, error=b"", now=0))
no("retry", ARG, "bad-delay-before-stale-on-absent", world,
   lambda m: m.retry(N, 1, delay_ms=-5, max_attempts=1, error=b"", now=0))
_retry = dict(delay_ms=0, max_attempts=9, error=b"late", now=2000)
no("retry", STALE, "absent", world, lambda m: m.retry(N, 1, **_retry))
no("retry", STALE, "token-mismatch-active", world, lambda m: m.retry(A, 2, **_retry))
no("retry", STALE, "never-claimed-pending", world, lambda m: m.retry(P, 1, **_retry))
no("retry", STALE, "schedule-matching-token", steps(world, retried), lambda m: m.retry(A, 1, **_retry), before=RETRIED)
no("retry", STALE, "dead-matching-token", world, lambda m: m.retry(D, 1, **_retry), before=WORLD)
no("retry", STALE, "stale-token-after-reclaim", steps(world, reclaimed), lambda m: m.retry(A, 1, **_retry))
no("retry", STALE, "orphan-member-in-active", steps(world, lambda m: m.forget_row(A)),
   lambda m: m.retry(A, 1, **_retry))
no("retry", STALE, "row-in-no-location", steps(world, lambda m: lose_member(m, A)), lambda m: m.retry(A, 1, **_retry))

# -- extend (T-extend) -----------------------------------------------------------------

ok("extend/ok", "lengthen", world, lambda m: m.extend(A, 1, 1000, now=1200), "ok", W(active=[(A, 2200)]))
ok("extend/ok", "shorten", world, lambda m: m.extend(A, 1, 1, now=1000), "ok", W(active=[(A, 1001)]))
ok("extend/ok", "after-deadline-not-reaped", world, lambda m: m.extend(A, 1, 100, now=9000), "ok",
   W(active=[(A, 9100)]))
ok("extend/ok", "lease-ms-max", world, lambda m: m.extend(A, 1, MS_MAX, now=MS_MAX), "ok",
   W(active=[(A, 2 * MS_MAX)]))
ok("extend/ok", "second-attempt", steps(world, reclaimed), lambda m: m.extend(A, 2, 50, now=1650), "ok",
   W(active=[(A, 1700)], rows={A: row("active", 2, b"a")}))
no("extend", KIND, "bad-id-and-zero-lease", world, lambda m: m.extend("bad", 1, 0, now=1000))
no("extend", KIND, "overflow-id-and-everything-bad", world, lambda m: m.extend(OVERFLOW, 0, 0, now=-1))
no("extend", ARG, "lease-zero", world, lambda m: m.extend(A, 1, 0, now=1000))
no("extend", ARG, "lease-over-ms-max", world, lambda m: m.extend(A, 1, MS_MAX + 1, now=1000))
no("extend", ARG, "token-zero", world, lambda m: m.extend(A, 0, 10, now=1000))
no("extend", ARG, "now-negative", world, lambda m: m.extend(A, 1, 10, now=-1))
no("extend", ARG, "lease-zero-before-stale", world, lambda m: m.extend(P, 1, 0, now=1000))
no("extend", STALE, "absent", world, lambda m: m.extend(N, 1, 10, now=1000))
no("extend", STALE, "token-mismatch", world, lambda m: m.extend(A, 2, 10, now=1000))
no("extend", STALE, "pending-after-reap-matching-token", steps(world, reaped), lambda m: m.extend(A, 1, 10, now=1600))
no("extend", STALE, "never-claimed-pending", world, lambda m: m.extend(P, 1, 10, now=1000))
no("extend", STALE, "schedule-matching-token", steps(world, retried), lambda m: m.extend(A, 1, 10, now=1000))
no("extend", STALE, "dead-matching-token", world, lambda m: m.extend(D, 1, 10, now=1000))
no("extend", STALE, "stale-token-after-reclaim", steps(world, reclaimed), lambda m: m.extend(A, 1, 10, now=1650))
no("extend", STALE, "orphan-member-in-active", steps(world, lambda m: m.forget_row(A)),
   lambda m: m.extend(A, 1, 10, now=1000))
no("extend", STALE, "row-in-no-location", steps(world, lambda m: lose_member(m, A)),
   lambda m: m.extend(A, 1, 10, now=1000))

# -- promote (T-promote) ---------------------------------------------------------------

_PROMOTED = W(pending=[(P, 0), (S, 0)], schedule=[], rows={S: row("pending", 0, b"s")})
ok("promote/none", "deadline-minus-1", world, lambda m: m.promote(now=4999), 0, WORLD)
ok("promote/moved", "deadline", world, lambda m: m.promote(now=5000), 1, _PROMOTED)
ok("promote/moved", "deadline-plus-1", world, lambda m: m.promote(now=5001), 1, _PROMOTED)
ok("promote/none", "fresh-queue", nothing, lambda m: m.promote(now=MS_MAX), 0, EMPTY)
ok("promote/moved", "keeps-attempts-and-last-error", steps(world, retried), lambda m: m.promote(now=1100), 1,
   W(active=[], pending=[(A, 0), (P, 0)], rows={A: row("pending", 1, b"a", b"e")}))
_four = lambda m: [m.schedule(i, b"x", run_at=t, now=0) for i, t in ((X40, 100), (X10, 200), (X30, 100), (X20, 100))]  # noqa: E731
ok("promote/moved", "limit-and-set-order", _four, lambda m: m.promote(now=150, limit=2), 2,
   snap(pending=[(X20, 0), (X30, 0)], schedule=[(X40, 100), (X10, 200)],
        rows={X20: row("pending", 0, b"x"), X30: row("pending", 0, b"x"),
              X40: row("scheduled", 0, b"x"), X10: row("scheduled", 0, b"x")}),
   before=snap(schedule=[(X20, 100), (X30, 100), (X40, 100), (X10, 200)],
               rows={i: row("scheduled", 0, b"x") for i in (X10, X20, X30, X40)}))
ok("promote/moved", "limit-max", _four, lambda m: m.promote(now=200, limit=LIMIT_MAX), 4,
   snap(pending=[(i, 0) for i in (X10, X20, X30, X40)], rows={i: row("pending", 0, b"x") for i in (X10, X20, X30, X40)}))
_many = [jid(100 + k) for k in range(101)]
ok("promote/moved", "default-limit-100", lambda m: [m.schedule(i, b"", run_at=0, now=0) for i in _many],
   lambda m: m.promote(now=0), 100,
   snap(pending=[(i, 0) for i in _many[:100]], schedule=[(_many[100], 0)],
        rows={**{i: row("pending", 0, b"") for i in _many[:100]}, _many[100]: row("scheduled", 0, b"")}))
ok("promote/none", "orphan-dropped-not-counted", steps(world, lambda m: m.forget_row(S)),
   lambda m: m.promote(now=5000), 0, W(schedule=[], rows={S: None}), before=W(rows={S: None}))
ok("promote/none", "orphan-takes-a-limit-slot",
   steps(lambda m: [m.schedule(i, b"x", run_at=100, now=0) for i in (X10, X20)], lambda m: m.forget_row(X10)),
   lambda m: m.promote(now=100, limit=1), 0, snap(schedule=[(X20, 100)], rows={X20: row("scheduled", 0, b"x")}))
for _name, _kw in (("limit-zero", {"limit": 0}), ("limit-over-max", {"limit": LIMIT_MAX + 1}),
                   ("limit-bool", {"limit": True}), ("limit-float", {"limit": 1.0}), ("limit-none", {"limit": None}),
                   ("now-negative", {"now": -1}), ("now-none", {"now": None})):
    no("promote", ARG, _name, world, lambda m, kw={"now": 9999, **_kw}: m.promote(**kw))

# -- reap (T-reap) ---------------------------------------------------------------------

_REQUEUED = W(pending=[(A, 0), (P, 0)], active=[], rows={A: row("pending", 1, b"a")})
ok("reap/none", "deadline-minus-1", world, lambda m: m.reap(now=1499), 0, WORLD)
ok("reap/requeued", "deadline", world, lambda m: m.reap(now=1500), 1, _REQUEUED)
ok("reap/requeued", "deadline-plus-1", world, lambda m: m.reap(now=1501), 1, _REQUEUED)
ok("reap/requeued", "cap-not-reached", world, lambda m: m.reap(now=1500, max_attempts=2), 1, _REQUEUED)
ok("reap/none", "cap-but-not-due", world, lambda m: m.reap(now=1499, max_attempts=1), 0, WORLD)
ok("reap/dead", "cap-reached", world, lambda m: m.reap(now=1500, max_attempts=1), 1,
   W(active=[], dead=[(A, 0), (D, 0)], rows={A: row("dead", 1, b"a", b"lease expired")}, failed=2))
ok("reap/dead", "overwrites-last-error",
   steps(world, lambda m: m.retry(A, 1, delay_ms=0, max_attempts=5, error=b"oops", now=1000),
         lambda m: m.promote(now=1000), lambda m: m.claim(100, now=1000)),
   lambda m: m.reap(now=1100, max_attempts=2), 1,
   W(active=[], dead=[(A, 0), (D, 0)], rows={A: row("dead", 2, b"a", b"lease expired")}, failed=2))
_leases = steps(lambda m: [m.enqueue(i, b"x") for i in (X10, X20, X30, X40)],
                lambda m: [m.claim(t, now=0) for t in (200, 100, 100, 50)])
ok("reap/requeued", "limit-and-set-order", _leases, lambda m: m.reap(now=150, limit=2), 2,
   snap(pending=[(X20, 0), (X40, 0)], active=[(X30, 100), (X10, 200)],
        rows={X20: row("pending", 1, b"x"), X40: row("pending", 1, b"x"),
              X30: row("active", 1, b"x"), X10: row("active", 1, b"x")}),
   before=snap(active=[(X40, 50), (X20, 100), (X30, 100), (X10, 200)],
               rows={i: row("active", 1, b"x") for i in (X10, X20, X30, X40)}))
ok("reap/dead", "mixed-requeued-and-dead", steps(world, reclaimed, lambda m: m.claim(100, now=1600)),
   lambda m: m.reap(now=1700, max_attempts=2), 2,
   W(pending=[(P, 0)], active=[], dead=[(A, 0), (D, 0)],
     rows={A: row("dead", 2, b"a", b"lease expired"), P: row("pending", 1, b"p")}, failed=2))
ok("reap/none", "orphan-dropped-not-counted", steps(world, lambda m: m.forget_row(A)),
   lambda m: m.reap(now=1500), 0, W(active=[], rows={A: None}))
for _name, _kw in (("limit-zero", {"limit": 0}), ("limit-over-max", {"limit": LIMIT_MAX + 1}),
                   ("cap-zero", {"max_attempts": 0}), ("cap-float", {"max_attempts": 1.5}),
                   ("cap-str", {"max_attempts": "2"}), ("cap-over-max", {"max_attempts": TOKEN_MAX + 1}),
                   ("now-negative", {"now": -1}), ("now-bool", {"now": False})):
    no("reap", ARG, _name, world, lambda m, kw={"now": 9999, **_kw}: m.reap(**kw))

# -- reprocess (T-reprocess) -----------------------------------------------------------

ok("reprocess/ok", "dead", world, lambda m: m.reprocess(D), "ok",
   W(pending=[(P, 0), (D, 0)], dead=[], rows={D: row("pending", 1, b"d", b"boom")}))
ok("reprocess/ok", "reaped-dead-keeps-lease-expired", steps(world, lambda m: m.reap(now=1500, max_attempts=1)),
   lambda m: m.reprocess(A), "ok",
   W(pending=[(A, 0), (P, 0)], active=[], rows={A: row("pending", 1, b"a", b"lease expired")}, failed=2))
no("reprocess", KIND, "other-namespace", world, lambda m: m.reprocess(ORD))
no("reprocess", KIND, "overflow", world, lambda m: m.reprocess(OVERFLOW))
for _loc, _id in (("pending", P), ("active", A), ("schedule", S), ("absent", N)):
    no("reprocess", STATE, _loc, world, lambda m, i=_id: m.reprocess(i))
no("reprocess", STATE, "orphan-member-in-dead", steps(world, lambda m: m.forget_row(D)), lambda m: m.reprocess(D))
no("reprocess", STATE, "row-in-no-location", steps(world, lambda m: lose_member(m, D)), lambda m: m.reprocess(D))

# -- remove (T-remove) -----------------------------------------------------------------

ok("remove/ok", "pending", world, lambda m: m.remove(P), "ok", W(pending=[], rows={P: None}))
ok("remove/ok", "schedule", world, lambda m: m.remove(S), "ok", W(schedule=[], rows={S: None}))
ok("remove/ok", "dead-keeps-failed", world, lambda m: m.remove(D), "ok", W(dead=[], rows={D: None}))
ok("remove/ok", "orphan-member", steps(world, lambda m: m.forget_row(P)), lambda m: m.remove(P), "ok",
   W(pending=[], rows={P: None}))
ok("remove/ok", "row-in-no-location", steps(world, lambda m: lose_member(m, P)), lambda m: m.remove(P), "ok",
   W(pending=[], rows={P: None}))
ok("remove/gone", "absent", world, lambda m: m.remove(N), "gone", WORLD)
ok("remove/gone", "already-removed", steps(world, lambda m: m.remove(P)), lambda m: m.remove(P), "gone",
   W(pending=[], rows={P: None}))
no("remove", KIND, "other-namespace", world, lambda m: m.remove(ORD))
no("remove", KIND, "malformed", world, lambda m: m.remove("JOB!"))
no("remove", LOCK, "active", world, lambda m: m.remove(A))
no("remove", LOCK, "orphan-member-in-active", steps(world, lambda m: m.forget_row(A)), lambda m: m.remove(A))


# -- the harness -------------------------------------------------------------------------


# -- CC-8: a key the call touches holds another type: refused, nothing changes ---------
# (the model's side of tests/live/test_wrongtype.py, which holds the scripts to every key)


def spoiled(name: str, id: str | None = None) -> Callable[[QueueModel], None]:
    return steps(world, lambda m: m.spoil(name, id))


no("enqueue", "EMQTYPE", "pending-spoiled", spoiled("pending"), lambda m: m.enqueue(N, b"n"))
no("schedule", "EMQTYPE", "row-spoiled", spoiled("row", N), lambda m: m.schedule(N, b"n", run_at=1, now=0))
no("claim", "EMQTYPE", "head-row-spoiled", spoiled("row", P), lambda m: m.claim(100, now=1000))
no("complete", "EMQTYPE", "completed-spoiled", spoiled("completed"), lambda m: m.complete(A, 1))
no("retry", "EMQTYPE", "failed-spoiled", spoiled("failed"),
   lambda m: m.retry(A, 1, delay_ms=0, max_attempts=1, error=b"e", now=1000))
no("extend", "EMQTYPE", "active-spoiled", spoiled("active"), lambda m: m.extend(A, 1, 100, now=1000))
no("promote", "EMQTYPE", "due-row-spoiled", spoiled("row", S), lambda m: m.promote(now=6000))
no("reap", "EMQTYPE", "due-row-spoiled", spoiled("row", A), lambda m: m.reap(now=2000))
no("reprocess", "EMQTYPE", "dead-spoiled", spoiled("dead"), lambda m: m.reprocess(D))
no("remove", "EMQTYPE", "schedule-spoiled", spoiled("schedule"), lambda m: m.remove(S))


def observed_cells(op: str, before: Snapshot, answer: Any, after: Snapshot, dropped: tuple[str, ...]) -> set[str]:
    """The outcome cells a successful call reached, read off its answer and the two snapshots."""
    if op == "claim":
        return ({"dropped"} if dropped else set()) | {"empty" if answer is None else "claimed"}
    if op == "complete" and answer == "ok":
        (vanished,) = before.ids() - after.ids()
        return {"late" if before.where(vanished) == ["pending"] else "ok"}
    if op == "promote":
        return {"moved" if answer else "none"}
    if op == "reap":
        was_active = {m for m, _ in before.active}
        out = {"dead"} if was_active & {m for m, _ in after.dead} else set()
        out |= {"requeued"} if was_active & {m for m, _ in after.pending} else set()
        return out or {"none"}
    return {answer}


def assert_snapshot(got: Snapshot, want: Snapshot) -> None:
    assert got == want, "snapshot differs:\n  " + "\n  ".join(diff(want, got)) + f"\n{got}"


@pytest.mark.parametrize("case", CASES)
def test_cell(case: Case) -> None:
    m = QueueModel(Q)
    case.setup(m)
    before, dropped_before = m.snapshot(), m.last_dropped
    if case.before is not None:
        assert_snapshot(before, case.before)
    op = case.cell[0]
    if case.code is not None:
        with pytest.raises(EmqError) as info:
            case.call(m)
        assert info.value.code == case.code, str(info.value)
        assert type(info.value) is type(errors.from_code(case.code))
        assert_snapshot(m.snapshot(), before)  # a refused call changes nothing at all (CC-5)
        assert m.last_dropped == dropped_before
        return
    answer = case.call(m)
    assert answer == case.answer
    assert type(answer) is type(case.answer)
    assert_snapshot(m.snapshot(), case.after)
    if op == "claim":
        assert m.last_dropped == case.dropped
        assert type(m.last_dropped) is tuple
    else:
        assert m.last_dropped == dropped_before
    assert case.cell[1] in observed_cells(op, before, answer, m.snapshot(), m.last_dropped)
    if invariants.check_invariants(before) == []:
        assert invariants.check_invariants(m.snapshot(), before) == []


def test_every_cell_of_the_table_has_a_case() -> None:
    covered = {p.values[0].cell for p in CASES}
    missing = [c for c in spec.cells() if c not in covered]
    assert missing == [], f"cells of transitions.json with no case in this file: {missing}"
    unknown = covered - set(spec.cells())
    assert unknown == set(), f"cases name cells the table does not have: {unknown}"


def test_every_refusal_of_the_table_is_a_cell() -> None:
    """EMQTYPE (CC-8) included: the conformance machine's ``spoil_key`` rule reaches it."""
    for op, d in (*spec.OPS.items(), *spec.LANE_OPS.items()):
        if d["kind"] == "transition" or op in spec.LANE_OPS:
            assert set(d["refusals"]) <= set(d["outcomes"]), op


def test_the_world_is_what_the_rules_say() -> None:
    m = QueueModel(Q)
    world(m)
    assert_snapshot(m.snapshot(), WORLD)
    assert invariants.check_invariants(WORLD) == []


# -- arguments, across every op (CC-2, CC-5, ID-7) -----------------------------------------

BASE: dict[str, dict[str, Any]] = {
    "enqueue": {"id": N, "payload": b"n"},
    "schedule": {"id": N, "payload": b"n", "run_at": 10, "now": 1000},
    "claim": {"lease_ms": 100, "now": 1000},
    "complete": {"id": A, "token": 1},
    "retry": {"id": A, "token": 1, "delay_ms": 0, "max_attempts": 3, "error": b"e", "now": 1000},
    "extend": {"id": A, "token": 1, "lease_ms": 100, "now": 1000},
    "promote": {"limit": 10, "now": 1000},
    "reap": {"limit": 10, "max_attempts": 3, "now": 1000},
    "reprocess": {"id": D},
    "remove": {"id": P},
    "browse": {"n": 5},
    "counts": {},
    "state": {"id": P},
    "job": {"id": P},
}


def test_base_covers_every_op() -> None:
    assert set(BASE) == set(spec.OPS)
    for op in spec.OPS:
        names = set(spec.arg_names(op)) | ({"now"} if spec.OPS[op]["clock"] else set())
        assert set(BASE[op]) <= names, op


def int_args(op: str) -> list[tuple[str, int, int, bool]]:
    """(name, min, max, optional) of every integer argument of ``op``, the clock included."""
    out = []
    for a in spec.OPS[op]["args"]:
        t = spec.TYPES[a["type"]]
        if "min" in t:
            out.append((a["name"], spec.bound(t["min"]), spec.bound(t["max"]), bool(a.get("optional"))))
    if spec.OPS[op]["clock"]:
        t = spec.TYPES["time"]
        out.append(("now", spec.bound(t["min"]), spec.bound(t["max"]), False))
    return out


def call_with(m: QueueModel, op: str, **over: Any) -> Any:
    args = {**BASE[op], **over}
    if op == "schedule" and "delay_ms" in over:
        args.pop("run_at")
    return getattr(m, op)(**args)


NUMERIC = [(op, *a) for op in spec.OPS for a in int_args(op)]


def _bad_numbers(lo: int, hi: int, optional: bool) -> list[Any]:
    bad = [True, False, 1.0, 2.5, float(lo), "1", b"1", lo - 1, hi + 1, -1, 2**64]
    return bad if optional else bad + [None]


@pytest.mark.parametrize("op,name,lo,hi,optional", NUMERIC, ids=[f"{o}-{n}" for o, n, *_ in NUMERIC])
def test_bad_numbers_are_emqarg_and_change_nothing(op: str, name: str, lo: int, hi: int, optional: bool) -> None:
    m = QueueModel(Q)
    world(m)
    for bad in _bad_numbers(lo, hi, optional):
        with pytest.raises(EmqError) as info:
            call_with(m, op, **{name: bad})
        assert info.value.code == ARG, (name, bad)
        assert_snapshot(m.snapshot(), WORLD)


@pytest.mark.parametrize("op,name,lo,hi,optional", NUMERIC, ids=[f"{o}-{n}" for o, n, *_ in NUMERIC])
def test_bound_numbers_are_accepted(op: str, name: str, lo: int, hi: int, optional: bool) -> None:
    # schedule's two times are optional only as a pair: exactly one is given (T-schedule-1)
    for good in (lo, hi) + ((None,) if optional and op != "schedule" else ()):
        m = QueueModel(Q)
        world(m)
        try:
            call_with(m, op, **{name: good})
        except EmqError as e:  # a precondition may refuse (a token that does not match); never the argument
            assert e.code != ARG, (name, good, str(e))


def test_the_type_table_bounds() -> None:
    assert spec.TYPES["lease"]["min"] == 1  # a zero lease is expired at birth (§8)
    assert spec.TYPES["token"]["min"] == 1  # a never-claimed job cannot be completed (§8)
    assert (spec.TYPES["limit"]["min"], spec.bound(spec.TYPES["limit"]["max"])) == (1, 10000)
    assert (spec.TYPES["count"]["min"], spec.bound(spec.TYPES["count"]["max"])) == (1, 10000)
    assert MS_MAX == 2**48 - 1 and 2 * MS_MAX < 2**53
    assert TEXT_MAX == 4096


ID_OPS = [op for op in spec.OPS if any(a["type"] == "job_id" for a in spec.OPS[op]["args"])]


@pytest.mark.parametrize("op", ID_OPS)
@pytest.mark.parametrize("bad_id", BAD_IDS, ids=repr)
def test_bad_id_is_emqkind_before_any_other_argument(op: str, bad_id: Any) -> None:
    m = QueueModel(Q)
    world(m)
    for everything_bad in (False, True):
        over: dict[str, Any] = {"id": bad_id}
        if everything_bad:
            over |= {name: -1 for name, *_ in int_args(op)}
            over |= {a["name"]: 5 for a in spec.OPS[op]["args"] if a["type"] in ("payload", "text")}
        with pytest.raises(EmqError) as info:
            getattr(m, op)(**{**BASE[op], **over})
        assert info.value.code == KIND
        assert isinstance(info.value, errors.KindError)
        assert_snapshot(m.snapshot(), WORLD)


@pytest.mark.parametrize("op", ["enqueue", "schedule"])
@pytest.mark.parametrize("payload", [5, 1.0, None, ["x"], {"x": 1}, True], ids=repr)
def test_bad_payload_is_emqarg(op: str, payload: Any) -> None:
    m = QueueModel(Q)
    world(m)
    with pytest.raises(errors.ArgError):
        call_with(m, op, payload=payload)
    assert_snapshot(m.snapshot(), WORLD)


def test_memoryview_payload_is_stored_as_bytes() -> None:
    m = QueueModel(Q)
    m.enqueue(A, memoryview(b"mv"))
    assert m.snapshot() == snap(pending=[(A, 0)], rows={A: row("pending", 0, b"mv")})
    assert type(m.job(A)["payload"]) is bytes


def test_bad_queue_name_is_emqarg() -> None:
    for bad in ("", "a{b", "a}b", "a b", "a\nb", "\x00", "x" * 129, 5, None):
        with pytest.raises(errors.ArgError):
            QueueModel(bad)  # type: ignore[arg-type]
    assert QueueModel("x" * 128).snapshot() == Snapshot.build("x" * 128, {}, {})


# -- reads (R-*) -------------------------------------------------------------------------


def test_browse_newest_first_and_bounds() -> None:
    m = QueueModel(Q)
    world(m)  # pending: P
    for i in (X30, X10, N, X20):
        m.enqueue(i, b"x")
    before = m.snapshot()
    assert m.browse(1) == [N]
    assert m.browse(3) == [N, P, X30]
    assert m.browse(LIMIT_MAX) == [N, P, X30, X20, X10]
    assert m.browse(5) == [N, P, X30, X20, X10]
    for bad in (0, -1, LIMIT_MAX + 1, True, 1.0, "1", None):
        with pytest.raises(EmqError) as info:
            m.browse(bad)
        assert info.value.code == ARG
    assert_snapshot(m.snapshot(), before)  # reads write nothing
    assert QueueModel(Q).browse(10) == []


def test_browse_ignores_other_locations() -> None:
    m = QueueModel(Q)
    world(m)
    assert m.browse(10) == [P]


def test_counts() -> None:
    m = QueueModel(Q)
    assert m.counts() == {"pending": 0, "active": 0, "schedule": 0, "dead": 0}
    world(m)
    m.enqueue(N, b"")
    assert m.counts() == {"pending": 2, "active": 1, "schedule": 1, "dead": 1}
    m.forget_row(N)  # an orphan member still counts: counts are set cardinalities
    assert m.counts() == {"pending": 2, "active": 1, "schedule": 1, "dead": 1}


def test_state_answers() -> None:
    m = QueueModel(Q)
    world(m)
    assert [m.state(i) for i in (P, A, S, D, N)] == ["pending", "active", "schedule", "dead", "absent"]
    m.forget_row(P)  # a member without a row is still in its location
    assert m.state(P) == "pending"
    lose_member(m, S)  # a row in no location
    assert m.state(S) == "unknown"
    assert set(spec.OPS["state"]["answers"]) == {"pending", "active", "schedule", "dead", "unknown", "absent"}
    before = m.snapshot()
    for bad in BAD_IDS:
        with pytest.raises(errors.KindError):
            m.state(bad)
    assert m.snapshot() == before


def test_job_answers() -> None:
    m = QueueModel(Q)
    world(m)
    assert m.job(D) == {"state": b"dead", "attempts": b"1", "payload": b"d", "last_error": b"boom"}
    assert m.job(P) == {"state": b"pending", "attempts": b"0", "payload": b"p"}
    assert m.job(N) is None
    got = m.job(A)
    got["attempts"] = b"99"  # the answer is a copy: mutating it does not touch the model
    assert m.snapshot() == WORLD
    for bad in BAD_IDS:
        with pytest.raises(errors.KindError):
            m.job(bad)


def test_claim_payload_is_bytes_and_token_is_int() -> None:
    m = QueueModel(Q)
    m.enqueue(A, "ü")
    got = m.claim(5, now=0)
    assert got == Claimed(A, "ü".encode(), 1)
    assert type(got.payload) is bytes and type(got.token) is int


def test_claim_never_creates_a_row_and_reports_every_orphan() -> None:
    m = QueueModel(Q)
    ids = [jid(k) for k in range(1, 8)]
    for i in ids:
        m.enqueue(i, b"")
    for i in ids:
        m.forget_row(i)
    assert m.claim(10, now=0) is None
    assert m.last_dropped == tuple(ids)
    assert m.snapshot() == EMPTY
    assert m.claim(10, now=0) is None
    assert m.last_dropped == ()


def test_late_ack_after_reap_then_new_claim_is_stale_for_the_old_token() -> None:
    m = QueueModel(Q)
    m.enqueue(A, b"a")
    assert m.claim(10, now=0).token == 1
    assert m.reap(now=10) == 1
    assert m.claim(10, now=20).token == 2  # a second worker holds it now
    with pytest.raises(errors.StaleError):
        m.complete(A, 1)  # the first worker's ack is stale
    assert m.complete(A, 2) == "ok"
    assert m.snapshot() == snap(completed=1)


def test_attempts_never_reset_across_reprocess() -> None:
    m = QueueModel(Q)
    m.enqueue(A, b"a")
    assert m.claim(10, now=0) == Claimed(A, b"a", 1)
    assert m.retry(A, 1, delay_ms=0, max_attempts=2, error="e1", now=0) == "scheduled"
    assert m.promote(now=0) == 1
    assert m.claim(10, now=0) == Claimed(A, b"a", 2)
    assert m.retry(A, 2, delay_ms=0, max_attempts=2, error="e2", now=0) == "dead"
    assert m.reprocess(A) == "ok"
    assert m.snapshot() == snap(pending=[(A, 0)], rows={A: row("pending", 2, b"a", b"e2")}, failed=1)
    assert m.claim(10, now=0) == Claimed(A, b"a", 3)  # never 1 again: no ABA (T-reprocess-2)
    assert m.snapshot() == snap(active=[(A, 10)], rows={A: row("active", 3, b"a", b"e2")}, failed=1)
    # a worker with a higher cap cannot revive token 2 (T-retry-6)
    with pytest.raises(errors.StaleError):
        m.retry(A, 2, delay_ms=0, max_attempts=99, error=b"", now=0)


def test_diff_names_every_difference_a_stray_key_missing_too() -> None:
    """``diff`` of two unequal snapshots is never empty: a stray key the model expects and
    the target does not report is named (a snapshot.lua that forgets strays)."""
    base = Snapshot.build("q", {loc: [] for loc in spec.LOCATIONS}, {}, 0, 0, ["emq:{q}:job:x"])
    seen = Snapshot.build("q", {loc: [] for loc in spec.LOCATIONS}, {}, 0, 0, [])
    assert diff(base, seen) == ["stray key emq:{q}:job:x is not reported (a key the grammar does not describe)"]
    assert diff(seen, base) == ["stray key emq:{q}:job:x exists"]

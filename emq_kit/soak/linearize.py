"""Linearizability: can a concurrent history be explained by one sequential run of a model
that respects real time? (Wing & Gong's search with Lowe's memo, as in Porcupine.)

A history is a list of ``Op``: what a process asked (``input``), what it was answered
(``output``) and when (``invoke``, ``ret``, on one clock shared by every process). It is
*linearizable* if every op can be given a point in its own ``[invoke, ret]`` interval so
that the model, stepped through the ops in the order of those points, answers every op
as recorded. Ops whose intervals overlap may be ordered either way; an op that returned
before another was invoked comes first. Equal stamps count as overlapping (the lenient
choice: it never turns a linearizable history into an illegal one).

The model is sequential and pure: ``step(state, input, output)`` returns every state the
op can leave when it answered ``output`` from ``state`` (none when it cannot answer that;
several when the model does not decide, e.g. a hidden effect that may or may not
happen). States must be hashable: the search remembers (ops done, state) pairs it has
explored and never explores one twice.

``partition`` splits a history into independent sub-histories checked one by one
(Porcupine's P-compositionality). It is the caller's job to say why that is sound for
its model (for the queue: specs/soak.md).

The search has a budget (wall seconds, and explored states): past it the answer is
``unknown``, never a guess. Pure apart from reading ``time.monotonic`` for the budget.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Iterable, Iterator, Sequence

OK, ILLEGAL, UNKNOWN = "ok", "illegal", "unknown"

State = Hashable
Step = Callable[[Any, Any, Any], Iterable[Any]]
_NONE = object()  # "no unexplored state": states may be None


@dataclass(frozen=True)
class Op:
    """One completed call: ``input`` (hashable) answered ``output``, between ``invoke``
    and ``ret`` (integers on one clock, ``invoke <= ret``)."""

    process: Hashable
    input: Hashable
    output: Any
    invoke: int
    ret: int


@dataclass(frozen=True)
class Model:
    """A sequential specification: the initial state and the step function; optionally
    how to partition a history into independent keyed sub-histories."""

    init: State
    step: Step
    partition: Callable[[Sequence[Op]], Sequence[tuple[Hashable, Sequence[Op]]]] | None = None


@dataclass(frozen=True)
class PartitionVerdict:
    """The answer for one (sub-)history. ``longest`` is the longest linearizable prefix
    the search found, as indexes into ``ops`` (for an ``illegal`` one, the ops after it
    explain why); ``explored`` counts search steps."""

    key: Hashable
    verdict: str
    ops: tuple[Op, ...]
    longest: tuple[int, ...] = ()
    explored: int = 0
    reason: str = ""


@dataclass(frozen=True)
class Result:
    """The answer for a whole history: ``illegal`` if any partition is, else ``unknown``
    if any partition ran out of budget (or was not reached), else ``ok``."""

    verdict: str
    partitions: tuple[PartitionVerdict, ...]
    seconds: float
    ops: int = field(default=0)

    @property
    def illegal(self) -> list[PartitionVerdict]:
        return [p for p in self.partitions if p.verdict == ILLEGAL]

    @property
    def unknown(self) -> list[PartitionVerdict]:
        return [p for p in self.partitions if p.verdict == UNKNOWN]


class _Budget:
    """Wall-clock deadline and a cap on explored states, shared by all partitions."""

    def __init__(self, seconds: float, max_states: int) -> None:
        self.deadline = time.monotonic() + seconds
        self.max_states = max_states

    def spent(self) -> bool:
        return time.monotonic() >= self.deadline


def _events(ops: Sequence[Op]) -> list[int]:
    """Call and return events in time order, calls first on equal stamps. Event ``2i``
    is the call of op ``i``, ``2i+1`` its return."""
    return sorted(range(2 * len(ops)), key=lambda e: (ops[e // 2].ret if e % 2 else ops[e // 2].invoke, e % 2))


def check_ops(model: Model, ops: Sequence[Op], *, key: Hashable = None, seconds: float = 10.0,
              max_states: int = 2_000_000) -> PartitionVerdict:
    """Is ``ops`` (one partition, not split further) linearizable against ``model``?
    ``ok``, ``illegal`` or ``unknown`` past ``seconds`` or ``max_states``."""
    return _search(model, tuple(ops), key, _Budget(seconds, max_states))


def _search(model: Model, ops: tuple[Op, ...], key: Hashable, budget: _Budget) -> PartitionVerdict:
    for op in ops:
        if op.ret < op.invoke:
            raise ValueError(f"op returns before it is invoked: {op}")
    n = len(ops)
    order = _events(ops)
    # A doubly linked list over the events (dancing links): index 2n is the head.
    head = 2 * n
    nxt = [-1] * (2 * n + 1)
    prv = [-1] * (2 * n + 1)
    last = head
    for e in order:
        nxt[last], prv[e] = e, last
        last = e

    def lift(call: int) -> None:
        for e in (call, call + 1):
            nxt[prv[e]] = nxt[e]
            if nxt[e] != -1:
                prv[nxt[e]] = prv[e]

    def unlift(call: int) -> None:
        for e in (call + 1, call):
            nxt[prv[e]] = e
            if nxt[e] != -1:
                prv[nxt[e]] = e

    seen: set[tuple[int, Any]] = set()

    def fresh(alternatives: Iterator[Any], done: int) -> Any:
        for state in alternatives:
            if (done, state) not in seen:
                seen.add((done, state))
                return state
        return _NONE

    state, done = model.init, 0
    stack: list[tuple[int, Any, Iterator[Any]]] = []

    def descend(call: int, alternatives: Iterator[Any]) -> bool:
        """Linearize the op of ``call`` next, into its first unexplored state."""
        nonlocal state, done
        bit = 1 << (call // 2)
        after = fresh(alternatives, done | bit)
        if after is _NONE:
            return False
        stack.append((call, state, alternatives))
        state, done = after, done | bit
        lift(call)
        return True

    longest: tuple[int, ...] = ()
    explored = 0
    e = nxt[head]
    while nxt[head] != -1:
        explored += 1
        if explored % 1024 == 0:
            if budget.spent():
                return PartitionVerdict(key, UNKNOWN, ops, longest, explored, "time budget spent")
            if len(seen) > budget.max_states:
                return PartitionVerdict(key, UNKNOWN, ops, longest, explored, f"more than {budget.max_states} states")
        if e % 2 == 0:  # a call: try to linearize its op here
            op = ops[e // 2]
            e = nxt[head] if descend(e, iter(model.step(state, op.input, op.output))) else nxt[e]
        else:  # a return whose op is not linearized yet: undo the last choice, try its next
            if len(stack) > len(longest):  # a dead end deeper than any before: remember it
                longest = tuple(c // 2 for c, _, _ in stack)
            if not stack:
                return PartitionVerdict(key, ILLEGAL, ops, longest, explored, "no order of the ops explains the answers")
            call, state, alternatives = stack.pop()
            done &= ~(1 << (call // 2))
            unlift(call)
            e = nxt[head] if descend(call, alternatives) else nxt[call]
    return PartitionVerdict(key, OK, ops, tuple(c // 2 for c, _, _ in stack), explored)



def check_linearizable(model: Model, history: Sequence[Op], *, seconds: float = 10.0, max_states: int = 2_000_000) -> Result:
    """Check ``history`` against ``model``, partition by partition, within one budget
    of ``seconds`` for all of them and at most ``max_states`` remembered states per
    partition. Partitions the time budget does not reach are ``unknown``."""
    started = time.monotonic()
    budget = _Budget(seconds, max_states)
    parts = model.partition(history) if model.partition else [(None, history)]
    out: list[PartitionVerdict] = []
    for key, ops in parts:
        if budget.spent():
            out.append(PartitionVerdict(key, UNKNOWN, tuple(ops), reason="not reached within the time budget"))
            continue
        out.append(_search(model, tuple(ops), key, budget))
    verdicts = {v.verdict for v in out}
    verdict = ILLEGAL if ILLEGAL in verdicts else UNKNOWN if UNKNOWN in verdicts else OK
    return Result(verdict, tuple(out), time.monotonic() - started, ops=len(history))

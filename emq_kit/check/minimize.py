"""A counterexample made 1-minimal: no single step of it can go and the rest still show
the same difference.

Why the kit does this after Hypothesis has shrunk: Hypothesis shrinks the draws, not the
calls. A step's arguments come from the model's state (which pending job a hand-deleted
row is, which token a settle carries), so deleting one early step moves what a later
one picks, and the shrinker can stop at a trace with steps the difference does not need
(three enqueues and two claims before the claim of an orphan one enqueue shows). Here
the trace is concrete: a step is deleted and the rest replayed as written, on a fresh
model and the reset target (the layout's replay), and the deletion is kept when the
replay still diverges with the same signature. A difference the once-per-run sweep
found (not shrunk at all) gets the same treatment. First of all go the steps where the
search met a difference it already knew and went on (the two answers differ, the
keyspaces agree): a replay stops at the first of them.

Under the server clock the waits of the run are made steps first: between two clock ops
the server's clock moved on (ticks, waits for a deadline, the calls themselves), and a
replay that runs the steps back to back would see no lease expire. Before each clock op
but the first goes a ``sleep_ms`` step of the time the clock moved since the clock op
before it (``Step.at``, TR-4c). Deleting steps keeps the waits (those between two clock
ops that remain add up); a wait stays unless no pump (promote, reap: the ops whose
outcome depends on how much time passed) comes after it. A wait is never tried
without: a replay that runs slowly passes a deadline by its own pace, so that the
difference showed without a wait proves nothing on a faster machine. A candidate counts
only when two replays in a row show the difference.

The work is bounded by a count of replayed steps, never by time, so a run's traces do
not depend on the machine's load.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

from emq_kit.check.clock import PUMPED
from emq_kit.check.signature import Signature, signature
from emq_kit.check.step import SLEEP, Divergence, Step

STEPS_MAX = 5_000
"""The most steps one counterexample's minimizing may replay in all (a few seconds on the
embedded fakeredis; the counterexamples of the selftest's mutants took at most a few
hundred); past it the trace stays as the last accepted candidate left it."""

Replay = Callable[[list[Step], Any, Any], Any]  # a layout's replay: steps, target, clock -> Replayed


class Minimized(NamedTuple):
    """What ``minimize`` made: the divergence, the steps it replayed, and whether the
    budget stopped it before the trace was 1-minimal."""

    divergence: Divergence
    replayed: int
    cut: bool


def minimize(divergence: Divergence, sig: Signature, target: Any, replay: Replay, clock: Any = None,
             budget: int = STEPS_MAX, settings: tuple[str, ...] = ()) -> Minimized:
    """``divergence`` with its steps as few as deletions can make them, each candidate
    replayed on ``target`` by ``replay``: first the shortest suffix that still diverges
    (1, 2, 4... steps: a difference mostly needs only the steps just before it), then
    chunks, halving down to single steps, then each step with the later steps about the
    same job (an enqueue with the claim that handed its job out). The last step always
    stays, and so do steps of the ``settings`` ops (a layout's example settings: a
    replay must meet the same). ``budget``: the steps it may replay in all. The
    divergence the smallest candidate's replay raised (the original, its waits made
    steps, when none was smaller or the steps do not replay to ``sig`` at all)."""
    steps = timed(divergence.steps)
    best = divergence if steps == divergence.steps else Divergence(
        divergence.kind, divergence.rule, divergence.step, divergence.lines, steps)
    confirm = 2 if getattr(clock, "mode", "virtual") == "server" else 1
    spent, cut = 0, False

    def diverges(candidate: list[Step]) -> Divergence | None:
        """The divergence of ``candidate``'s replays when each shows ``sig``."""
        nonlocal spent, cut
        if len(candidate) == len(steps):
            return None  # nothing deleted (settings steps and waits only)
        found = None
        for _ in range(confirm):  # each replay must show it (a wait it needs is kept)
            if spent + len(candidate) > budget:
                cut = True
                return None
            spent += len(candidate)
            found = replay([Step(s.queue, s.op, s.args) for s in candidate], target, clock).divergence
            if found is None or signature(found) != sig:
                return None
        return found

    def without(chosen: list[Step]) -> list[Step]:
        """``steps`` but the ``chosen`` ones that are not settings or waits."""
        gone = {id(s) for s in chosen if s.op not in settings and s.op != SLEEP}
        return tidy([s for s in steps if id(s) not in gone])

    # The steps where the search met a known difference and went on (answers that differ
    # over keyspaces that agree): a replay stops at the first of them, and deleting them
    # one at a time never gets past the next.
    absorbed = [s for s in steps[:-1] if not _same(s.model, s.target)]
    found = diverges(without(absorbed)) if absorbed else None
    if found is not None:
        best, steps = found, list(found.steps)
    tail = 1
    while tail < len(steps):
        found = diverges(without(steps[:-tail]))
        if found is not None:
            best, steps = found, list(found.steps)
            break
        tail *= 2
    chunk = max(len(steps) // 2, 1)
    while len(steps) > 1 and spent < budget:
        deleted = False
        end = len(steps) - 1  # the diverging step stays
        while end > 0 and spent < budget:
            start = max(end - chunk, 0)
            found = diverges(without(steps[start:end]))
            if found is None and chunk == 1:
                found = diverges(without(_job_steps(steps, start)))
            if found is not None:
                best, steps, deleted = found, list(found.steps), True
                end = min(start, len(steps) - 1)
            else:
                end = start
        if chunk == 1 and not deleted:
            break  # 1-minimal, also by jobs
        chunk = max(chunk // 2, 1)
    return Minimized(best, spent, cut)


def _same(a: Any, b: Any) -> bool:
    return a == b and type(a) is type(b)


def timed(steps: list[Step]) -> list[Step]:
    """``steps`` with the server clock's advance between two clock ops (``Step.at``) made
    a ``sleep_ms`` step before the later one; as they are when no step has a clock."""
    out: list[Step] = []
    last: int | None = None
    for s in steps:
        if s.at is not None:
            if last is not None and s.at > last:
                out.append(Step("", SLEEP, {"ms": s.at - last}))
            last = s.at
        out.append(s)
    return tidy(out) if last is not None else list(steps)


def tidy(steps: list[Step]) -> list[Step]:
    """The waits of ``steps`` where they count: the waits between two clock ops (a step
    with ``Step.at``) as one, just before the later; none before the first clock op
    (nothing before it reads the clock) nor where no pump comes after (only a pump's
    outcome depends on how much time passed)."""
    clocked = [i for i, s in enumerate(steps) if s.at is not None]
    pumped = [i for i in clocked if steps[i].op in PUMPED]
    out: list[Step] = []
    waited = 0
    for i, s in enumerate(steps):
        if s.op == SLEEP:
            waited += s.args["ms"]
            continue
        if s.at is not None:
            if waited and i > clocked[0] and pumped and i <= pumped[-1]:
                out.append(Step("", SLEEP, {"ms": waited}))
            waited = 0
        out.append(s)
    return out


def _job_steps(steps: list[Step], i: int) -> list[Step]:
    """Step ``i`` and the later steps (but the last) about a job it is about: deleting
    an enqueue alone moves which job every later claim hands out."""
    jobs = _jobs(steps[i])
    return [s for j, s in enumerate(steps) if j == i or (i < j < len(steps) - 1 and jobs & _jobs(s))]


def _jobs(step: Step) -> set[str]:
    """The job ids a step names: in its arguments and in the model's answer."""
    named = [step.args.get("id"), *(step.args.get("ids") or ())] if isinstance(step.args, dict) else []
    answer = step.model
    answers = [answer] if hasattr(answer, "id") or not isinstance(answer, (list, tuple)) else answer
    named += [getattr(a, "id", None) for a in answers]  # a claim's Claimed, a batch's list
    return {n for n in named if isinstance(n, str)}

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
found (not shrunk at all) gets the same treatment.

The work is bounded by a count of replayed steps, never by time, so a run's traces do
not depend on the machine's load.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

from emq_kit.check.machine import Divergence, Step
from emq_kit.check.signature import Signature, signature

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
    divergence the smallest candidate's replay raised (the original when none was
    smaller, or when the steps do not replay to ``sig`` at all)."""
    best, steps = divergence, list(divergence.steps)
    spent, cut = 0, False

    def diverges(candidate: list[Step]) -> Divergence | None:
        nonlocal spent, cut
        if len(candidate) == len(steps):
            return None  # nothing deleted (settings steps only)
        if spent + len(candidate) > budget:
            cut = True
            return None
        spent += len(candidate)
        found = replay([Step(s.queue, s.op, s.args) for s in candidate], target, clock).divergence
        return found if found is not None and signature(found) == sig else None

    def without(chosen: list[Step]) -> list[Step]:
        """``steps`` but the ``chosen`` ones that are not settings."""
        gone = {id(s) for s in chosen if s.op not in settings}
        return [s for s in steps if id(s) not in gone]

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

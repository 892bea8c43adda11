"""The lanes of a soak (lifecycle.md §10): which group each job was put on, and per group
the share of the grouped claims it got and the longest a job of it waited for its
first one. Pure: no I/O.

A job's *wait* runs from the invoke of its ``lane_enqueue`` to the return of the first
``lane_claim`` that answered it (a retried job's later claims are not waits: it came
back through schedule). A job never served by a lane claim has no wait; the accounting
and the history check say what became of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from emq_kit.soak.history import Event


@dataclass(frozen=True)
class LaneService:
    """One group's service in a run: ``jobs`` put on its lane, ``served`` grouped claims
    that answered one of them, their ``share`` of every grouped claim that answered a
    job, and the longest wait (ms) of one of its jobs for its first claim."""

    group: str
    jobs: int
    served: int
    share: float
    longest_wait_ms: float

    def to_json(self) -> dict[str, Any]:
        return {"group": self.group, "jobs": self.jobs, "served": self.served, "share": round(self.share, 4),
                "longest_wait_ms": round(self.longest_wait_ms, 3)}


def _entered(events: list[Event]) -> dict[str, tuple[str, int]]:
    """Per job put on a lane: its group and the invoke of its ``lane_enqueue``."""
    return {e.args["id"]: (e.args["group"], e.invoke) for e in events
            if e.op == "lane_enqueue" and e.output == "enqueued"}


def _claims(events: list[Event]) -> list[Event]:
    return [e for e in events if e.op == "lane_claim" and e.output is not None]


def mismatches(events: Iterable[Event]) -> list[str]:
    """Grouped claims that answered a job with another group than the one it was put
    on (or a job never put on a lane): each in words."""
    ordered = sorted(events, key=lambda e: e.invoke)
    entered = _entered(ordered)
    return [f"{e.process}: lane_claim answered {e.output[0]} of group {e.output[3]!r}, put on "
            f"{entered.get(e.output[0], ('no lane',))[0]!r}"
            for e in _claims(ordered) if entered.get(e.output[0], ("",))[0] != e.output[3]]


def service(events: Iterable[Event]) -> list[LaneService]:
    """Per group, in order of group name: its jobs, claims, share and longest wait (a
    mismatched claim, see ``mismatches``, is left out)."""
    ordered = sorted(events, key=lambda e: e.invoke)
    entered = _entered(ordered)
    served: dict[str, int] = {}
    waits: dict[str, float] = {}
    first: set[str] = set()
    for e in _claims(ordered):
        job, group = e.output[0], e.output[3]
        if entered.get(job, ("",))[0] != group:
            continue
        served[group] = served.get(group, 0) + 1
        if job not in first:
            first.add(job)
            waits[group] = max(waits.get(group, 0.0), (e.ret - entered[job][1]) / 1e6)
    total = sum(served.values())
    jobs: dict[str, int] = {}
    for group, _ in entered.values():
        jobs[group] = jobs.get(group, 0) + 1
    return [LaneService(g, jobs[g], served.get(g, 0), served.get(g, 0) / total if total else 0.0, waits.get(g, 0.0))
            for g in sorted(jobs)]

"""The ledger of a soak: per job, what the processes saw acknowledged, and the end-of-run
accounting of every job against the final snapshot (specs/soak.md, "Accounting").

Every job that was enqueued (or scheduled) must end completed exactly once — exactly one
``complete`` answered ``ok``, and no trace of it left — or dead-lettered: in ``dead``,
never completed. The counters must agree: ``completed`` with the number of ``ok``
completions, ``failed`` with the number of dead jobs (a soak never reprocesses or
removes, so each dead-lettering leaves exactly one id in dead). Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

from emq_kit.soak.history import SNAPSHOT, Event
from emq_model.snapshot import Snapshot

_CREATED = {"enqueue": "enqueued", "schedule": "scheduled", "lane_enqueue": "enqueued"}
_CLAIMS = ("claim", "lane_claim")


@dataclass(frozen=True)
class Ack:
    """One answer a process saw about a job: the op, the token it carried (claim: the
    token it got) and the answer (or refusal code)."""

    process: str
    op: str
    token: int | None
    answer: str


def ledger(events: Iterable[Event]) -> dict[str, list[Ack]]:
    """Per job, every answer about it, in invoke order."""
    out: dict[str, list[Ack]] = {}
    for e in sorted(events, key=lambda e: e.invoke):
        if e.op in _CLAIMS:
            if e.output is not None:
                job, _, token = e.output[:3]
                out.setdefault(job, []).append(Ack(e.process, e.op, token, "claimed"))
        elif "id" in e.args and e.op != SNAPSHOT:
            out.setdefault(e.args["id"], []).append(Ack(e.process, e.op, e.args.get("token"), str(e.output)))
    return out


@dataclass(frozen=True)
class Accounting:
    """The fate of every job. ``completed`` counts jobs completed exactly once, ``dead``
    jobs dead-lettered; the tuples name the jobs that broke the rule; ``problems`` are
    counter mismatches and ids nobody created."""

    created: int
    completed: int
    dead: int
    lost: tuple[str, ...]
    duplicated: tuple[str, ...]
    unsettled: tuple[str, ...]
    problems: tuple[str, ...]

    @property
    def clean(self) -> bool:
        return not (self.lost or self.duplicated or self.unsettled or self.problems)


def account(events: Sequence[Event], final: Snapshot, snapshots: Sequence[Snapshot] = ()) -> Accounting:
    """Judge every created job by the ledger and the final snapshot. A job seen in two
    locations in any of ``snapshots`` (mid-flight) or ``final`` counts as duplicated."""
    book = ledger(events)
    created = {job for job, acks in book.items() if any(_CREATED.get(a.op) == a.answer for a in acks)}
    oks = {job: sum(a.op == "complete" and a.answer == "ok" for a in acks) for job, acks in book.items()}
    where: dict[str, list[str]] = {}
    for loc, member, _ in final.members():
        where.setdefault(member, []).append(loc)
    rows = final.row_map()
    twice = {m for snap in (*snapshots, final) for m in _in_two_sets(snap)}

    completed, dead = 0, 0
    lost, duplicated, unsettled = [], [], []
    for job in sorted(created):
        locs, present = where.get(job, []), job in where or job in rows
        if oks.get(job, 0) > 1 or job in twice or (oks.get(job, 0) == 1 and present):
            duplicated.append(job)
        elif oks.get(job, 0) == 1:
            completed += 1
        elif locs == ["dead"] and job in rows:
            dead += 1
        elif not present:
            lost.append(job)
        else:
            unsettled.append(job)

    problems = []
    acked = sum(oks.get(job, 0) for job in created)
    if final.completed != acked:
        problems.append(f"counter completed is {final.completed}, but {acked} completions were answered ok")
    in_dead = len(final.dead)
    if final.failed != in_dead:
        problems.append(f"counter failed is {final.failed}, but {in_dead} jobs are dead")
    strangers = sorted(final.ids() - created)
    if strangers:
        problems.append(f"{len(strangers)} ids nobody created: {', '.join(strangers[:5])}")
    return Accounting(len(created), completed, dead, tuple(lost), tuple(duplicated), tuple(unsettled),
                      tuple(problems))


def _in_two_sets(snapshot: Snapshot) -> set[str]:
    seen: set[str] = set()
    twice: set[str] = set()
    for _, member, _ in snapshot.members():
        (twice if member in seen else seen).add(member)
    return twice

"""The invariants INV-1..7 of specs/lifecycle.md §7, checked on a snapshot.

``check_invariants`` never stops at the first violation: it reports every one, each naming the
invariant, the id (or key) and what was seen, so a counterexample explains itself.
"""

from __future__ import annotations

from typing import NamedTuple

from .branded_id import is_valid
from .snapshot import Snapshot, canonical_int
from .spec import ROW_FIELDS, STATE_OF

_REQUIRED = ("state", "attempts", "payload")


class Violation(NamedTuple):
    """One broken invariant: its number (``INV-3``), the id or key, and what was seen."""

    invariant: str
    id: str | None
    seen: str

    def __str__(self) -> str:
        return f"{self.invariant} {self.id or '-'}: {self.seen}"


def _attempts(row: dict[str, bytes]) -> int | None:
    return canonical_int(row.get("attempts"))


def check_invariants(snapshot: Snapshot, previous: Snapshot | None = None, *, born: int = 0) -> list[Violation]:
    """Every violation of INV-1..7 in ``snapshot``; INV-5 and INV-7 also compare with the
    ``previous`` snapshot of the same queue when it is given. ``born`` bounds how many
    jobs may have been created since ``previous`` (0 when nothing ran in between but one
    step): a job created and completed between two snapshots is in neither, yet counts."""
    out: list[Violation] = []
    rows = snapshot.row_map()
    held: dict[str, list[str]] = {}
    for loc, member, score in snapshot.members():
        held.setdefault(member, []).append(loc)
        if not is_valid(member, "JOB"):
            out.append(Violation("INV-6", member, f"member of {loc} is not a well-formed JOB id"))
        if loc in ("pending", "dead") and score != 0:
            out.append(Violation("INV-4", member, f"score in {loc} is {score}, not 0"))
        elif not isinstance(score, int) or score < 0:
            out.append(Violation("INV-4", member, f"score in {loc} is {score}, not a non-negative integer"))

    for member, locs in sorted(held.items()):
        if len(locs) > 1:
            out.append(Violation("INV-1", member, f"is in {' and in '.join(locs)}"))
        if member not in rows:
            out.append(Violation("INV-2", member, f"is in {locs[0]} but has no row (orphan member)"))
            continue
        state = rows[member].get("state")
        expected = STATE_OF[locs[0]].encode()
        if len(locs) == 1 and state != expected:
            out.append(Violation("INV-3", member, f"row state is {state!r} but the id is in {locs[0]}"))

    for job_id, row in sorted(rows.items()):
        if job_id not in held:
            out.append(Violation("INV-2", job_id, f"row (state {row.get('state')!r}) is in no location (orphan row)"))
        if not is_valid(job_id, "JOB"):
            out.append(Violation("INV-6", job_id, "row key does not end in a well-formed JOB id"))
        extra = sorted(set(row) - set(ROW_FIELDS))
        missing = [f for f in _REQUIRED if f not in row]
        if extra or missing:
            out.append(Violation("INV-6", job_id, f"row fields: extra {extra}, missing {missing}"))
        attempts = _attempts(row)
        if attempts is None:
            out.append(Violation("INV-5", job_id, f"attempts is {row.get('attempts')!r}, not a canonical integer"))
        elif "active" in held.get(job_id, ()) and attempts < 1:
            out.append(Violation("INV-5", job_id, f"active with attempts {attempts}"))

    for key in snapshot.stray:
        out.append(Violation("INV-6", key, "key under the queue prefix is outside the grammar"))
    for name in ("completed", "failed"):
        if getattr(snapshot, name) < 0:
            out.append(Violation("INV-7", None, f"counter {name} is {getattr(snapshot, name)}"))

    if previous is not None:
        out.extend(_against(snapshot, previous, rows, born))
    return out


def _against(snapshot: Snapshot, previous: Snapshot, rows: dict[str, dict[str, bytes]], born: int) -> list[Violation]:
    """INV-5 (attempts never decrease) and INV-7 (counters move with the jobs)."""
    out: list[Violation] = []
    before = previous.row_map()
    for job_id, row in sorted(rows.items()):
        now_attempts, was = _attempts(row), before.get(job_id)
        then_attempts = _attempts(was) if was is not None else None
        if now_attempts is not None and then_attempts is not None and now_attempts < then_attempts:
            out.append(Violation("INV-5", job_id, f"attempts went from {then_attempts} to {now_attempts}"))

    for name in ("completed", "failed"):
        then, now = getattr(previous, name), getattr(snapshot, name)
        if now < then:
            out.append(Violation("INV-7", None, f"counter {name} went from {then} to {now}"))
    vanished = len(previous.ids() - snapshot.ids())
    if snapshot.completed - previous.completed > vanished + born:
        out.append(Violation("INV-7", None, f"completed grew by {snapshot.completed - previous.completed} "
                                            f"but only {vanished} jobs vanished" + (f" and {born} were born" if born else "")))
    was_dead = {m for m, _ in previous.dead}
    entered = len({m for m, _ in snapshot.dead} - was_dead)
    if snapshot.failed - previous.failed > entered:
        out.append(Violation("INV-7", None, f"failed grew by {snapshot.failed - previous.failed} "
                                            f"but only {entered} jobs entered dead"))
    return out


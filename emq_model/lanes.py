"""Lanes — the per-group pending sets, the ring and the lane hashes of one queue, in
memory (specs/lifecycle.md §10). Pure: ``QueueModel`` owns one ``Lanes`` and calls it
from its transitions; every rule about which lane is serviceable and where it sits on
the ring lives here.
"""

from __future__ import annotations

from typing import NamedTuple


class LaneClaimed(NamedTuple):
    """A grouped claim's answer: the id, its payload, the fencing token and its group."""

    id: str
    payload: bytes
    token: int
    group: str


class Lanes:
    """``pending`` maps group -> {id: 0} (an empty lane is no entry); ``ring`` is the list
    of serviceable groups in ring order (LANE-4); ``glimit``, ``gactive`` and ``gweight``
    hold only non-default values (no limit, 0 active, weight 1 are absences)."""

    def __init__(self) -> None:
        self.pending: dict[str, dict[str, int]] = {}
        self.ring: list[str] = []
        self.paused: set[str] = set()
        self.glimit: dict[str, int] = {}
        self.gactive: dict[str, int] = {}
        self.gweight: dict[str, int] = {}
        self.noted: set[str] = set()  # the ids added to or dropped from a lane (INC-1)

    def serviceable(self, group: str) -> bool:
        """LANE-4: the lane is not empty, not paused, and below its limit."""
        if not self.pending.get(group) or group in self.paused:
            return False
        return group not in self.glimit or self.gactive.get(group, 0) < self.glimit[group]

    def settle(self, group: str) -> None:
        """LANE-4: the lane joins the ring's tail the moment it became serviceable and
        leaves the ring the moment it stopped being so; otherwise it keeps its place."""
        want, there = self.serviceable(group), group in self.ring
        if want and not there:
            self.ring.append(group)
        elif there and not want:
            self.ring.remove(group)

    def turn(self) -> str | None:
        """One step of the ring (``LMOVE ring ring LEFT RIGHT``): the head group, now at
        the tail, or ``None`` when the ring is empty."""
        if not self.ring:
            return None
        self.ring.append(self.ring.pop(0))
        return self.ring[-1]

    def head(self, group: str) -> str:
        """The lowest id of a non-empty lane (score 0: byte order, mint order)."""
        return min(self.pending[group], key=lambda m: m.encode())

    def members(self, group: str) -> list[str]:
        """The ids of a lane in lane order (its head first); ``[]`` for an empty lane."""
        return sorted(self.pending.get(group, {}), key=lambda m: m.encode())

    def holds(self, group: str, job_id: str) -> bool:
        return job_id in self.pending.get(group, {})

    def add(self, group: str, job_id: str) -> None:
        self.noted.add(job_id)
        self.pending.setdefault(group, {})[job_id] = 0

    def discard(self, group: str, job_id: str) -> None:
        members = self.pending.get(group)
        if members is not None:
            self.noted.add(job_id)
            members.pop(job_id, None)
            if not members:
                del self.pending[group]

    def acquire(self, group: str) -> None:
        """A job of ``group`` entered active."""
        self.gactive[group] = self.gactive.get(group, 0) + 1

    def release(self, group: str) -> None:
        """A job of ``group`` left active: the count drops, and a zero count is no field."""
        left = self.gactive.get(group, 0) - 1
        if left > 0:
            self.gactive[group] = left
        else:
            self.gactive.pop(group, None)

    def weight(self, group: str) -> int:
        return self.gweight.get(group, 1)

    def pause(self, group: str) -> None:
        self.paused.add(group)
        self.settle(group)

    def resume(self, group: str) -> None:
        self.paused.discard(group)
        self.settle(group)

    def limit(self, group: str, n: int) -> None:
        """``n`` = 0 removes the limit; else the lane serves while fewer than ``n`` of its
        jobs are active."""
        if n == 0:
            self.glimit.pop(group, None)
        else:
            self.glimit[group] = n
        self.settle(group)

    def set_weight(self, group: str, w: int) -> None:
        if w == 1:
            self.gweight.pop(group, None)
        else:
            self.gweight[group] = w

    def hashes(self) -> dict[str, dict[str, int]]:
        return {"glimit": dict(self.glimit), "gactive": dict(self.gactive), "gweight": dict(self.gweight)}

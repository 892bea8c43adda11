"""What a run generates: the ops it may send, the arguments never drawn, its hostile
calls, whether it goes on after a difference and the background jobs each queue holds
before an example (``emq check``'s ``--ops``, ``--skip-ops``, ``--hostile``, ``--first``
and ``--depth``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from emq_model import errors

HOSTILE = ("both", "off", "only")
"""``--hostile``: spoiled arguments, bad ids and bad queue names sent among valid calls
(both), never (off: a lifecycle-only run), or on every call that can carry one (only)."""
REFUSALS_OF_ARGUMENTS = ("EMQKIND", "EMQARG")
"""The outcomes only hostile calls reach: out of focus under ``--hostile off``, the only
ones in focus under ``--hostile only``."""
DRAINED = frozenset({("claim", "empty")})
"""The cells a call reaches only when a queue's pending set is empty: out of a deep run's
gate (DEPTH-2), whose background jobs keep it full."""


@dataclass(frozen=True)
class Focus:
    """What the machine generates: ``ops`` the target may be sent (None: every op),
    ``absent`` arguments never drawn ({op: names}), ``hostile`` (HOSTILE) and
    ``report`` (go on after a difference, collecting every distinct one; off: the first
    divergence of any signature fails the example); ``depth``, the background jobs
    each queue is filled with before every example (specs/lifecycle.md DEPTH-1)."""

    ops: frozenset[str] | None = None
    absent: dict[str, tuple[str, ...]] = field(default_factory=dict)
    hostile: str = "both"
    report: bool = True
    depth: int = 0

    def allows(self, op: str) -> bool:
        return self.ops is None or op in self.ops

    def gates(self, cell: tuple[str, str]) -> bool:
        """Whether the coverage gate may demand ``cell`` at this depth (DEPTH-2)."""
        return not (self.depth and cell in DRAINED)

    def implements(self, cell: tuple[str, str]) -> bool:
        """Whether the target is sent calls that can reach ``cell``: its op, and for a
        wrong-typed key's refusal (CC-8) the key faults (a serverless driver may lack them)."""
        return self.allows(cell[0]) and (cell[1] != errors.TYPE or self.allows("spoil_key"))

    def reaches(self, cell: tuple[str, str]) -> bool:
        """Whether the run can reach ``cell`` at all (its op allowed, its outcome one the
        hostile setting sends calls for, raw calls being hostile): the cells its gate and
        its count of cells are over."""
        if not self.implements(cell) or not self.gates(cell):
            return False
        hostile = cell[0] == "raw" or cell[1] in REFUSALS_OF_ARGUMENTS
        return {"both": True, "off": not hostile, "only": hostile}[self.hostile]

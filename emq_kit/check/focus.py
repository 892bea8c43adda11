"""What a run generates: the ops it may send, the arguments never drawn, its hostile
calls, whether it goes on after a difference and the background jobs each queue holds
before an example (``emq check``'s ``--ops``, ``--skip-ops``, ``--hostile``, ``--first``
and ``--depth``)."""

from __future__ import annotations

from dataclasses import dataclass, field

HOSTILE = ("both", "off", "only")
"""``--hostile``: spoiled arguments, bad ids and bad queue names sent among valid calls
(both), never (off: a lifecycle-only run), or on every call that can carry one (only)."""
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

"""What a run generates: the ops it may send, the arguments never drawn, its hostile
calls, and whether it goes on after a difference (``emq check``'s ``--ops``,
``--skip-ops``, ``--hostile`` and ``--first``)."""

from __future__ import annotations

from dataclasses import dataclass, field

HOSTILE = ("both", "off", "only")
"""``--hostile``: spoiled arguments, bad ids and bad queue names sent among valid calls
(both), never (off: a lifecycle-only run), or on every call that can carry one (only)."""


@dataclass(frozen=True)
class Focus:
    """What the machine generates: ``ops`` the target may be sent (None: every op),
    ``absent`` arguments never drawn ({op: names}), ``hostile`` (HOSTILE) and
    ``report`` (go on after a difference, collecting every distinct one; off: the first
    divergence of any signature fails the example)."""

    ops: frozenset[str] | None = None
    absent: dict[str, tuple[str, ...]] = field(default_factory=dict)
    hostile: str = "both"
    report: bool = True

    def allows(self, op: str) -> bool:
        return self.ops is None or op in self.ops

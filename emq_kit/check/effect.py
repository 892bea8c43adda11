"""A difference's class by its effect (specs/trace.md TR-13):
*lifecycle* when the target's keyspace differs from the model's after the diverging step
(locations, rows, counters) or an invariant breaks by the target's doing; *surface*
when only the answer (a refusal code, a value) differs and the keyspace is the model's.
Invariant evidence names only what the target did (``emq_model.invariants.beyond``).
"""

from __future__ import annotations

from emq_model.snapshot import Snapshot

LIFECYCLE, SURFACE = "lifecycle", "surface"
CLASSES = (LIFECYCLE, SURFACE)
"""The classes, in the order a report lists them."""


def klass(kind: str, op: str, mine: Snapshot | None, theirs: Snapshot | None) -> str:
    """The class of a divergence of ``kind`` at a step of ``op``, from both keyspaces after
    it (``None`` where a keyspace could not be read: a driver that died). A refused queue
    name (``queue``) has no keyspace to change: surface unless it is the snapshot."""
    if kind != "answer":
        return LIFECYCLE  # the keyspace differs (snapshot) or an invariant broke (invariant)
    if op == "queue":
        return SURFACE
    return SURFACE if mine is not None and theirs is not None and mine == theirs else LIFECYCLE

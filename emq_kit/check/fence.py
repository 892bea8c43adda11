"""The fence a port runs under as a difference (specs/driver-protocol.md DP-9d, KS-6).

A driver reports at ``init`` the ``{emq}:version`` value it found or wrote. A value other
than the contract's wire version is not a dead end: the run checks the port all the same
and reports the value as one surface difference, ``init/fence KS-6``, which an
expectations file can list like any other. It has no steps and no trace: it is what
``init`` answered, before the first example."""

from __future__ import annotations

from typing import Any

from emq_kit.check.machine import Divergence, Step
from emq_kit.check.signature import Signature
from emq_model import keyspace, spec

SIGNATURE = Signature("init/fence", "KS-6")


def fence_divergence(target: Any) -> Divergence | None:
    """The divergence (``SIGNATURE``'s, no steps) of a target whose port fences under
    another wire version, or None (no fence, or the contract's)."""
    fence = getattr(target, "fence", None)
    if fence is None or fence == spec.WIRE_VERSION:
        return None
    step = Step("", "init", {}, model=spec.WIRE_VERSION, target=fence, index=0)
    lines = [f"the contract's wire version is {spec.WIRE_VERSION!r} (transitions.json wire_version)",
             f"the port runs under {keyspace.VERSION_KEY} = {fence!r}"]
    return Divergence("answer", SIGNATURE.rule, step, lines, steps=[])

"""The fence a port runs under as a difference (specs/driver-protocol.md DP-9d, KS-6).

A driver reports at ``init`` the ``{emq}:version`` value it found or wrote. A value other
than the contract's wire version is not a dead end: the run checks the port all the same
and reports the value as one surface difference, ``init/fence KS-6``, which an
expectations file can list like any other. It has no steps and no trace: it is what
``init`` answered, before the first example."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

from emq_kit.check.signature import Signature
from emq_kit.check.step import Divergence, Step
from emq_model import keyspace, spec

SIGNATURE = Signature("init/fence", "KS-6")


def fence_divergence(target: Any) -> Divergence | None:
    """The divergence (``SIGNATURE``'s, no steps) of a target whose port fences under
    another wire version, or None (no fence, or the contract's)."""
    fence = target.capabilities.fence
    if fence is None or fence == spec.WIRE_VERSION:
        return None
    step = Step("", "init", {}, model=spec.WIRE_VERSION, target=fence, index=0)
    lines = [f"the contract's wire version is {spec.WIRE_VERSION!r} (transitions.json wire_version)",
             f"the port runs under {keyspace.VERSION_KEY} = {fence!r}"]
    return Divergence("answer", SIGNATURE.rule, step, lines, steps=[])


@contextmanager
def refenced(url: str) -> Iterator[bytes | None]:
    """``--refence``: the server at ``url`` runs under the contract's wire version for
    the run, and gets back the value it held after it (however the run ends). Yields
    the value it held (None: it held none, or ours, and nothing is changed). Our
    scripts refuse every call under another value (KS-6): without this a server fenced
    by another port is a dead end for them."""
    from emq_live.client import connect

    conn = connect(url, fence=False)
    try:
        held = conn.redis.get(keyspace.VERSION_KEY)
        if held is None or held == spec.WIRE_VERSION.encode():
            yield None
            return
        conn.redis.set(keyspace.VERSION_KEY, spec.WIRE_VERSION)
        try:
            yield held
        finally:
            conn.redis.set(keyspace.VERSION_KEY, held)
    finally:
        conn.close()

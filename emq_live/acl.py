"""The least-privilege ACL of a client (``specs/acl.json``): the key patterns and the
commands a Valkey user needs to run the client and ``emq check``, and nothing more."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any


def spec() -> dict[str, Any]:
    """``specs/acl.json``, parsed."""
    return json.loads(resources.files("emq_specs").joinpath("acl.json").read_text("utf-8"))


def rules(*, cluster: bool = False, audit: bool = False, tracking: bool = False) -> list[str]:
    """The ACL rules after ``reset on >PASSWORD``: key patterns, then ``+command``s
    (with the ones redis-py's cluster client needs when ``cluster``) — of a client, or of
    the read-only ``emq audit`` user when ``audit``; with ``tracking``, a deep run's
    reading by change too (DEPTH-3)."""
    s = spec()
    part = s["audit"] if audit else s
    commands = list(part["commands"]) + (list(s["cluster_commands"]) if cluster else [])
    return list(part["keys"]) + ["+" + c for c in commands] + (list(s["tracking"]["rules"]) if tracking else [])


def setuser(user: str = "emq", password: str = "PASSWORD", *, cluster: bool = False, audit: bool = False,
            tracking: bool = False) -> str:
    """The ``ACL SETUSER`` command line for ``user`` (``reset`` first: no other rights)."""
    return " ".join(["ACL SETUSER", user, "reset", "on", ">" + password,
                     *rules(cluster=cluster, audit=audit, tracking=tracking)])

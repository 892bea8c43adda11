"""The machine's queue names and job ids, and the values outside each argument's type:
what it draws from that others read too (a run's names on a server, a port's ``init``,
a trace's validation).
"""

from __future__ import annotations

from typing import Any

from emq_model import branded_id, spec

# Two queues per run so a leak across queues shows; the second name carries glob
# metacharacters and non-ASCII so a snapshot that scans keys without escaping, or that
# mangles UTF-8, diverges.
QUEUES = ("alpha", "β*[x]")

# A small id pool makes duplicates, foreign tokens and re-enqueues after completion common.
POOL = tuple(branded_id.encode("JOB", branded_id.snowflake(branded_id.EPOCH_MS + 1000 * i, 1, i)) for i in range(1, 9))



def background(n: int) -> list[str]:
    """The ids of a deep queue's ``n`` background jobs (DEPTH-1): apart from ``POOL`` and
    after it in byte order, so a claim meets the pool's pending jobs first."""
    base = branded_id.EPOCH_MS + 10**12
    return [branded_id.encode("JOB", branded_id.snowflake(base + i, 2, 0)) for i in range(n)]


# Malformed and foreign ids: each must be refused with EMQKIND before anything else.
BAD_IDS = (
    "", "JOB", "JOBzzzzzzzzzzz", "ORD0KHTOWnGLuC", "job0KHTOWnGLuC", "J0B0KHTOWnGLuC",
    "JOB0KHTOWnGLu", "JOB0KHTOWnGLuCC", "JOB0KHTOWnGL-C", "JOBé0KHTOWnGL", " JOB0KHTOWnGLu",
    42, None, b"JOB0KHTOWnGLuC",
)
BAD_QUEUES = ("", "a{b", "a}b", "a b", "tab\tq", "nl\n", "nul\x00", "del\x7f", "x" * 129, 7)
GROUP_MAX = spec.bound(spec.TYPES["group"]["max_bytes"])  # a lane's group name, in bytes (LANE-2)
BAD_GROUPS = ("", "a b", "a:b", "a{b}", "ü", "x" * (GROUP_MAX + 1), 7, None, b"g")


def bad_values(arg: dict[str, Any]) -> list[Any]:
    """Values outside an argument's type, from the spec table."""
    t = spec.TYPES[arg["type"]]
    if arg["type"] == "job_id":
        return list(BAD_IDS)
    if arg["type"] == "group":
        return list(BAD_GROUPS)
    if arg["type"] in ("payload", "text"):
        too_long = [b"x" * (spec.bound(t["max_bytes"]) + 1)] if "max_bytes" in t else []
        return [7, 1.5, ["list"]] + too_long
    lo, hi = spec.bound(t["min"]), spec.bound(t["max"])
    bad = [lo - 1, hi + 1, 1.5, str(lo + 1), True]
    return bad if arg.get("optional") else bad + [None]

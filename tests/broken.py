"""Hand-broken variants of our scripts, one per failure class (its ``why`` names the rule
it breaks): each is one textual edit of one script, applied to a copy of ``emq_live/lua``.
An edit that no longer applies exactly once raises, so a variant cannot silently turn
into the unbroken script when the scripts change. Used by the teeth tests and the trace
corpus.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from emq_kit.selftest.mutation import copy_scripts


class Broken(NamedTuple):
    name: str
    script: str
    old: str
    new: str
    why: str


VARIANTS = [
    Broken("missing-zrem", "complete", 'redis.call("ZREM", k[loc], a.id)\n', "",
           "complete deletes the row but leaves the id in active (INV-2 orphan member)"),
    Broken("missing-del", "complete", 'redis.call("DEL", k.row)\n', "",
           "complete leaves the row behind (INV-2 orphan row)"),
    Broken("state-not-written", "claim", '  redis.call("HSET", row, "state", emq.states.active)\n', "",
           "claim moves the id but the row still says pending (INV-3)"),
    Broken("token-not-checked", "lib", "if attempts ~= a.token then",
           "if false then", "complete (retry, extend) accepts any token (T-complete-3)"),
    Broken("reprocess-resets-attempts", "reprocess", 'redis.call("HSET", k.row, "state", emq.states.pending)',
           'redis.call("HSET", k.row, "state", emq.states.pending, "attempts", "0")',
           "reprocess revives old tokens (INV-5, T-reprocess-2)"),
    Broken("promote-strict", "lib", '"-inf", emq.int(a.now), "BYSCORE"', '"-inf", "(" .. emq.int(a.now), "BYSCORE"',
           "promote (and reap: one pump) uses < for <= (T-promote-1)"),
    Broken("write-before-validation", "retry", 'local loc, attempts = emq.live_attempt(a, {"active", "pending"})',
           'redis.call("HSET", k.row, "last_error", a.error)\n'
           'local loc, attempts = emq.live_attempt(a, {"active", "pending"})',
           "a refused retry has already written last_error (CC-5)"),
    Broken("claim-resurrects-orphan", "claim", "if row then", "if true then",
           "claim turns an orphan member into a payload-less row (T-claim-2)"),
    Broken("complete-from-schedule", "complete", 'emq.live_attempt(a, {"active", "pending"}, "gone")',
           'emq.live_attempt(a, emq.locations, "gone")',
           "complete settles a job sitting in schedule or dead (T-complete-2)"),
    Broken("retry-two-sets", "retry", 'redis.call("ZREM", k[loc], id)\n', "",
           "retry adds the id to schedule or dead without leaving active (INV-1)"),
    Broken("reap-ignores-max-attempts", "reap",
           "if a.max_attempts and attempts and attempts >= a.max_attempts then", "if false then",
           "a poison job is requeued forever (T-reap-2)"),
    Broken("extend-non-active", "extend", 'emq.live_attempt(a, {"active"})', 'emq.live_attempt(a, {"active", "pending"})',
           "extend puts a reaped (pending) job back in active: two sets (T-extend-1)"),
    Broken("lane-plan-skips-head", "lane_claim", "for i = 0, redis.call(\"LLEN\", ring) - 1 do",
           "for i = 1, redis.call(\"LLEN\", ring) - 1 do",
           "a grouped claim does not type the ring's first lane: a spoiled one fails mid-script (CC-8)"),
    Broken("lane-plan-overreach", "lane_claim", "if found > 0 then", "if found > 1 then",
           "a grouped claim types lanes past the one it serves: a spoiled later lane refuses a good claim (CC-8)"),
]


def broken_dir(variant: Broken, where: Path) -> Path:
    """A copy of our scripts with ``variant``'s one edit applied."""

    def edit(text: str) -> str:
        assert text.count(variant.old) == 1, f"{variant.name}: the edit must apply exactly once to {variant.script}.lua"
        return text.replace(variant.old, variant.new)

    out = where / variant.name
    out.mkdir()
    return copy_scripts(out, variant.script, edit)


def variant(name: str) -> Broken:
    """The variant called ``name``."""
    return next(v for v in VARIANTS if v.name == name)

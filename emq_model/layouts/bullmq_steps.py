"""Random steps against the BullMQ layout: which op, with which arguments, drawn from the
model's state so that most steps do something and some are refused (stale tokens,
unknown ids, wrong locations). Pure: the ``random.Random`` is a parameter.

A step is ``(op, args)``; ``BullModel`` and ``BullTarget`` take the same ``args``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from .bullmq import NO_LOCK, BullModel

OPS = (
    "add", "take", "complete", "fail", "retry", "backoff", "promote",
    "check_stalled", "extend", "remove", "reprocess", "lapse",
)  # fmt: skip
WEIGHTS = (6, 6, 3, 2, 2, 2, 1, 2, 2, 1, 1, 2)
UNKNOWN_ID = "999999"  # an id no run reaches (at most a few hundred adds)
# Custom ids are integers far above the auto-id counter's reach: integers keep the stall
# candidate set an intset (SMEMBERS ascending, so check_stalled's order is defined), and
# the gap keeps them clear of auto ids (bullmq.md BQ-12).
CUSTOM_LOW = 900_000


@dataclass
class Steps:
    """The draw's memory across one run: the clock and every token handed out (an old
    token is how a late worker is modelled)."""

    rng: random.Random
    now: int = 1_000_000
    tokens: list[str] = field(default_factory=list)

    def _id(self, model: BullModel, pool: list[str]) -> str:
        """Mostly an id of ``pool``; sometimes any known id, sometimes an unknown one."""
        r = self.rng.random()
        if pool and r < 0.8:
            return self.rng.choice(pool)
        known = sorted(model.hashes)
        if known and r < 0.95:
            return self.rng.choice(known)
        return UNKNOWN_ID

    def _token(self, model: BullModel, job_id: str) -> str:
        """The holder's token mostly; else an old token (a worker that lost its lock), or
        BullMQ's no-lock token for a job that holds no lock (its one legitimate use: a
        job taken without a lock; used on a locked job it bypasses the fence, finding
        F-2, reproduced by its own test rather than rediscovered by every run)."""
        held = model.locks.get(job_id)
        r = self.rng.random()
        if held is not None and r < 0.85:
            return held
        if held is None and r > 0.9:
            return NO_LOCK
        return self.rng.choice(self.tokens) if self.tokens else "t0"

    def draw(self, model: BullModel) -> tuple[str, tuple[Any, ...]]:
        """One step; advances the clock by 0..400 ms first."""
        self.now += self.rng.choice((0, 0, 1, 50, 400))
        op = self.rng.choices(OPS, WEIGHTS)[0]
        now, rng = self.now, self.rng
        active = list(model.active)
        if op == "add":
            custom = str(rng.randint(CUSTOM_LOW, CUSTOM_LOW + 20)) if rng.random() < 0.2 else ""
            delay = rng.choice((0, 0, 0, 100, 500))
            priority = rng.choice((0, 0, 0, 1, 2))
            return op, (custom, now, delay, priority, rng.random() < 0.2)
        if op == "take":
            if rng.random() < 0.03:
                return op, (NO_LOCK, now)
            self.tokens.append(f"t{len(self.tokens) + 1}")
            return op, (self.tokens[-1], now)
        if op in ("complete", "fail", "retry"):
            jid = self._id(model, active)
            return op, (jid, self._token(model, jid), now, f"{op}-{now}")
        if op == "backoff":
            jid = self._id(model, active)
            return op, (jid, self._token(model, jid), now, rng.choice((0, 100, 500)), f"backoff-{now}")
        if op == "promote":
            return op, (self._id(model, list(model.zsets["delayed"])),)
        if op == "check_stalled":
            return op, (now,)
        if op in ("extend",):
            jid = self._id(model, active)
            return op, (jid, self._token(model, jid))
        if op == "lapse":
            return op, (self._id(model, list(model.locks)),)
        if op == "remove":
            return op, (self._id(model, []),)
        state = rng.choice(("failed", "completed"))
        return op, (self._id(model, list(model.zsets[state])), state, rng.random() < 0.3)

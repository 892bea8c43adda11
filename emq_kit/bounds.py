"""The range of every numeric option of every command, in one place (specs/ownership.md
"Bounds", rule BD-1): the argparse types here read it (the command line's options and the
pytest plugin's), each option's ``--help`` prints it, the library checks its own
arguments against it (``CheckOptions``, ``SoakConfig``), and docs/commands.md's table is
checked against it (tests/e2e/test_harm.py).

An upper bound is one a real user never reaches but that keeps a run finite: a typo such
as ``--examples 10^23`` or ``--workers 100000`` is refused in one line, exit 2, before
any work, instead of running for ever or forking until the machine stalls.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from typing import Any, Callable

from emq_model import spec

SEED_MAX = 2**64 - 1
"""Seeds are 0 to 2^64 - 1 (a random one is drawn below 2^32)."""


@dataclass(frozen=True)
class Bound:
    """An option's range, ``low`` to ``high`` inclusive, of ``unit`` (what is counted).
    ``kind``: ``integer``; ``seconds``, a finite number above ``low`` (a fraction
    allowed); ``share``, a number from ``low`` to ``high``."""

    low: float
    high: float
    unit: str
    kind: str = "integer"

    def refusal(self, value: float) -> str | None:
        """Why ``value`` is out of range (``None``: it is in range)."""
        if self.kind != "integer" and not math.isfinite(value):
            return f"must be a finite number, got {value}"
        if self.kind == "seconds" and value <= self.low:
            return f"must be above {self.low:g} seconds, got {value:g}"
        if value < self.low:
            return f"must be at least {self.low:,}, got {value:,}"
        if value > self.high:
            return f"must be at most {self.high:,} ({self.unit}), got {value:,}"
        return None

    def text(self) -> str:
        """The range as ``--help`` and docs/commands.md print it."""
        if self.kind == "seconds":
            return f"above {self.low:g}, at most {self.high:,g} s"
        return f"{self.low:,} to {self.high:,}"


def _n(low: int, high: int, unit: str) -> Bound:
    return Bound(low, high, unit)


def _s(high: float) -> Bound:
    return Bound(0, high, "seconds", "seconds")


DAY = 86_400
HOUR = 3_600

BOUNDS: dict[str, Bound] = {
    "check --examples": _n(1, 10**6, "examples per round"),
    "check --steps": _n(1, 10**4, "steps per example"),
    "check --depth": _n(0, 10**5, "background jobs per queue"),
    "check --seed": _n(0, SEED_MAX, "a seed"),
    "check --shrink-steps": _n(0, 10**6, "steps per difference"),
    "check --timeout": _s(HOUR),
    "replay --timeout": _s(HOUR),
    "selftest --budget": _s(DAY),
    "selftest --seed": _n(0, SEED_MAX, "a seed"),
    "selftest --sample": _n(1, 10**5, "mutants"),
    "soak --workers": _n(1, 1_000, "processes"),
    "soak --producers": _n(1, 1_000, "processes"),
    "soak --jobs": _n(1, 10**7, "jobs"),
    "soak --seconds": _s(DAY),
    "soak --check-seconds": _s(DAY),
    "soak --lanes": _n(0, 10**5, "groups"),
    "soak --busy": Bound(0, 1, "a share", "share"),
    "soak --seed": _n(0, SEED_MAX, "a seed"),
    "bench --examples": _n(1, 10**6, "examples"),
    "bench --steps": _n(1, 10**4, "steps per example"),
    "bench --depth": _n(1, 10**5, "background jobs per queue"),
    "bench --depth-examples": _n(1, 10**6, "examples"),
    "bench --jobs": _n(1, 10**8, "jobs"),
    "bench --single-jobs": _n(1, 10**7, "jobs"),
    "bench --batch": _n(1, spec.LIMITS["limit_max"], "items: limit_max, specs/lifecycle.md"),
    "bench --sizes": _n(1, 10**8, "jobs, each size"),
    "bench --lanes": _n(1, 10**7, "lanes, each count"),
    "bench --fakeredis-sizes": _n(1, 10**7, "jobs, each size"),
    "bench --audit-jobs": _n(1, 10**8, "jobs"),
    "bench --probes": _n(1, 10**6, "calls"),
    "bench --repeat": _n(1, 1_000, "runs"),
    "bench --shrink-mutants": _n(1, 10**5, "mutants"),
    "bench --shrink-budget": _s(DAY),
    "bench --coverage-seeds": _n(0, 1_000, "seeds"),
    "audit --batch": _n(1, 10**6, "ids"),
    "audit --keep": _n(0, 10**8, "violations"),
    "campaign --seeds": _n(0, SEED_MAX, "a seed, each"),
    "campaign --examples": _n(1, 10**6, "examples per round"),
    "campaign --steps": _n(1, 10**4, "steps per example"),
    "campaign --retries": _n(0, 100, "attempts after the first"),
    "pytest --emq-seed": _n(0, SEED_MAX, "a seed"),
}
"""Every numeric option: ``"<command> <option>"`` -> its range."""


CLUSTER = _n(1, 256, "worker processes")
"""``--cluster local:N``'s N (``emq campaign``, ``emq selftest``): a part of the option's
text, so checked where the option is parsed (emq_kit/campaign/cluster.py)."""
RUNS = _n(1, 10**5, "runs")
"""A campaign's plan: targets x seeds x profiles x clocks (specs/campaign.md CMP-2)."""


def bound(option: str) -> Bound:
    """The range of ``"<command> <option>"``."""
    return BOUNDS[option]


def bounded(option: str) -> Callable[[str], Any]:
    """An argparse type: a number in the range ``emq_kit.bounds`` gives ``option``
    (``"check --examples"``); out of range, one line naming the bound (BD-1)."""
    rng = bound(option)

    def parse(text: str) -> int | float:
        try:
            value: int | float = int(text) if rng.kind == "integer" else float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"not {'an integer' if rng.kind == 'integer' else 'a number'}: {text!r}") from None
        why = rng.refusal(value)
        if why is not None:
            raise argparse.ArgumentTypeError(why)
        return value

    return parse


def within(option: str) -> str:
    """``option``'s range as its ``--help`` ends: ``range 1 to 1,000,000``."""
    return f"range {bound(option).text()}"


def sizes(option: str) -> Callable[[str], tuple[int, ...]]:
    """An argparse type: comma-separated integers in ``option``'s range, ascending."""
    one = bounded(option)

    def parse(text: str) -> tuple[int, ...]:
        out = tuple(sorted(int(one(x.strip())) for x in text.split(",") if x.strip()))
        if not out:
            raise argparse.ArgumentTypeError(f"not a list of integers: {text!r}")
        return out

    return parse

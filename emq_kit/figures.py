"""What ``emq bench`` measures and against what: a figure, the ceiling it is held
against and the goal the project set for it; a whole run's figures; the parameters that
size each part (the command's options). Apart from ``emq_kit.bench``, which drives the
machine, so the command line reads its defaults without loading the engine."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

QUEUE = "emq-bench"
"""The queue every part of a run measures on (under the run's names on a server)."""
GOALS = {"check.fakeredis": 1_000, "check.valkey": 1_500, "check.valkey.server_clock": 500,
         "lifecycle.valkey.batched": 20_000, "shrink.fakeredis.median": 2, "shrink.fakeredis.max": 10,
         "coverage.ci.examples": 250}
"""The project's goals for figures themselves, shown beside them: at least that many of a
rate, at most that many of a figure in ``AT_MOST``."""
AT_MOST = frozenset({"shrink.fakeredis.median", "shrink.fakeredis.max", "coverage.ci.examples"})
"""Figures whose goal is a ceiling: seconds to shrink, examples to reach every cell."""
GOAL_RATIOS = {"check.model": 0.6, "check.fakeredis": 0.6, "check.valkey": 0.7, "check.node.valkey": 0.5,
               "check.valkey.depth": 0.8}
"""The project's goals for a figure's ratio to its ceiling, each measured in the same run:
the machine alone against an empty Hypothesis machine (what the kit's own work costs
beside Hypothesis's), a live target's checked steps against the machine alone, the Node
port's against the built-in client on the same server, a deep queue's against a shallow
one."""


@dataclass
class Figure:
    """One measured figure, the ceiling it is held against (measured in the same run, or
    derived from figures that were) and the goal the project set for it."""

    key: str
    value: float
    unit: str
    ceiling: float | None = None
    ceiling_by: str = ""
    note: str = ""

    @property
    def ratio(self) -> float | None:
        return self.value / self.ceiling if self.ceiling else None

    @property
    def goal(self) -> float | None:
        return GOALS.get(self.key)

    @property
    def goal_ratio(self) -> float | None:
        return GOAL_RATIOS.get(self.key)

    @property
    def met(self) -> bool | None:
        """Whether the figure meets its goal (its ratio's, when it has one); None without one."""
        if self.goal_ratio is not None and self.ratio is not None:
            return self.ratio >= self.goal_ratio
        if self.goal is None:
            return None
        return self.value <= self.goal if self.key in AT_MOST else self.value >= self.goal

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "ratio": self.ratio, "goal": self.goal, "goal_ratio": self.goal_ratio,
                "met": self.met}


@dataclass
class Params:
    """How much each part measures (the CLI's options)."""

    examples: int = 200  # the CI run the goals are stated for: 200 examples x 50 steps
    steps: int = 50
    depth: int = 10_000
    depth_examples: int = 10  # each fills 2 x depth jobs first (DEPTH-1); enough to meet the rare steps (raw calls)
    jobs: int = 50_000
    single_jobs: int = 3_000
    batch: int = 500
    sizes: tuple[int, ...] = (1_000, 100_000)
    lanes: tuple[int, ...] = (10, 1_000, 100_000)
    fakeredis_sizes: tuple[int, ...] = (1_000, 100_000)
    probes: int = 500
    audit_jobs: int = 100_000
    repeat: int = 3
    seed: int = 7
    shrink_mutants: int = 12
    shrink_budget: float = 20.0
    coverage_seeds: int = 10


@dataclass
class Bench:
    """A whole run: where it ran, with what, and the figures."""

    params: Params
    machine: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    figures: list[Figure] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"machine": self.machine, "versions": self.versions, "params": asdict(self.params),
                "figures": [f.to_json() for f in self.figures]}

"""The profiles of a check (how much a run does), apart from the engine that runs them:
a command's parser names them without loading Hypothesis."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Profile:
    """How much a run does: examples and steps per example; whether unreached cells fail
    it, and how many extra examples it may spend reaching them. The search goes on in
    rounds of ``round_examples`` past a difference; a gated run's rounds past its nominal
    examples, aimed at the cells still unreached (COV-2), are of ``aim_examples``."""

    name: str
    examples: int
    steps: int
    gate: bool
    extra_examples: int = 0
    round_examples: int = 100
    aim_examples: int = 100
    sweep: bool = False  # the once-per-run raw sweep (raw.rule.RawCalls.raw_sweep) on a target that takes raw calls


PROFILES = {
    "dev": Profile("dev", examples=30, steps=30, gate=False),
    "ci": Profile("ci", examples=200, steps=50, gate=True, extra_examples=800, round_examples=25,
                  aim_examples=10, sweep=True),
    "thorough": Profile("thorough", examples=2000, steps=100, gate=True, extra_examples=4000, round_examples=500,
                        aim_examples=500, sweep=True),
}

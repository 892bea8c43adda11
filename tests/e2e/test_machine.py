"""The suite's verdicts are the code's, not the machine's: nothing it asserts depends on
how fast or how loaded the machine that runs it is."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Iterator
from pathlib import Path

import hypothesis
from hypothesis import HealthCheck, settings

ROOT = Path(__file__).resolve().parents[2]


def _given_tests() -> Iterator[tuple[str, settings]]:
    """Every ``@given`` test of the suite (module level and in classes) with its settings."""
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        module = importlib.import_module(".".join(path.relative_to(ROOT).with_suffix("").parts))
        for name, value in vars(module).items():
            for inner, test in [(name, value), *vars(value).items()] if isinstance(value, type) else [(name, value)]:
                if inspect.isfunction(test) and hypothesis.is_hypothesis_test(test):
                    yield f"{module.__name__}::{inner}", test._hypothesis_internal_use_settings


def test_no_hypothesis_example_is_timed() -> None:
    """Hypothesis's defaults time each example (a 200 ms deadline; a health check on slow
    draws): on a loaded machine a correct test failed. CI's profile lifts both where CI is
    set; the suite's own profile lifts them everywhere, and no test puts one back."""
    found = list(_given_tests())
    assert len(found) > 30, found
    timed = [name for name, s in found if s.deadline is not None or HealthCheck.too_slow not in s.suppress_health_check]
    assert timed == []

"""emq_kit — the conformance kit: the machine that drives the model and an implementation
side by side, its targets, and the ``emq`` command.

As a library, a check is one call that returns its report:

    >>> import emq_kit
    >>> report = emq_kit.check(profile="dev", seed=1, examples=10, steps=20)
    >>> report.verdict, report.detail, report.exit_code
    ('inconclusive', 'no-divergence', 0)
    >>> options = emq_kit.CheckOptions(profile="dev", seed=1, examples=10, steps=20, hostile="off")
    >>> emq_kit.check(options).differences
    []
    >>> emq_kit.PROFILES["ci"].examples, emq_kit.PROFILES["ci"].gate
    (200, True)
    >>> target = emq_kit.open_target()  # what a check drives: here the built-in client on fakeredis
    >>> target.describe()["target"]
    'fakeredis'
    >>> target.close()

- ``check(options)`` runs one check of a ``CheckOptions`` (every option of ``emq check``,
  typed and checked; any of its fields may be given to ``check`` instead) and returns a
  ``Report``: its verdict, figures, coverage and every ``Difference``, with its trace;
- ``replay(trace)`` re-runs a trace file step by step and returns a ``ReplayReport``;
- ``open_target(...)`` is the target a check drives (the built-in client on a server or
  on the embedded fakeredis, a port's driver, the model);
- ``PROFILES`` holds the named ``Profile``s (``dev``, ``ci``, ``thorough``);
- every error the kit raises is a ``KitError`` (``emq_kit.errors``: its exit code, its
  line).

``emq_kit.check`` is the function; the check engine's package of the same name
(``emq_kit/check/``) is imported by its modules' full names (``from emq_kit.check.run
import run_check``). Importing ``emq_kit`` loads none of the engine (Hypothesis, the
machine): ``Report`` and ``CheckOptions`` load when first named (the profiles are data,
emq_kit/check/profiles.py).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from emq_kit import api
from emq_kit.check.profiles import PROFILES, Profile
from emq_kit.check.target import open_target
from emq_kit.errors import KitError

if TYPE_CHECKING:
    from emq_kit.check.options import CheckOptions
    from emq_kit.check.run import Difference, Report

# The engine's package, emq_kit/check/, is loaded by the import of open_target above: a
# package is set on its parent when first loaded, never again, so ``check`` stays this.
check = api.check
replay = api.replay
load_trace = api.load_trace
ReplayReport = api.ReplayReport

__all__ = ["PROFILES", "CheckOptions", "Difference", "KitError", "Profile", "ReplayReport", "Report", "check",
           "load_trace", "open_target", "replay"]

_LAZY = {"CheckOptions": "emq_kit.check.options", "Report": "emq_kit.check.run", "Difference": "emq_kit.check.run"}
"""The names whose modules load the engine: each is imported when first asked for."""


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'emq_kit' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})

"""A costly fixture's files made once per test run, not once per pytest-xdist worker.

Each worker of ``pytest -n`` has its own session, and xdist deals a module's tests out
to the workers one by one, so a module-scoped fixture whose tests land on two workers is
made on both. A fixture whose result is files (a report, a trace, a page, the text
printed) makes them here instead: the first worker makes them under a lock in the run's
shared temporary directory, the others wait for the lock and read them."""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest


def made_once(tmp_path_factory: pytest.TempPathFactory, name: str, make: Callable[[Path], None]) -> Path:
    """The directory ``name``, filled by ``make(directory)`` once in this test run, by
    whichever worker asks first. A ``make`` that raises marks nothing: the next asker
    makes it again, and fails the same way with its own traceback."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # each worker's basetemp is a directory of the run's own
    where = root / f"once-{name}"
    with open(root / f"once-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or the worker dies
        if not (where / ".made").exists():
            shutil.rmtree(where, ignore_errors=True)
            where.mkdir()
            make(where)
            (where / ".made").touch()
    return where

"""The cyclic garbage collector's schedule while the kit runs a machine.

A checked step allocates thousands of containers (Hypothesis's choices, the model's
snapshot and change, the invariants' verdicts), nearly all freed by reference counting.
At CPython's default schedule (a young collection every 700 allocations, a full one
whenever ten older collections have run and the heap has grown by a quarter) a run makes
several full collections, each walking the whole heap, Hypothesis's record of the run's
examples included. While a run is on, a young collection waits for ``YOUNG``
allocations, so full ones come about fourteen times more rarely; cycles are collected
all the same (a run makes cyclic garbage: the collector stays on).

The schedule is the process's (the library runs inside a user's own: a pytest session, a
campaign's worker), so it is changed only upward, never switched on where the process
switched it off, and put back when the last run in the process ends, however it ends.
"""

from __future__ import annotations

import gc
import threading
from contextlib import contextmanager
from typing import Iterator

YOUNG = 10_000
"""Allocations between two young collections while a run is on (CPython's default: 700):
few enough that a young collection holds a few megabytes of garbage at most."""

_lock = threading.Lock()
_runs = 0  # runs on in this process (threads of a campaign's worker may hold several)
_saved: tuple[int, int, int] | None = None


@contextmanager
def spaced() -> Iterator[None]:
    """Young collections ``YOUNG`` allocations apart (or as far apart as the process had
    them, if further; none if it had turned them off) until the last run in the process
    leaves this block, then the process's own schedule again."""
    global _runs, _saved
    with _lock:
        if _runs == 0:
            _saved = young, older, oldest = gc.get_threshold()
            gc.set_threshold(max(young, YOUNG) if young else 0, older, oldest)
        _runs += 1
    try:
        yield
    finally:
        with _lock:
            _runs -= 1
            if _runs == 0 and _saved is not None:
                gc.set_threshold(*_saved)
                _saved = None

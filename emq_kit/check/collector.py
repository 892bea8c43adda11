"""The cyclic garbage collector's schedule while the kit runs a machine.

A checked step allocates thousands of containers (Hypothesis's choices, the model's
snapshot and change, the invariants' verdicts), nearly all freed by reference counting.
At CPython 3.11's default schedule (a young collection every 700 allocations, a full one
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
import os
import threading
from contextlib import contextmanager
from typing import Iterator

YOUNG = 10_000
"""Allocations between two young collections while a run is on (CPython's default: 700):
few enough that a young collection holds a few megabytes of garbage at most."""

_lock = threading.Lock()
_runs = 0  # runs on in this process (threads of a campaign's worker may hold several)
_saved: tuple[int, int, int] | None = None


def _renew_lock() -> None:
    global _lock
    _lock = threading.Lock()  # a fork while another thread held it would leave it held


os.register_at_fork(after_in_child=_renew_lock)


@contextmanager
def spaced() -> Iterator[None]:
    """Young collections ``YOUNG`` allocations apart (or as far apart as the process had
    them, if further; none if it had turned them off) until the last run in the process
    leaves this block, then the process's own schedule again."""
    global _runs, _saved
    counted = False
    try:
        with _lock:
            # Counted before the schedule changes, put back before the count drops: an
            # interrupt between the two leaves the count high and the process's own
            # schedule in place (later runs go unspaced), never a spaced schedule kept.
            _runs += 1
            counted = True
            if _runs == 1:
                _saved = young, older, oldest = gc.get_threshold()
                gc.set_threshold(max(young, YOUNG) if young else 0, older, oldest)
        yield
    finally:
        if counted:
            with _lock:
                if _runs == 1 and _saved is not None:
                    gc.set_threshold(*_saved)
                    _saved = None
                _runs -= 1

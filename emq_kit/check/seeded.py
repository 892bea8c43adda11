"""A run's draws depend on its seed and its options alone (TR-11).

Hypothesis (releases after 6.131.0) mixes into about one draw in twenty a constant from the
source of every *local* module loaded in the process (an editable install, the user's
own code, a driver's helper), read again whenever ``sys.modules`` grows. The same seed
then ran another example after ``import emq_kit.cli``, in a pytest session, or once the
kit was installed from a wheel (site-packages is not local): a seed printed by one run
did not replay in another. ``seed_alone`` holds that pool empty while a search runs;
Hypothesis's own constants (its global pool: edge integers, odd strings) stay in.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, Iterator

from hypothesis.internal.conjecture import providers

_lock = threading.Lock()
_held = 0  # searches running now: the pool is restored when the last one ends
_restore: Callable[[], Any] | None = None


@contextlib.contextmanager
def seed_alone() -> Iterator[None]:
    """While inside, Hypothesis draws no constant from the loaded modules' source. The
    pool is process-wide, so it stays empty until every search inside has ended."""
    _enter()
    try:
        yield
    finally:
        _leave()


def _enter() -> None:
    global _held, _restore
    with _lock:
        _held += 1
        if _held == 1 and hasattr(providers, "_get_local_constants"):  # absent in 6.131.0, the floor
            _restore = providers._get_local_constants
            empty = providers.Constants()
            providers._get_local_constants = lambda: empty
            providers.CONSTANTS_CACHE.cache.clear()  # its entries hold the pool as it was


def _leave() -> None:
    global _held, _restore
    with _lock:
        _held -= 1
        if _held == 0 and _restore is not None:
            providers._get_local_constants = _restore
            providers.CONSTANTS_CACHE.cache.clear()
            _restore = None

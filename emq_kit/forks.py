"""Forking a child process without losing a Ctrl-C.

``os.fork`` (what multiprocessing's fork context calls) runs the interpreter's at-fork
handlers, logging's among them (it releases its module lock in the parent). A SIGINT
that arrives while the fork is under way has its handler run inside one of those, and a
``KeyboardInterrupt`` raised there is printed as "Exception ignored in: <function
_releaseLock ...>" and lost: the coordinator of a soak, or the selftest between mutants,
went on as if nothing had been pressed. So a fork runs under ``interrupts_deferred``:
SIGINT is only noted while it runs and raised once it is over; every child forked
meanwhile gets the handler back at once (an at-fork handler of this module).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from typing import Any, Iterator

_before: list[Any] = []
"""The SIGINT handler in force when the outermost deferral began (what a child restores)."""


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[None]:
    """SIGINT noted, not acted on, while the body runs; then handled as it would have
    been (the previous handler called: ``KeyboardInterrupt`` for Python's default).
    Off the main thread, where no handler can be set, the body just runs."""
    if threading.current_thread() is not threading.main_thread() or _before:
        yield
        return
    noted: list[int] = []
    _before.append(signal.signal(signal.SIGINT, lambda signum, frame: noted.append(signum)))
    try:
        yield
    finally:
        previous = _before.pop()
        signal.signal(signal.SIGINT, previous)
        if noted:
            _deliver(previous)


def _restore_in_child() -> None:
    """In a child forked under ``interrupts_deferred``: the parent's SIGINT handler as it
    was before the deferral (a child forked elsewhere keeps its own)."""
    if _before:
        signal.signal(signal.SIGINT, _before.pop())


os.register_at_fork(after_in_child=_restore_in_child)


def _deliver(handler: Any) -> None:
    """Handle the SIGINT noted during a deferral as ``handler`` would have."""
    if handler is signal.SIG_IGN or handler is None:
        return
    if handler is signal.SIG_DFL:
        os.kill(os.getpid(), signal.SIGINT)  # the default action: this process ends
        return
    handler(signal.SIGINT, None)

"""Forking a child process without losing a Ctrl-C.

``os.fork`` (what multiprocessing's fork context calls) runs the interpreter's at-fork
handlers, logging's among them (it releases its module lock in the parent). A SIGINT
that arrives while the fork is under way has its handler run inside one of those, and a
``KeyboardInterrupt`` raised there is printed as "Exception ignored in: <function
_releaseLock ...>" and lost: the coordinator of a soak, or the selftest between mutants,
went on as if nothing had been pressed. So a fork runs under ``interrupts_deferred``:
SIGINT is only noted while it runs and handled once it is over; SIGTERM too, which the
kit takes as Ctrl-C (INT-1), as does the deletion of a run's keys (a second one raised
inside it left them for ``emq clean``: OWN-5).

A child forked meanwhile ignores SIGINT (an at-fork handler of this module): a Ctrl-C at
the terminal reaches the whole process group, and the parent stops its children itself
(INT-2, specs/safety.md); a child that took it would end in the middle of whatever it
held (a worker inside the shared stop event's lock left the parent waiting on it for
good). ``die_with_parent`` makes a child end with its parent, SIGKILL included;
``cpu_seconds`` reads how much CPU a child has used while it runs; ``StopFlag`` tells
every child to stop, whichever of them has died.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import sys
import threading
import time
from typing import Any, Iterator

DEFERRED = (signal.SIGINT, signal.SIGTERM)
"""The signals a deferral holds back: Ctrl-C, and SIGTERM, which the kit takes as one (INT-1)."""

_before: list[dict[int, Any]] = []
"""The handlers of ``DEFERRED`` in force when the outermost deferral began."""


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[None]:
    """SIGINT and SIGTERM noted, not acted on, while the body runs; then each noted one
    handled as it would have been, once (the previous handler called: ``KeyboardInterrupt``
    for Python's default SIGINT, the end of the process for SIGTERM's). Off the main
    thread, where no handler can be set, the body just runs."""
    if threading.current_thread() is not threading.main_thread() or _before:
        yield
        return
    noted: list[int] = []
    _before.append({signum: signal.signal(signum, lambda signum, frame: noted.append(signum))
                    for signum in DEFERRED})
    try:
        yield
    finally:
        previous = _before.pop()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for signum in DEFERRED:
            if signum in noted:
                _deliver(signum, previous[signum])


def _ignore_in_child() -> None:
    """In a child forked under ``interrupts_deferred``: SIGINT ignored, SIGTERM's default
    (a group's SIGTERM ends it at once, its parent ends as interrupted: INT-2), whatever
    the parent's handlers (a child forked elsewhere keeps its own). The same as
    ``emq_kit.interrupts``'s at-fork handler leaves, whichever of the two runs last."""
    if _before:
        _before.clear()
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


os.register_at_fork(after_in_child=_ignore_in_child)


def die_with_parent(parent: int) -> None:
    """In a forked child, first thing: the kernel kills this process when the thread that
    forked it ends (PR_SET_PDEATHSIG), so a SIGKILLed parent leaves no child working on;
    a parent already gone (the fork raced its death) ends the child at once. Elsewhere
    than Linux, the child's own deadlines bound an orphan's life."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    if os.getppid() != parent:
        os._exit(1)


def _deliver(signum: int, handler: Any) -> None:
    """Handle the ``signum`` noted during a deferral as ``handler`` would have."""
    if handler is signal.SIG_IGN or handler is None:
        return
    if handler is signal.SIG_DFL:
        os.kill(os.getpid(), signum)  # the default action: this process ends
        return
    handler(signum, None)


def cpu_seconds(pid: int) -> float | None:
    """The CPU time process ``pid`` (a child of this one) has used so far: its process
    CPU clock, the one ``time.process_time()`` reads inside it; None where that clock
    cannot be read (``clock_getcpuclockid`` missing, the process gone)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        clock = ctypes.c_int()
        if libc.clock_getcpuclockid(pid, ctypes.byref(clock)) != 0:
            return None
        return time.clock_gettime(clock.value)
    except (AttributeError, OSError):  # no such function here; the process ended meanwhile
        return None


class StopFlag:
    """A flag a parent sets once for every child it forks, which no child's death can hold
    up: a pipe whose write end only the parent keeps (``forked()`` drops a child's copy);
    ``set`` closes it and every read end turns readable. A multiprocessing ``Event`` is not
    that: its ``set`` waits for each child asleep in its ``wait`` to wake, and a child the
    group's SIGTERM killed there (a CI job's limit) never does (INT-2)."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe()

    def forked(self) -> None:
        """In a child, first thing: its copy of the write end gone, or ``set`` would never show."""
        self._drop_write()

    def set(self) -> None:
        self._drop_write()

    def is_set(self) -> bool:
        return self.wait(0)

    def wait(self, seconds: float) -> bool:
        """Wait up to ``seconds`` for the flag; whether it is set."""
        return bool(select.select([self._read], [], [], seconds)[0])

    def close(self) -> None:
        """In the parent, once every child is gone."""
        self._drop_write()
        os.close(self._read)

    def _drop_write(self) -> None:
        if self._write >= 0:
            os.close(self._write)
            self._write = -1

"""Ctrl-C: a run stops where it can stop cleanly (INT-1, INT-2 in specs/safety.md).

Python raises ``KeyboardInterrupt`` wherever the main thread happens to be, and there it
can be lost: inside a callback the interpreter only reports ("Exception ignored in":
Hypothesis's gc callback, an at-fork handler, a finalizer), or inside code that catches
everything and goes on (a search taking it for a failure, then shrinking it). An
``emq check --url`` pressed with Ctrl-C went on to CONFORMS, exit 0.

So while ``stopping()`` holds, a Ctrl-C is only noted, and the run raises
``Interrupted`` (a ``KeyboardInterrupt``) at its next stopping point, ``check()``: an
example's start, a replayed step, a soak's turn, a selftest's wait; every one of them
raises it again until the run says it has ``handled()`` it (so code that swallows it
cannot keep the run going). A run that reaches none within ``GRACE`` seconds (a call
that blocks) has it raised where it stands, again every ``GRACE`` seconds until it was
raised; a second Ctrl-C raises it at once. The noting handler does nothing a signal
could break: it counts and writes a byte to a pipe, which a watcher thread reads.

Raised where the run stands, it may be lost (the interpreter reports it from a callback:
it is then not printed, and raised again a ``GRACE`` later) or break what it cuts short
(a pipeline's replies half read, a connection handed back with replies still coming).
So what the run then meets is the interrupt's (``blamed``: an error is raised as it),
and its cleanup opens fresh connections (``stood``).

Once a command has its verdict (``decided()``), a Ctrl-C is only noted, never raised: the
verdict stands, its outputs are written whole and the command exits with its code (INT-3).

A child the kit forks never takes Ctrl-C itself (``emq_kit.forks``): its parent stops it.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import threading
from typing import Any, Iterator

from emq_kit.errors import Interrupted

__all__ = ["GRACE", "Interrupted", "blamed", "check", "decided", "early", "handled", "stood", "stop_every_run",
           "stopping"]

GRACE = 1.0
"""Seconds a run has to reach a stopping point before the interrupt is raised where it is."""


class _Stop:
    """One ``stopping()``: what was noted, and the watcher's pipe."""

    def __init__(self) -> None:
        self.noted = 0
        self.raised = False  # raised once: the run is unwinding, the watcher is done
        self.handled = False
        self.at_once = False  # the watcher has found the run past its grace: raise where it is
        self.stood = False  # raised where the run stood: what it cut short may be broken
        self.decided = False  # the verdict is given: noted from here, never raised (INT-3)
        self.late = 0  # how many were noted after the verdict
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        self.main = threading.main_thread().ident

    def handler(self, signum: int, frame: Any) -> None:
        if self.decided:
            self.late += 1
            return
        self.noted += 1
        if self.noted > 1 or self.at_once:
            self.raised = self.stood = True
            raise Interrupted()
        with contextlib.suppress(OSError):  # a full pipe already says it
            os.write(self.wake_w, b"!")

    def watch(self) -> None:
        """Wait for a Ctrl-C; past ``GRACE`` without the run raising it, send it again
        for the handler to raise at once; repeat until it was raised (and again once
        ``lost`` says it was lost), until the run ends."""
        armed = False
        while True:
            ready, _, _ = select.select([self.wake_r], [], [], GRACE if armed else None)
            if ready:
                byte = os.read(self.wake_r, 1)
                if byte in (b"", b"q"):
                    return
                armed = True
                continue
            if self.raised or self.handled:
                armed = False  # until ``lost`` arms it again
                continue
            self.at_once = True
            assert self.main is not None
            signal.pthread_kill(self.main, signal.SIGINT)

    def lost(self, unraisable: Any, report: Any) -> None:
        """``sys.unraisablehook`` while the run goes: an interrupt the interpreter could
        only report (raised in a gc callback, a finalizer) is not printed and is raised
        again a ``GRACE`` later; anything else is reported by ``report`` as before."""
        if not isinstance(unraisable.exc_value, Interrupted):
            report(unraisable)
            return
        self.raised = False
        with contextlib.suppress(OSError):
            os.write(self.wake_w, b"!")

    def close(self) -> None:
        for fd in (self.wake_r, self.wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)


_active: list[_Stop] = []
_early: list[int] = []  # signals noted before the command's ``stopping()`` began


def early() -> None:
    """A command run as a program, from its first line: until its ``stopping()`` begins
    (the command's modules still loading, its line parsed), a Ctrl-C or SIGTERM is only
    noted, and that ``stopping()`` raises it at the command's start (INT-1). Python's
    default would raise it inside an import (a traceback, or lost in an import's callback
    and the run gone on) or, for SIGTERM, kill the process."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda signum, frame: _early.append(signum))


@contextlib.contextmanager
def stopping(*, last: bool = False) -> Iterator[_Stop | None]:
    """Ctrl-C (or SIGTERM) noted while the body runs, raised as ``Interrupted`` at its
    next ``check()`` (or where it stands past ``GRACE``; at once on a second one). One
    noted and not yet raised when the body ends is raised then. Off the main thread, or
    nested, the body just runs (given None); else it is given the stop, whose ``late``
    counts those noted after ``decided()``. ``last``: the process ends with the body (a
    command run as a program): from its end both signals are ignored, not handed back
    (the interpreter's finalization would restore their defaults), so the process exits
    with the command's code however late they come (INT-3). One noted ``early`` is
    raised as the body would begin."""
    if threading.current_thread() is not threading.main_thread() or _active:
        yield None
        return
    stop = _Stop()
    previous = signal.signal(signal.SIGINT, stop.handler)
    # SIGTERM (timeout, a CI job's limit, docker stop) ends the run as Ctrl-C does: by
    # default it would end it at once, its keys left on the server (OWN-5)
    terminate = signal.signal(signal.SIGTERM, stop.handler)
    report = sys.unraisablehook
    sys.unraisablehook = lambda unraisable: stop.lost(unraisable, report)
    watcher = threading.Thread(target=stop.watch, name="emq-interrupts", daemon=True)
    watcher.start()
    _active.append(stop)
    try:
        if _early:  # came before the command began: it ends there (``early``)
            stop.noted, stop.raised = len(_early), True
            _early.clear()
            raise Interrupted()
        yield stop
        if stop.noted and not stop.handled:
            raise Interrupted()
    finally:
        with contextlib.suppress(OSError):
            os.write(stop.wake_w, b"q")
        watcher.join()  # before the handler goes: it sends nothing after this
        signal.signal(signal.SIGINT, signal.SIG_IGN if last else previous)
        signal.signal(signal.SIGTERM, signal.SIG_IGN if last else terminate)
        sys.unraisablehook = report
        _active.remove(stop)
        stop.close()


_told: list[bool] = []  # this process was told to stop every run (``stop_every_run``)


def stop_every_run() -> None:
    """In a process that takes no Ctrl-C of its own (a local cluster's worker: INT-2),
    told by the command that started it to stop: every run on any of its threads raises
    ``Interrupted`` at its next stopping point from now on, as a run of the main thread
    does on a Ctrl-C, and ends as an interrupted run does (its child stopped, its claim
    released)."""
    _told.append(True)


def check() -> None:
    """A stopping point: ``Interrupted`` if a Ctrl-C was noted and the run has not
    handled it yet, or the process was told to stop every run."""
    if _told:
        raise Interrupted()
    if _active and _active[0].noted and not _active[0].handled:
        _active[0].raised = True
        raise Interrupted()


def decided() -> None:
    """The command's last stopping point, before it prints its verdict: ``Interrupted`` if
    a Ctrl-C was noted and not handled; else from here one is only counted (``late``),
    never raised, not even a second: the verdict stands, its outputs are written whole
    and the command exits with its code (INT-3)."""
    check()
    if _active:
        _active[0].decided = True


def stood() -> bool:
    """Whether the interrupt was raised where the run stood (past its grace, or a second
    Ctrl-C): a connection may hold a reply half read, so a cleanup opens fresh ones."""
    return bool(_active) and _active[0].stood


@contextlib.contextmanager
def blamed() -> Iterator[None]:
    """Within it, an error met once the interrupt was raised where the run stood is the
    interrupt's (INT-1): raised as ``Interrupted``, never shown as a kit bug, a lost
    server or a verdict."""
    try:
        yield
    except Exception as exc:
        if not stood():
            raise
        raise Interrupted() from exc


def handled() -> None:
    """The run is ending on the interrupt (what follows is its cleanup): no stopping
    point raises it again; a further Ctrl-C still ends the run at once."""
    if _active:
        _active[0].handled = True


def _forget_in_child() -> None:
    """In a forked child: none of the parent's state (its pipe, its count), SIGTERM's
    default again; the child's SIGINT is ``emq_kit.forks``'s business."""
    if _active:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    for stop in _active:
        stop.close()
    _active.clear()


os.register_at_fork(after_in_child=_forget_in_child)

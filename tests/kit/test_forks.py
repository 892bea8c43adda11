"""A Ctrl-C that arrives while the kit forks a child is not lost (emq_kit/forks.py).

The at-fork handler below stands in for the one that lost it: logging's, which runs in
the parent after every ``os.fork``; a SIGINT handled inside such a handler raises a
``KeyboardInterrupt`` that Python prints as "Exception ignored" and drops. That is how
``test_an_interrupted_run_leaves_no_process_behind`` (tests/kit/test_soak.py) saw a soak run
to its end under load: the interrupt landed while the coordinator forked its workers."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from typing import Iterator

import pytest

from emq_kit.forks import cpu_seconds, interrupts_deferred

ARMED: list[bool] = []


def _interrupt_inside_the_fork() -> None:
    """After a fork, in the parent, while armed: a SIGINT to the main thread, handled
    here (the sleep is where Python runs the handler)."""
    if ARMED:
        ARMED.clear()
        ident = threading.main_thread().ident
        assert ident is not None
        signal.pthread_kill(ident, signal.SIGINT)
        time.sleep(0.05)


os.register_at_fork(after_in_parent=_interrupt_inside_the_fork)  # once per process; idle unless armed


@pytest.fixture
def armed(ctrl_c: None) -> Iterator[None]:
    ARMED.append(True)
    yield
    ARMED.clear()


def _child(handlers: "multiprocessing.queues.SimpleQueue[str]") -> None:
    handlers.put(repr(signal.getsignal(signal.SIGINT)))


def test_a_ctrl_c_during_a_fork_is_raised_once_the_fork_is_over(armed: None) -> None:
    ctx = multiprocessing.get_context("fork")
    handlers = ctx.SimpleQueue()
    proc = ctx.Process(target=_child, args=(handlers,))
    with pytest.raises(KeyboardInterrupt):
        with interrupts_deferred():
            proc.start()
            assert not ARMED, "the at-fork handler did not run"  # the interrupt came, and was only noted
    proc.join(10)
    assert proc.exitcode == 0
    # the child ignores SIGINT (its parent stops it, INT-2), whatever the parent's handler
    assert handlers.get() == repr(signal.SIG_IGN)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_without_an_interrupt_nothing_is_raised_and_the_handler_is_back(ctrl_c: None) -> None:
    with interrupts_deferred():
        with interrupts_deferred():  # nested: the outer one notes
            pass
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_an_ignored_interrupt_stays_ignored(armed: None) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    ctx = multiprocessing.get_context("fork")
    proc = ctx.Process(target=time.sleep, args=(0,))
    with interrupts_deferred():
        proc.start()
    proc.join(10)
    assert not ARMED and signal.getsignal(signal.SIGINT) is signal.SIG_IGN


def test_a_soak_interrupted_while_it_forks_a_child_stops(armed: None) -> None:
    """A Ctrl-C during the soak's first fork ends the run (it ran to its end before); the
    shutdown leaves no child (that the child forked is the fleet's before the interrupt
    is raised is what tests/kit/test_soak.py's interrupted run holds under load)."""
    from emq_kit.soak.workload import SoakConfig, run_soak

    with pytest.raises(KeyboardInterrupt):
        run_soak(None, SoakConfig(workers=1, jobs=50, seconds=10))
    assert not ARMED, "no child was forked"
    assert multiprocessing.active_children() == []


def test_a_childs_cpu_clock_is_the_one_it_reads_itself() -> None:
    """``cpu_seconds(pid)`` reads the clock the process's own ``time.process_time()``
    reads (the selftest's hang watch compares the two, CC-9): after a child has said its
    own CPU time and then only waits, the parent reads that much, give or take the wait;
    once the child is gone, None."""
    ctx = multiprocessing.get_context("fork")
    said, say = ctx.Pipe(duplex=False)
    go = ctx.Event()

    def work() -> None:
        sum(range(3_000_000))
        say.send(time.process_time())
        go.wait()

    proc = ctx.Process(target=work)
    proc.start()
    own = said.recv()
    read = cpu_seconds(proc.pid) if proc.pid is not None else None
    go.set()
    proc.join()
    assert read is not None and own <= read < own + 1.0, (own, read)
    assert proc.pid is not None and cpu_seconds(proc.pid) is None

"""What a worker process of a ``local:N`` cluster loads before it takes a task
(``cluster.LOCAL_PRELOAD``, Dask's worker preload): the terminal's Ctrl-C is ignored,
and a task's ``Stopped`` is not logged.

A Ctrl-C reaches the terminal's whole process group, these workers included. Taken by
Dask's event loop, it ended a worker in the middle of its task, under its claim on the
server (OWN-5): the run's keys, its record and the ``{emq}:version`` it wrote were left,
and a traceback printed. The command that started the cluster stops its workers itself,
then deletes what they left (INT-2, ``cluster.connected``). A task it stops raises
``Stopped``, which the worker logged as a failed task ("Compute Failed", its traceback)
on the terminal, under the command's own ``interrupted``.
"""

from __future__ import annotations

import logging
import signal
from typing import Any

from emq_kit._signals import Stopped
from emq_kit.campaign.tasks import STOPPED


def dask_setup(worker: Any) -> None:
    """Called by Dask in the worker's main thread, before it takes any task."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.getLogger("distributed.worker").addFilter(_not_stopped)


_FAILED = repr(Stopped(STOPPED))
"""How Dask's "Compute Failed" line names a stopped task's exception."""


def _not_stopped(record: logging.LogRecord) -> bool:
    """Whether a worker's log line is not a stopped task's failure (the command that
    stopped it says so itself)."""
    return _FAILED not in record.getMessage()

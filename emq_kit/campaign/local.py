"""What a worker process of a ``local:N`` cluster loads before it takes a task
(``cluster.LOCAL_PRELOAD``, Dask's worker preload): the terminal's Ctrl-C is ignored,
and a failed task is not logged.

A Ctrl-C reaches the terminal's whole process group, these workers included. Taken by
Dask's event loop, it ended a worker in the middle of its task, under its claim on the
server (OWN-5): the run's keys, its record and the ``{emq}:version`` it wrote were left,
and a traceback printed. The command that started the cluster stops its workers itself,
then deletes what they left (INT-2, ``cluster.connected``).

A task that fails (a server lost, a ``Stopped`` task, a run's environment) the worker
logged as "Compute Failed" with its traceback, on the command's own terminal, once per
attempt. The command says each run's end itself, its error and its attempts included
(CMP-4, CMP-6a: one line while it runs); ``EMQ_DEBUG=1`` keeps Dask's lines.
"""

from __future__ import annotations

import logging
import os
import signal
from typing import Any

FAILED = "Compute Failed"
"""How Dask's worker starts the line it logs for a task that raised."""


def dask_setup(worker: Any) -> None:
    """Called by Dask in the worker's main thread, before it takes any task."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if not os.environ.get("EMQ_DEBUG"):
        logging.getLogger("distributed.worker").addFilter(_not_a_failed_task)


def _not_a_failed_task(record: logging.LogRecord) -> bool:
    """Whether a worker's log line is not a failed task's (the command says each run's
    end itself)."""
    return not record.getMessage().startswith(FAILED)

"""What a worker process of a ``local:N`` cluster loads before it takes a task
(``cluster.LOCAL_PRELOAD``, Dask's worker preload): the terminal's Ctrl-C is ignored.

A Ctrl-C reaches the terminal's whole process group, these workers included. Taken by
Dask's event loop, it ended a worker in the middle of its task, under its claim on the
server (OWN-5): the run's keys, its record and the ``{emq}:version`` it wrote were left,
and a traceback printed. The command that started the cluster stops its workers itself,
then deletes what they left (INT-2, ``cluster.connected``).
"""

from __future__ import annotations

import signal
from typing import Any


def dask_setup(worker: Any) -> None:
    """Called by Dask in the worker's main thread, before it takes any task."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)

"""A deliberately wrong port: the Python client, except that complete is ZREM, then DEL,
in two round trips, with no token check. ``emq check --driver`` must reject it.

    python tests/drivers/sloppy_complete.py
"""

import sys

from emq_kit.ports.reference_driver import Driver
from emq_live.client import Queue, connect
from emq_model.keyspace import job_key


class SloppyQueue(Queue):
    def complete(self, id: str, token: int) -> str:
        r = self.conn.redis
        r.zrem(self.keys[1], id)  # active; never pending, never a token check
        if not r.delete(job_key(self.name, id)):
            return "gone"
        r.hincrby(self.keys[4], "count", 1)
        return "ok"


def open_backend(url: str | None):
    conn = connect(url)
    conn.queue = lambda name: SloppyQueue(conn, name)  # type: ignore[method-assign]
    return conn


if __name__ == "__main__":
    Driver("sloppy-complete", open_backend, serverless=False).serve(sys.stdin, sys.stdout)

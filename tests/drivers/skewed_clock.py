"""A port whose client stamps leases and run-ats with its own clock, running SKEW ms
behind the server's (it passes ``now`` itself). Under ``--clock server`` the kit must
find the scores outside the TIME window of the call.

    python tests/drivers/skewed_clock.py SKEW
"""

import sys

from emq_kit.ports.reference_driver import Driver
from emq_live.client import Queue, connect

SKEW = int(sys.argv[1])


class SkewedQueue(Queue):
    def _clock(self, now):
        sec, usec = self.conn.redis.time()
        return [sec * 1000 + usec // 1000 - SKEW]


def open_backend(url):
    conn = connect(url)
    conn.queue = lambda name: SkewedQueue(conn, name)
    return conn


if __name__ == "__main__":
    Driver("skewed-clock", open_backend, serverless=False).serve(sys.stdin, sys.stdout)

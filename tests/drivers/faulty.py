"""A driver that fails on purpose at every request for OP; otherwise it is the Python
client's driver (emq driver --live).

    python tests/drivers/faulty.py MODE OP [N]

MODE: ``exit`` (a line on stderr, then exit code 3), ``hang`` (never answers),
``garbage`` (a line that is not JSON), ``shape`` (a well-formed reply of the wrong
shape) or ``lacking`` (the right answer, without ``reap`` in an op list). With N, only
the Nth request for OP fails (a driver that times out on its third ``reset``); the
count is this process's.

It offers no batch (DP-20): every op is a request of its own, so the fault lands at the
step that sent it. (A batch that fails as a whole is judged at its first call: which
call failed is unknown, emq_kit/check/window.py.)
"""

import json
import os
import sys
import time

from emq_kit.ports.reference_driver import Driver
from emq_live.client import connect

mode, op = sys.argv[1], sys.argv[2]
nth = int(sys.argv[3]) if len(sys.argv) > 3 else None
seen = 0
driver = Driver("faulty", connect, serverless=False)
for line in sys.stdin:
    request = json.loads(line)
    seen += request["op"] == op
    if request["op"] == op and nth in (None, seen):
        if mode == "exit":
            print(f"faulty: exiting at {op} on purpose", file=sys.stderr, flush=True)
            os._exit(3)  # at once: the interpreter's teardown can outlast the test's 0.3 s timeout under load
        if mode == "hang":
            time.sleep(3600)
        if mode == "lacking":
            answer = driver.reply(line)
            answer["ok"]["ops"].remove("reap")
            reply = json.dumps(answer)
        else:
            reply = "this is not JSON" if mode == "garbage" else json.dumps({"id": request["id"], "ok": "sure"})
    else:
        answer = driver.reply(line)
        if request["op"] == "init" and "ok" in answer:
            answer["ok"]["ops"] = [o for o in answer["ok"]["ops"] if o != "batch"]
            answer["ok"].pop("batch_max", None)
        reply = json.dumps(answer)
    print(reply, flush=True)
    if request["op"] == "shutdown":
        break

"""A driver that fails on purpose at a request for OP; otherwise it is the Python
client's driver (emq driver --live).

    python tests/drivers/faulty.py MODE OP [N | N+]

MODE: ``exit`` (a line on stderr, then exit code 3), ``hang`` (never answers),
``garbage`` (a line that is not JSON), ``error`` (an ``EDRIVER`` error reply: its client
failed), ``shape`` (a well-formed reply of the wrong shape) or ``lacking`` (the right
answer, without ``reap`` in an op list). OP ``any`` is every request of a step (not
``init``, ``reset`` or ``shutdown``). Without N every request for OP fails; with N only
the Nth (a driver that times out on its third ``reset``); with ``N+`` the Nth and every
one after it (a driver that fails after its 40th request). The count is this process's.

MODE ``coin`` answers a request for OP with nothing (a claim that found no job) on a
coin's toss, otherwise rightly: a port that is not deterministic (specs/lifecycle.md
DET-1). The coin is seeded, so one process tosses the same sequence each time it runs.

MODE ``orphan`` forks a child that keeps the driver's stdout and stderr open for a
minute, then exits with code 5 (a driver started through a wrapper that stays);
``hang`` creates the file ``$FAULTY_MARK`` names, when set, as it starts to hang;
``nested`` replies an answer nested 100,000 lists deep, ``nan`` one that is ``NaN``
(neither is JSON the kit can take); ``words`` an ``EDRIVER`` error whose message holds
terminal escape sequences, a carriage return, a lone surrogate and a megabyte of text.
MODE ``short`` (OP ``batch``) keeps ``batch`` in its ops and answers each batch one
reply short. On ``init``, ``ops-type`` lists an op that is no name, ``bool-protocol`` says protocol
``true``, ``batch0`` lists ``batch`` with ``batch_max`` 0 and ``name`` gives a name with
escape sequences (the driver otherwise right).

MODE ``strict1`` (OP is ignored) is a version-1 driver written against protocol 1's
text that checks ``protocol == 1`` strictly: offered another version, it answers
``init`` with an error (DP-9).

With ``FAULTY_SERVERLESS=1`` in its environment the model is behind it, serverless.

It offers no batch (DP-20): every op is a request of its own, so the fault lands at the
step that sent it. (A batch that fails as a whole is judged at its first call: which
call failed is unknown, emq_kit/check/window.py.)
"""

import json
import os
import random
import sys
import time

from emq_kit.check.model_target import ModelTarget
from emq_kit.ports.protocol import encode_answer
from emq_kit.ports.reference_driver import Driver
from emq_live.client import connect

SESSION = ("init", "reset", "shutdown")
WORDS = "\x1b[2J\x1b]52;c;cHduZWQ=\x07\rhidden \ud800 " + "M" * 1_000_000
INIT_FAULTS = {
    "ops-type": lambda info: info["ops"].append({"op": "claim"}),
    "bool-protocol": lambda info: info.update(protocol=True),
    "batch0": lambda info: info.update(batch_max=0),
    "name": lambda info: info.update(name="\x1b]0;EVIL\x07\x1b[31mport"),
}

mode, op = sys.argv[1], sys.argv[2]
count = sys.argv[3] if len(sys.argv) > 3 else None
nth = int(count.rstrip("+")) if count else None
onwards = bool(count and count.endswith("+"))
seen = 0
# FAULTY_SERVERLESS=1: the model behind it, serverless (it answers snapshot itself)
serverless = os.environ.get("FAULTY_SERVERLESS") == "1"
driver = Driver("faulty", (lambda url: ModelTarget()) if serverless else connect, serverless=serverless,
                protocol=1 if mode == "strict1" else 2)
coin = random.Random(0)  # the same tosses in each process: a seeded check repeats exactly


def fails(request: dict) -> bool:
    """Whether this request is one that fails."""
    global seen
    counted = request["op"] == op or (op == "any" and request["op"] not in SESSION)
    seen += counted
    return counted and (nth is None or seen == nth or (onwards and seen > nth))


for line in sys.stdin:
    request = json.loads(line)
    if mode == "strict1":
        if request["op"] == "init" and request["args"].get("protocol") != 1:
            reply = json.dumps({"id": request["id"], "error": {
                "code": "EPROTO", "message": f"protocol {request['args'].get('protocol')}; this driver speaks 1"}})
        else:
            reply = json.dumps(driver.reply(line))
    elif fails(request):
        if mode == "exit":
            print(f"faulty: exiting at {request['op']} on purpose", file=sys.stderr, flush=True)
            os._exit(3)  # at once: the interpreter's teardown can outlast the test's 0.3 s timeout under load
        if mode == "hang":
            if "FAULTY_MARK" in os.environ:  # a file that says it hangs now
                open(os.environ["FAULTY_MARK"], "w").close()
            time.sleep(3600)
        if mode == "orphan":
            if os.fork() == 0:
                time.sleep(60)
            os._exit(5)
        if mode == "coin":
            answer = driver.reply(line)
            nothing = {"id": request["id"], "ok": encode_answer(request["op"], None, ())}
            reply = json.dumps(nothing if coin.random() < 0.5 else answer)
        elif mode == "lacking":
            answer = driver.reply(line)
            answer["ok"]["ops"].remove("reap")
            reply = json.dumps(answer)
        elif mode == "short":
            answer = driver.reply(line)
            answer["ok"] = answer["ok"][:-1]
            reply = json.dumps(answer)
        elif mode in INIT_FAULTS:
            answer = driver.reply(line)
            INIT_FAULTS[mode](answer["ok"])
            reply = json.dumps(answer)
        elif mode == "nested":
            reply = '{"id": %d, "ok": %s}' % (request["id"], "[" * 100_000 + "]" * 100_000)
        elif mode == "nan":
            reply = '{"id": %d, "ok": NaN}' % request["id"]
        elif mode == "words":
            reply = json.dumps({"id": request["id"], "error": {"code": "EDRIVER", "message": WORDS}})
        elif mode == "error":
            reply = json.dumps({"id": request["id"], "error": {"code": "EDRIVER", "message": "the client failed"}})
        else:
            reply = "this is not JSON" if mode == "garbage" else json.dumps({"id": request["id"], "ok": "sure"})
    else:
        answer = driver.reply(line)
        if request["op"] == "init" and "ok" in answer and mode != "short":
            answer["ok"]["ops"] = [o for o in answer["ok"]["ops"] if o != "batch"]
            answer["ok"].pop("batch_max", None)
        reply = json.dumps(answer)
    print(reply, flush=True)
    if request["op"] == "shutdown":
        break

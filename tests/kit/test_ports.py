"""Driver protocol version 2 (specs/driver-protocol.md DP-9a..d, DP-20) over real
processes: negotiation (v1 drivers keep working), the ops a driver offers and the core,
absent arguments, the fence a driver reports, the batch request on the model driver, the
Python client's driver and the Node port; and the foreign port (tests/drivers/foreign.py),
each of whose deviations a short hand-written exchange shows against ``emq driver``."""

from __future__ import annotations

import shlex

import jsonschema
import pytest

from emq_kit.check.lanes import CELLS as LANE_CELLS
from emq_kit.check.raw.rule import raw_cells
from emq_kit.errors import DriverError, DriverUnavailable
from emq_kit.ports import protocol as driver
from emq_kit.ports.driver_client import DriverProcess, DriverTarget
from emq_model import errors, keyspace, spec
from tests.hostile import HOSTILE
from tests.kit.processes import DRIVERS, EMQ, NODE, PY, check
from tests.kit.test_driver import schema

MODEL = f"{shlex.quote(str(EMQ))} driver --model"
FOREIGN = f"{PY} {DRIVERS / 'foreign.py'}"
FOREIGN_DEVIATIONS = ("empty-queue", "lease-bound", "complete-settled", "extend-dead", "claim-orphan", "reprocess")
J1 = "JOB0KHTOWnGLuC"


def python_driver(**kw: object) -> str:
    """A model-backed driver built with ``Driver(**kw)``: narrowed ops, absent args, an old protocol."""
    code = ("import sys; from emq_kit.ports.reference_driver import Driver; from emq_kit.check.model_target import ModelTarget; "
            f"Driver('py', lambda url: ModelTarget(), serverless=True, **{kw!r}).serve(sys.stdin, sys.stdout)")
    return f"{PY} -c {shlex.quote(code)}"


# -- the schema: example messages of version 2 ------------------------------------------


def valid(message: dict) -> bool:
    return jsonschema.Draft202012Validator(schema()).is_valid(message)


def result_valid(op: str, ok: object) -> bool:
    s = schema()
    return jsonschema.Draft202012Validator({"$defs": s["$defs"], "$ref": f"#/$defs/results/{op}"}).is_valid(ok)


def test_version_2_messages_fit_the_schema() -> None:
    assert valid({"id": 1, "op": "init", "args": {"protocol": 2, "url": None, "queues": ["alpha"], "clock": "virtual"}})
    assert result_valid("init", {"name": "p", "version": "1", "protocol": 2, "ops": ["init", "batch"], "fence": "1",
                                 "batch_max": 64, "absent_args": {"reap": ["max_attempts"]}})
    batch = {"id": 7, "op": "batch", "args": {"snapshot": True, "calls": [
        {"op": "enqueue", "queue": "alpha", "args": {"id": J1, "payload": {"b64": "eA=="}}},
        {"op": "queue", "args": {"name": ""}},
        {"op": "claim", "queue": "alpha", "args": {"lease_ms": 5, "now": 0}}]}}
    assert valid(batch)
    snap = {"queue": "alpha", "pending": [], "active": [[J1, 5]], "schedule": [], "dead": [], "rows": {},
            "completed": 0, "failed": 0, "stray": []}
    assert result_valid("batch", [{"ok": "enqueued", "snapshot": snap}, {"error": {"code": "EMQARG", "message": "x"}},
                                  {"ok": {"job": None, "dropped": []}, "snapshot": snap}])


@pytest.mark.parametrize("message", [
    {"id": 7, "op": "batch", "queue": "alpha", "args": {"calls": [{"op": "counts", "queue": "alpha", "args": {}}]}},
    {"id": 7, "op": "batch", "args": {"calls": []}},
    {"id": 7, "op": "batch", "args": {"calls": [{"op": "counts", "args": {}}]}},  # a queue op names its queue
    {"id": 7, "op": "batch", "args": {"calls": [{"op": "init", "args": {}}]}},
    {"id": 7, "op": "batch", "args": {"calls": [{"op": "claim", "queue": "a", "args": {"lease": 5}}]}},
    {"id": 1, "op": "init", "args": {"protocol": 0, "url": None, "queues": [], "clock": "virtual"}},
])
def test_malformed_version_2_requests_do_not_fit(message: dict) -> None:
    assert not valid(message)


@pytest.mark.parametrize("op, ok", [
    ("batch", [{"ok": "enqueued", "error": {"code": "EMQARG", "message": ""}}]),
    ("batch", [{"ok": 1, "snapshot": {"queue": "alpha"}}]),
    ("init", {"name": "p", "version": "1", "protocol": 3, "ops": []}),
    ("init", {"name": "p", "version": "1", "protocol": 2, "ops": [], "batch_max": 0}),
])
def test_malformed_version_2_results_do_not_fit(op: str, ok: object) -> None:
    assert not result_valid(op, ok)


# -- negotiation, ops, absent arguments, fence -------------------------------------------


def test_the_model_driver_speaks_version_2_and_an_old_driver_version_1() -> None:
    new = DriverTarget(MODEL)
    try:
        assert (new.protocol, new.batch_max, new.fence) == (2, driver.BATCH_MAX, None)
        assert driver.BATCH in new.offered
    finally:
        new.close()
    old = DriverTarget(python_driver(protocol=1))
    try:
        assert (old.protocol, old.batch_max, old.info["protocol"]) == (1, 0, 1)
        assert "fence" not in old.info and driver.BATCH not in old.offered
        with pytest.raises(DriverError, match="offers no batch"):
            old.batch([("counts", "alpha", {})])
    finally:
        old.close()
    done = check(python_driver(protocol=1), "--profile", "dev")
    assert done.returncode == 0 and "INCONCLUSIVE (no-divergence)" in done.stdout, done.stdout + done.stderr


def test_a_driver_without_the_core_is_refused_in_one_line_naming_it() -> None:
    ops = [op for op in driver.REQUIRED_OPS + driver.SERVERLESS_OPS if op not in ("claim", "snapshot")]
    done = check(python_driver(ops=ops), "--profile", "dev")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "the driver lacks the core ops claim, snapshot" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_a_partial_port_is_accepted_with_partial_and_its_missing_ops_are_never_sent() -> None:
    ops = [op for op in driver.REQUIRED_OPS + driver.SERVERLESS_OPS if op != "reprocess"]
    with pytest.raises(DriverUnavailable, match="the driver lacks ops reprocess$"):
        DriverTarget(python_driver(ops=ops))
    target = DriverTarget(python_driver(ops=ops), partial=True)
    try:
        assert "reprocess" not in target.offered and "remove" in target.offered
        with pytest.raises(DriverError, match="reprocess was not offered"):
            target.queue("alpha").reprocess(id=J1)
        assert target.queue("alpha").remove(id=J1) == "gone"
    finally:
        target.close()


def test_absent_arguments_are_declared_checked_and_never_sent() -> None:
    target = DriverTarget(python_driver(absent_args={"reap": ["max_attempts"]}))
    try:
        assert target.absent_args == {"reap": ("max_attempts",)}
        assert target.queue("alpha").reap(limit=5, max_attempts=None, now=0) == 0
        with pytest.raises(DriverError, match="reap got max_attempts, which the driver declared absent"):
            target.queue("alpha").reap(limit=5, max_attempts=2, now=0)
    finally:
        target.close()
    with pytest.raises(DriverUnavailable, match="only optional arguments"):
        DriverTarget(python_driver(absent_args={"complete": ["token"]}))


def test_the_kit_writes_no_fence_and_reads_the_one_the_driver_reports(valkey) -> None:
    import redis

    r = redis.Redis.from_url(valkey.url)
    r.delete("{emq}:version")
    target = DriverTarget(f"{shlex.quote(str(EMQ))} driver --live", valkey.url)
    try:
        assert target.fence == spec.WIRE_VERSION == target.info["fence"]
    finally:
        target.close()
    r.set("{emq}:version", "99")  # another wire version: the Python client refuses at init
    try:
        with pytest.raises(DriverUnavailable, match="EMQVERSION"):
            DriverTarget(f"{shlex.quote(str(EMQ))} driver --live", valkey.url)
    finally:
        r.delete("{emq}:version")
        r.close()


# -- the batch request --------------------------------------------------------------------


def calls() -> list[tuple[str, str | None, dict]]:
    """A session touching every kind of answer: transitions, a refusal, reads, a bad queue."""
    J2 = "JOB0KHTOWnGLuD"
    return [
        ("enqueue", "alpha", {"id": J1, "payload": b"one"}),
        ("schedule", "alpha", {"id": J2, "payload": "two", "run_at": None, "delay_ms": 3, "now": 10}),
        ("claim", "alpha", {"lease_ms": 5, "now": 11}),
        ("extend", "alpha", {"id": J1, "token": 2, "lease_ms": 5, "now": 12}),  # a stale token
        ("retry", "alpha", {"id": J1, "token": 1, "delay_ms": 1, "max_attempts": 1, "error": b"x", "now": 12}),
        ("promote", "alpha", {"limit": 10, "now": 13}),
        ("queue", None, {"name": "no{good}"}),
        ("claim", "β*[x]", {"lease_ms": 5, "now": 14}),
        ("job", "alpha", {"id": J1}),
        ("counts", "alpha", {}),
        ("reprocess", "alpha", {"id": J1}),
        ("browse", "alpha", {"n": 5}),
    ]


def outcomes(replies: list) -> list:
    return [(type(r.answer).__name__, getattr(r.answer, "code", None)) if isinstance(r.answer, Exception)
            else (r.answer, r.dropped, r.snapshot) for r in replies]


def one_by_one(target: DriverTarget) -> list:
    """The same calls sent alone, each followed by the queue's snapshot."""
    out = []
    for op, name, args in calls():
        try:
            if op == "queue":
                answer, dropped = target.process.request("queue", {"name": args["name"]}), ()
            else:
                q = target.queue(name)
                answer = getattr(q, op)(**args)
                dropped = q.last_dropped if op == "claim" else ()
            out.append((answer, dropped, target.snapshot(name) if name else None))
        except errors.EmqError as exc:
            out.append((type(exc).__name__, exc.code))
    return out


def test_a_batch_answers_each_call_as_if_sent_alone_on_the_model_driver() -> None:
    target = DriverTarget(MODEL)
    try:
        target.reset()
        batched = outcomes(target.batch(calls()))
        target.reset()
        assert batched == one_by_one(target)
        assert batched[3] == ("StaleError", "EMQSTALE")  # a refusal is that call's reply; the next one runs
        assert batched[4][0] == "dead" and batched[10][0] == "ok"
    finally:
        target.close()


def test_a_batch_is_split_at_batch_max() -> None:
    target = DriverTarget(MODEL)
    try:
        target.batch_max = 5  # the kit's side of a driver that names a small batch_max
        target.reset()
        replies = target.batch(calls())
        assert len(replies) == len(calls()) and target.process.next_id == 2 + 1 + 3  # init, reset, 3 batches
    finally:
        target.close()


def server_driver(port: str, request: pytest.FixtureRequest) -> str:
    """The command of a port's driver on a server: the Python client's or the Node port's."""
    return (f"{shlex.quote(str(EMQ))} driver --live" if port == "python"
            else f"node {NODE / 'driver.js'} --scripts {request.getfixturevalue('node_scripts')}")


@pytest.mark.parametrize("port", ["python", "node"])
def test_a_batch_on_a_server_equals_the_model_drivers(port: str, valkey, request) -> None:
    reference, target = DriverTarget(MODEL), DriverTarget(server_driver(port, request), valkey.url)
    try:
        assert target.protocol == 2 and target.fence == spec.WIRE_VERSION
        for t in (reference, target):
            t.reset()
        # the kit also reads each touched queue itself after the batch and compares
        assert outcomes(target.batch(calls())) == outcomes(reference.batch(calls()))
    finally:
        reference.close()
        target.close()


@pytest.mark.parametrize("port", ["python", "node"])
def test_a_batch_sent_after_a_script_flush_answers_in_order(port: str, valkey, request) -> None:
    """DP-20 on a port that pipelines its batch (the Node port): the scripts flushed, every
    command from the first script call on met NOSCRIPT and did not run, but the plain
    reads after it (job, browse) did, out of their place; sent again in order once the
    scripts are loaded, each answer and snapshot is the model driver's."""
    batch = [("browse", "alpha", {"n": 5}), *calls()]  # a plain read first: the first NOSCRIPT is not the first command
    reference, target = DriverTarget(MODEL), DriverTarget(server_driver(port, request), valkey.url)
    try:
        for t in (reference, target):
            t.reset()
        target.inspector.conn.redis.script_flush()
        assert outcomes(target.batch(batch)) == outcomes(reference.batch(batch))
    finally:
        reference.close()
        target.close()


@pytest.mark.parametrize("port", ["model", "python", "node"])
def test_a_batch_with_a_malformed_call_runs_none_of_its_calls(port: str, valkey, request) -> None:
    """DP-21: a call the batch does not take, after good ones, refuses the whole batch
    with EPROTO before any call runs: the queue stays empty (the ports ran the calls
    before it)."""
    target = DriverTarget(MODEL) if port == "model" else DriverTarget(server_driver(port, request), valkey.url)
    try:
        target.reset()
        good = {"op": "enqueue", "queue": "alpha", "args": {"id": J1, "payload": driver.encode(b"x")}}
        _, _, reply = target.process.exchange(driver.BATCH, {"calls": [good, good, {"op": "init", "args": {}}],
                                                             "snapshot": True})
        assert reply.get("error", {}).get("code") == driver.PROTO, reply
        assert target.snapshot("alpha").location("pending") == ()
    finally:
        target.close()


@pytest.mark.parametrize("port", ["python", "node"])
def test_a_port_names_the_keys_of_a_hostile_queue_name_as_the_model_does(port: str, valkey, request) -> None:
    """A name is never a template or a pattern to a port: a queue named ``a<id>b``,
    ``a$&b``, ``a%b``, ``*`` ... (tests/hostile.py) answers every call as the model's,
    and its keyspace read back after the batch is the model's (KS-3: any such name is a
    queue's). The Node port once filled its row key's ``<id>`` in the queue name."""
    reference, target = DriverTarget(MODEL), DriverTarget(server_driver(port, request), valkey.url)
    session = [call for name in HOSTILE for call in (
        ("enqueue", name, {"id": J1, "payload": b"x"}), ("claim", name, {"lease_ms": 5, "now": 1}),
        ("job", name, {"id": J1}), ("remove", name, {"id": J1}), ("counts", name, {}))]
    try:
        for t in (reference, target):
            t.reset()
        assert outcomes(target.batch(session)) == outcomes(reference.batch(session))
    finally:
        reference.close()
        target.close()
        with valkey.client() as r:  # the session's queues are gone again, nothing of them left on the shared server
            for name in HOSTILE:
                r.delete(*r.scan_iter(match=keyspace.pattern(name)), "emq:{}:none")


LIAR = """
import sys
from emq_kit.ports.reference_driver import Driver
from emq_live.client import Queue, connect
from emq_model.snapshot import Snapshot

class Liar(Queue):
    def snapshot(self):
        return Snapshot(self.name)  # always an empty queue

def open_backend(url):
    conn = connect(url)
    conn.queue = lambda name: Liar(conn, name)
    return conn

Driver("liar", open_backend, serverless=False).serve(sys.stdin, sys.stdout)
"""


def test_a_driver_reporting_a_keyspace_it_did_not_leave_is_caught(valkey) -> None:
    target = DriverTarget(f"{PY} -c {shlex.quote(LIAR)}", valkey.url)
    try:
        target.reset()
        assert target.batch([("counts", "alpha", {})])[0].answer["pending"] == 0  # true while the queue is empty
        with pytest.raises(DriverError, match="snapshot of alpha after the batch differs"):
            target.batch([("enqueue", "alpha", {"id": J1, "payload": b"x"}), ("counts", "beta", {})])
    finally:
        target.close()


# -- the foreign port: each deviation on its own -------------------------------------------


def exchange(cmd: str, script: list[tuple[str, str | None, dict]]) -> list:
    """Init, reset, then ``script`` as raw requests; every reply's ok or error code."""
    process = DriverProcess(shlex.split(cmd), 10.0)
    try:
        init = process.request("init", {"protocol": 2, "url": None, "queues": ["alpha"], "clock": "virtual"})
        out = [sorted(init["ops"])]
        for op, queue, args in [("reset", None, {})] + script:
            _, _, reply = process.exchange(op, driver.encode(args), queue)
            out.append(reply["ok"] if "ok" in reply else reply["error"]["code"])
        return out
    finally:
        process.close()


def only(deviation: str) -> str:
    return f"{FOREIGN} --conform {','.join(d for d in FOREIGN_DEVIATIONS if d != deviation)}"


def claimed(lease: int = 10, now: int = 0) -> list:
    return [("enqueue", "alpha", {"id": J1, "payload": b"p"}), ("claim", "alpha", {"lease_ms": lease, "now": now})]


def retried(max_attempts: int) -> list:
    return claimed() + [("retry", "alpha", {"id": J1, "token": 1, "delay_ms": 5, "max_attempts": max_attempts,
                                            "error": "e", "now": 1})]


SHOWN_BY = {
    "empty-queue": ([("queue", None, {"name": ""})], "EMQARG", None),
    "lease-bound": ([("claim", "alpha", {"lease_ms": spec.LIMITS["ms_max"] + 1, "now": 0})], "EMQARG",
                    {"job": None, "dropped": []}),
    "complete-settled": (retried(3) + [("complete", "alpha", {"id": J1, "token": 1}),
                                       ("job", "alpha", {"id": J1})], None, None),
    "extend-dead": (retried(1) + [("extend", "alpha", {"id": J1, "token": 1, "lease_ms": 10, "now": 2}),
                                  ("state", "alpha", {"id": J1})], None, None),
    "claim-orphan": ([("enqueue", "alpha", {"id": J1, "payload": b"p"}), ("forget_row", "alpha", {"id": J1}),
                      ("claim", "alpha", {"lease_ms": 10, "now": 0})], None, None),
    "reprocess": (retried(1) + [("reprocess", "alpha", {"id": J1})], "ok", "EPROTO"),
}


@pytest.mark.parametrize("deviation", FOREIGN_DEVIATIONS)
def test_each_deviation_of_the_foreign_port_shows_on_its_own(deviation: str) -> None:
    script, want, got = SHOWN_BY[deviation]
    reference = exchange(MODEL, script)
    # the foreign port has no lanes, and no key faults (its EMQTYPE cells are not implemented)
    reference[0] = [op for op in reference[0] if op not in driver.LANE_OPS + driver.KEY_FAULT_OPS]
    conforming = exchange(f"{FOREIGN} --conform all", script)
    deviating = exchange(only(deviation), script)
    ops_of = lambda replies: [op for op in replies[0] if op != "reprocess"]  # noqa: E731
    assert conforming == reference  # with the deviation off, every reply is the reference's
    if want is not None:
        assert (reference[-1], deviating[-1]) == (want, got)
    differing = [i for i, (a, b) in enumerate(zip(reference, deviating)) if a != b]
    if deviation == "reprocess":
        assert ops_of(reference) == deviating[0] and "reprocess" not in deviating[0]
        assert differing == [0, len(reference) - 1]
    else:
        assert deviating[0] == reference[0] and differing, (reference, deviating)
        # the first difference is at the call the deviation is about
        assert differing[0] == len(reference) - (2 if deviation in ("complete-settled", "extend-dead") else 1)
    if deviation == "complete-settled":  # ok, and the row is gone; the contract: EMQSTALE, row kept
        assert (reference[-2], deviating[-2]) == ("EMQSTALE", "ok") and deviating[-1] is None
        assert reference[-1]["state"] == {"b64": "c2NoZWR1bGVk"}  # b"scheduled"
    if deviation == "extend-dead":
        assert (reference[-2:], deviating[-2:]) == (["EMQSTALE", "dead"], ["ok", "active"])
    if deviation == "claim-orphan":
        assert reference[-1] == {"job": None, "dropped": [J1]}
        assert deviating[-1]["job"]["id"] == J1 and deviating[-1]["dropped"] == []


def test_the_foreign_port_conforms_with_every_deviation_off_and_reports_reprocess_not_implemented() -> None:
    lanes = ", ".join(sorted(driver.LANE_OPS))  # it has no lanes: a partial port, never a difference
    lane_cells = len(LANE_CELLS)
    # serverless without spoil_key/mend_key: the EMQTYPE cells of its ops are not implemented either
    typed = len([c for c in spec.cells() if c[1] == "EMQTYPE"])
    raw = len(raw_cells(sweep=False))  # a driver takes no raw calls (dev does not sweep them)
    no_raw = "raw calls: the target does not declare the raw capability"
    done = check(f"{FOREIGN} --conform all", "--profile", "dev")
    assert done.returncode == 0 and "INCONCLUSIVE (no-divergence)" in done.stdout, done.stdout + done.stderr
    assert (f"{lane_cells + typed + raw} cells not implemented (ops not sent: {lanes}; no key faults: EMQTYPE; {no_raw})"
            in done.stdout), done.stdout
    surface_and_lifecycle = ",".join(d for d in FOREIGN_DEVIATIONS if d != "reprocess")
    done = check(f"{FOREIGN} --conform {surface_and_lifecycle}", "--profile", "dev")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (f"{lane_cells + typed + raw + 3} cells not implemented (ops not sent: {lanes}, reprocess; no key faults: "
            f"EMQTYPE; {no_raw})"
            in done.stdout), done.stdout


# -- the foreign port's planted defects (off unless planted) and its store on a server ------

J2 = "JOB0KHTOWnGLuD"


def test_kind_as_arg_refuses_a_bad_id_with_emqarg_on_every_op_that_takes_one() -> None:
    ops_with_ids = [op for op, entry in spec.OPS.items() if any(a["type"] == "job_id" for a in entry["args"])
                    and op != "reprocess"]  # reprocess: not offered (a deviation of its own)
    args = {"payload": b"p", "token": 1, "delay_ms": 1, "max_attempts": 1, "error": "e", "lease_ms": 1, "now": 0}
    script = [(op, "alpha", {a["name"]: "ORD0KHTOWnGLuC" if a["type"] == "job_id" else args[a["name"]]
                             for a in spec.OPS[op]["args"] if a["name"] in args or a["type"] == "job_id"}
               | ({"now": 0} if spec.OPS[op]["clock"] else {})) for op in ops_with_ids]
    script = [(op, q, {k: v for k, v in a.items() if not (op == "schedule" and k == "delay_ms")} | (
        {"delay_ms": 1} if op == "schedule" else {})) for op, q, a in script]
    assert exchange(f"{FOREIGN} --conform all", script)[2:] == ["EMQKIND"] * len(ops_with_ids)
    assert exchange(f"{FOREIGN} --conform all --plant kind-as-arg", script)[2:] == ["EMQARG"] * len(ops_with_ids)
    assert len(ops_with_ids) >= 7


def test_reap_uncapped_requeues_an_expired_lease_past_its_attempts() -> None:
    script = claimed(lease=10, now=0) + [("reap", "alpha", {"limit": 10, "max_attempts": 1, "now": 5}),
                                         ("reap", "alpha", {"limit": 10, "max_attempts": 1, "now": 11}),
                                         ("state", "alpha", {"id": J1})]
    assert exchange(f"{FOREIGN} --conform all", script)[-3:] == [0, 1, "dead"]
    assert exchange(f"{FOREIGN} --conform all --plant reap-uncapped", script)[-3:] == [0, 1, "pending"]


def test_batch_counts_answers_stale_counts_inside_a_batch_only() -> None:
    calls = [{"op": "enqueue", "queue": "alpha", "args": driver.encode({"id": J1, "payload": b"p"})},
             {"op": "counts", "queue": "alpha", "args": {}}]
    for plant, pending in (("", 1), ("--plant batch-counts", 0)):
        process = DriverProcess(shlex.split(f"{FOREIGN} --conform all {plant}"), 10.0)
        try:
            process.request("init", {"protocol": 2, "url": None, "queues": ["alpha"], "clock": "virtual"})
            process.request("reset", {})
            _, _, reply = process.exchange("batch", {"calls": calls, "snapshot": False}, None)
            assert reply["ok"][1]["ok"]["pending"] == pending
            _, _, alone = process.exchange("counts", {}, "alpha")  # step by step: the counts as they are
            assert alone["ok"]["pending"] == 1
        finally:
            process.close()


@pytest.mark.parametrize("clock", ["virtual", "server"])
def test_the_foreign_port_on_a_server_conforms_but_for_key_types(valkey, clock: str) -> None:
    """``--store server``: the same port, its queues on the server in the contract's
    keyspace, the kit reading them itself; under the server clock it reads TIME. It never
    checks a key's type, so the run leaves the key faults out. The run found no fence, so
    it removes the one the port wrote on connect (OWN-7), whichever test ran before."""
    with valkey.client() as r:
        r.delete("{emq}:version")
    done = check(f"{FOREIGN} --store server --conform all", "--url", valkey.url, "--clock", clock, "--profile", "dev",
                 "--skip-ops", "spoil_key,mend_key")
    assert done.returncode == 0 and "INCONCLUSIVE (no-divergence)" in done.stdout, done.stdout + done.stderr
    with valkey.client() as r:
        assert r.get("{emq}:version") is None

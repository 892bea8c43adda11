"""The Node port's lane ops (ports/node: emq.js, driver.js; driver-protocol.md §4 "Lane
ops") against the model: the same random programs as tests/live/test_lanes.py, one driver
request per step on the session's Valkey, every answer and the whole keyspace after every
step equal to the model's. The kit's transport (``DriverProcess``) carries the requests."""

from __future__ import annotations

import base64
import itertools
from pathlib import Path
from typing import Any, Iterator

import pytest
from hypothesis import HealthCheck, given, settings

import emq_live
from emq_kit.ports.bundle import write as write_scripts
from emq_kit.ports.driver_client import DriverProcess
from emq_model import errors, invariants
from emq_model.lanes import LaneClaimed
from emq_model.model import Claimed, QueueModel
from tests.live.test_lanes import NOW, Program, programs
from tests.livekit import flush_url

NODE = Path(__file__).resolve().parents[2] / "ports" / "node"


class NodeQueue:
    """One queue of the Node port, with the model's lane and core methods: each call is
    one driver request, its answer read back in the model's types."""

    def __init__(self, process: DriverProcess, name: str) -> None:
        self.process, self.name = process, name
        self.last_dropped: tuple[str, ...] = ()

    def _call(self, op: str, **args: Any) -> Any:
        wire = {k: {"b64": base64.b64encode(v).decode()} if isinstance(v, bytes) else v for k, v in args.items()}
        return self.process.request(op, wire, self.name)

    def _job(self, job: dict[str, Any]) -> LaneClaimed:
        return LaneClaimed(job["id"], base64.b64decode(job["payload"]["b64"]), job["token"], job["group"])

    def lane_claim(self, lease_ms: int, *, now: int) -> LaneClaimed | None:
        ok = self._call("lane_claim", lease_ms=lease_ms, now=now)
        self.last_dropped = tuple(ok["dropped"])
        return ok["job"] and self._job(ok["job"])

    def lane_wclaim(self, lease_ms: int, *, now: int) -> list[LaneClaimed]:
        ok = self._call("lane_wclaim", lease_ms=lease_ms, now=now)
        self.last_dropped = tuple(ok["dropped"])
        return [self._job(job) for job in ok["jobs"]]

    def claim(self, lease_ms: int, *, now: int) -> Claimed | None:
        ok = self._call("claim", lease_ms=lease_ms, now=now)
        self.last_dropped = tuple(ok["dropped"])
        job = ok["job"]
        return job and Claimed(job["id"], base64.b64decode(job["payload"]["b64"]), job["token"])

    def lane_enqueue(self, id: str, payload: bytes, group: str) -> str:
        return self._call("lane_enqueue", id=id, payload=payload, group=group)

    def __getattr__(self, op: str) -> Any:
        return lambda *args, **kw: self._call(op, **dict(zip(ARGS[op], args)), **kw)


ARGS = {"lane_pause": ("group",), "lane_resume": ("group",), "lane_limit": ("group", "n"),
        "lane_weight": ("group", "w"), "enqueue": ("id", "payload"), "complete": ("id", "token"),
        "retry": ("id", "token"), "promote": (), "reap": (), "reprocess": ("id",), "remove": ("id",)}


@pytest.fixture(scope="module")
def node(valkey, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[DriverProcess, str]]:
    if not (NODE / "node_modules" / "iovalkey").is_dir():
        pytest.fail("run scripts/install-node-port.sh first (the Node port's dependencies)")
    scripts = tmp_path_factory.mktemp("node") / "lua"
    write_scripts(scripts)
    url = flush_url(valkey)
    process = DriverProcess(["node", str(NODE / "driver.js"), "--scripts", str(scripts)], timeout=10)
    info = process.request("init", {"protocol": 1, "url": url, "queues": [], "clock": "virtual"})
    assert {"lane_enqueue", "lane_claim", "lane_wclaim", "lane_pause", "lane_resume", "lane_limit",
            "lane_weight"} <= set(info["ops"])
    yield process, url
    process.close()  # shutdown (DP-18), then the exit


_names = itertools.count()


@given(program=programs)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
def test_the_node_ports_lane_ops_equal_the_model(node, program: list[tuple]) -> None:
    process, url = node
    name = f"n{next(_names)}"
    inspector = emq_live.connect(url).queue(name)  # reads the keyspace the port leaves
    on_model, on_node = Program(QueueModel(name)), Program(NodeQueue(process, name))
    previous = None
    for step in program:
        if step[0] == "forget_row":
            continue  # an operator's fault, not a port's op (tests/live/test_lanes.py covers it)
        want, got = on_model.run(step), on_node.run(step)
        assert got == want, step  # a refusal: the same code (EmqError compares codes)
        if step[0] in ("lane_claim", "lane_wclaim", "claim"):
            assert on_node.target.last_dropped == on_model.target.last_dropped
        snap = inspector.snapshot()
        assert snap == on_model.target.snapshot(), step
        assert invariants.check_invariants(snap, previous) == [], step
        previous = snap
    inspector.conn.close()


@pytest.mark.parametrize("op, args", [
    ("lane_enqueue", {"id": "JOB00000000001", "payload": "p", "group": "a b"}),
    ("lane_enqueue", {"id": "JOB00000000001", "payload": "p", "group": 7}),
    ("lane_pause", {"group": ""}),
    ("lane_limit", {"group": "a", "n": -1}),
    ("lane_limit", {"group": "a", "n": "1"}),
    ("lane_weight", {"group": "a", "w": 1001}),
    ("lane_claim", {"lease_ms": 0}),
    ("lane_wclaim", {"lease_ms": True}),
])
def test_the_node_port_refuses_bad_lane_arguments_with_emqarg(node, op: str, args: dict) -> None:
    process, _ = node
    with pytest.raises(errors.ArgError):
        process.request(op, {**args, "now": NOW} if "claim" in op else args, "h")

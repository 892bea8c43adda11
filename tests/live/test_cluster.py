"""Valkey Cluster: the client through redis-py's ``RedisCluster``
(``redis+cluster://`` URLs) on a local 3-primary cluster (the session's ``cluster``
fixture, ``emq_kit.server.ClusterProcess``).

The conformance machine's two queues are put on different primaries (OWN-2), so
``emq check`` passing there shows every script finds all of its keys on the node it runs on. The
cluster refuses a script that touches a key of another slot (shown here too), so the
check passing also shows the scripts never cross a slot.
"""

from __future__ import annotations

import copy
import hashlib
import re
import time
from typing import Any

import pytest
import redis

import emq_live
from emq_kit import cli
from emq_kit.check.lanes import CELLS as LANE_CELLS
from emq_kit.check.pools import QUEUES
from emq_kit.claim import Claim
from emq_kit.server import ClusterProcess, ServerProcess, _slot_map
from emq_live import acl
from emq_live.client import Connection
from emq_live.scripts import Script, ScriptSet
from emq_model import invariants, keyspace, spec
from emq_model.model import Claimed
from tests.e2e.test_acl import PASSWORD, refused, workload
from tests.live.test_faults import CutProxy
from tests.live.test_live import tour
from tests.livekit import Backend, J


def evalsha_calls(node: ServerProcess) -> int:
    with node.client() as r:
        return int(r.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))


def test_the_cluster_is_three_primaries_covering_every_slot(cluster: ClusterProcess) -> None:
    ranges = cluster.slot_map()
    assert [lo for lo, _, _ in ranges][0] == 0 and ranges[-1][1] == 16383
    assert all(ranges[i][1] + 1 == ranges[i + 1][0] for i in range(len(ranges) - 1))
    assert sorted(p for _, _, p in ranges) == sorted(n.port for n in cluster.nodes)
    for node in cluster.nodes:
        with node.client(decode_responses=True) as r:
            info = r.cluster("info")
        assert info["cluster_state"] == "ok" and int(info["cluster_known_nodes"]) == 3
    assert cluster.url == f"redis+cluster://127.0.0.1:{cluster.nodes[0].port}"


def test_the_machine_queues_live_on_different_primaries(cluster: ClusterProcess) -> None:
    owners = {q: cluster.node_of("{" + q + "}") for q in QUEUES}
    assert len({n.port for n in owners.values()}) == len(QUEUES), owners


def test_scripts_are_loaded_on_every_primary(cluster: ClusterProcess) -> None:
    with emq_live.connect(cluster.url) as conn:
        shas = [s.sha for s in conn.scripts.scripts.values()]
        for node in cluster.nodes:
            with node.client() as r:
                r.script_flush()
        conn.scripts.load(conn.redis)
        for node in cluster.nodes:
            with node.client() as r:
                assert r.script_exists(*shas) == [True] * len(shas), node


def test_noscript_is_handled_per_node(cluster: ClusterProcess) -> None:
    a, b = "noscript-a", "noscript-b"
    node_a, node_b = cluster.node_of("{" + a + "}"), cluster.node_of("{" + b + "}")
    assert node_a.port != node_b.port
    with emq_live.connect(cluster.url) as conn:
        qa, qb = conn.queue(a), conn.queue(b)
        for q in (qa, qb):
            q.remove(J(1))
        sha = conn.scripts["enqueue"].sha
        with node_a.client() as r:
            r.script_flush()
        with node_b.client() as r:
            assert r.script_exists(sha) == [True]
        assert qa.enqueue(J(1), b"a") == "enqueued"  # NOSCRIPT on node a: loaded, run once
        assert qb.enqueue(J(1), b"b") == "enqueued"
        with node_a.client() as r:
            assert r.script_exists(sha) == [True]
            r.script_flush()
        batch = qa.pipeline().claim(10, now=0)
        assert batch.execute() == [Claimed(J(1), b"a", 1)]
        assert qb.claim(10, now=0) == Claimed(J(1), b"b", 1)
        for q in (qa, qb):
            assert q.complete(J(1), 1) == "ok"
            assert invariants.check_invariants(q.snapshot()) == []


def test_each_call_runs_on_the_primary_of_its_queue(cluster: ClusterProcess) -> None:
    """The snapshot (and every script) runs on the node that owns the queue's slot; only
    that node's EVALSHA counter moves, and the snapshot sees the queue's rows there."""
    with emq_live.connect(cluster.url) as conn:
        for name in QUEUES:
            q = conn.queue(name)
            q.remove(J(5))
            q.enqueue(J(5), name)
            owner = cluster.node_of("{" + name + "}")
            before = {n.port: evalsha_calls(n) for n in cluster.nodes}
            snap = q.snapshot()
            after = {n.port: evalsha_calls(n) for n in cluster.nodes}
            assert {p for p in after if after[p] != before[p]} == {owner.port}
            assert after[owner.port] == before[owner.port] + 1
            assert snap.pending == ((J(5), 0),) and snap.row_map()[J(5)]["payload"] == name.encode()
            assert q.remove(J(5)) == "ok"


def strict(scripts: ScriptSet) -> ScriptSet:
    """The same scripts behind a ``#!lua`` shebang. Valkey Cluster then refuses a script
    that touches a key of another slot than its KEYS; a script without one (ours, since
    fakeredis cannot parse a shebang) may touch any key its node holds."""
    out = copy.copy(scripts)
    out.scripts = {}
    for name, s in scripts.scripts.items():
        source = "#!lua\n" + s.source
        out.scripts[name] = Script(name, source, hashlib.sha1(source.encode("utf-8")).hexdigest())
    return out


def test_the_cluster_refuses_a_strict_script_that_crosses_a_slot(cluster: ClusterProcess) -> None:
    """The control for the test below: another slot on the same node is refused only
    behind a shebang; another node's slot always."""
    owner = cluster.node_of("{alpha}")
    lo, hi = next((lo, hi) for lo, hi, p in cluster.slot_map() if p == owner.port)
    same_node = next(k for k in (f"{{t{i}}}:x" for i in range(10_000))
                     if lo <= keyspace.slot(k) <= hi and keyspace.slot(k) != keyspace.slot("{alpha}"))
    other_node = next(k for k in (f"{{u{i}}}:x" for i in range(10_000)) if not lo <= keyspace.slot(k) <= hi)
    read = "return redis.call('GET', ARGV[1])"
    with owner.client() as r:
        assert r.eval(read, 1, "emq:{alpha}:pending", same_node) is None  # legacy: allowed
        with pytest.raises(redis.exceptions.ResponseError, match="same slot"):
            r.eval("#!lua\n" + read, 1, "emq:{alpha}:pending", same_node)
        with pytest.raises(redis.exceptions.ResponseError, match="non local"):
            r.eval(read, 1, "emq:{alpha}:pending", other_node)
        with pytest.raises(redis.exceptions.ResponseError, match="CROSSSLOT|same slot"):
            r.eval("return 1", 2, "emq:{alpha}:pending", same_node)
        assert r.eval("#!lua\n" + read, 1, "emq:{alpha}:pending", "emq:{alpha}:job:x") is None


def test_no_script_crosses_a_slot(cluster: ClusterProcess) -> None:
    """Every script, behind a shebang, through a tour that reaches every (op, outcome)
    cell, on queues of each primary: the cluster refuses nothing (no key outside the
    queue's slot, derived row keys included), and the model agrees at every step."""
    names = list(QUEUES)
    taken = {cluster.node_of("{" + n + "}").port for n in names}
    names.append(next(n for n in ("a*b?[c]\\", "é-ü", "x" * 128, "tour") if cluster.node_of("{" + n + "}").port not in taken))
    with emq_live.connect(cluster.url) as conn:
        conn.scripts = strict(conn.scripts)
        conn.scripts.load(conn.redis)
        backend = Backend("cluster", conn)
        for name in names:
            for key in conn.redis.scan_iter(match=keyspace.pattern(name)):
                conn.redis.delete(key)
            q = backend.queue(name)
            tour(q)
            assert q.cells == set(spec.cells())


def test_a_runs_queues_go_to_distinct_primaries(cluster: ClusterProcess) -> None:
    """OWN-2: on a cluster the run's suffix puts the machine's queues on distinct
    primaries, run after run (its names alone, ``alpha-SUFFIX`` and ``β*[x]-SUFFIX``,
    share one primary in nine runs of ten: CRC16 is linear, their slots lie close), so a
    script that reaches into another slot meets a node that refuses it; the user's
    ``--queue`` names stay as given."""
    for _ in range(30):
        with Claim(cluster.url, QUEUES, command="test", apart=QUEUES) as names:
            assert len({cluster.node_of("{" + names.server(q) + "}").port for q in QUEUES}) == len(QUEUES)
    with Claim(cluster.url, QUEUES, command="test", apart=QUEUES, given={q: "same" + q for q in QUEUES}) as names:
        assert [names.server(q) for q in QUEUES] == ["same" + q for q in QUEUES]


def test_emq_check_passes_on_the_cluster(cluster: ClusterProcess, capsys) -> None:
    # --wipe: the session's cluster is shared with tests that use the run's queue names
    assert cli.main(["check", "--url", cluster.url, "--seed", "5", "--wipe"]) == cli.EXIT_OK
    out = capsys.readouterr().out
    (listed,) = re.findall(r"^  queues on the server: (.*)$", out, re.M)
    sent = re.findall(r" as '([^']*)'", listed)
    assert len({cluster.node_of("{" + name + "}").port for name in sent}) == len(QUEUES), sent
    cells = len(spec.cells()) + len(LANE_CELLS)  # the cluster runs lanes too
    assert "CONFORMS" in out and "cluster" in out and f"cells {cells}/{cells}" in out


def wait_for_announced(cluster: ClusterProcess, port: int, present: bool, timeout: float = 30.0) -> None:
    """Poll until every node's slot map does (or does not) name ``port`` (gossip)."""
    deadline = time.monotonic() + timeout
    while True:
        maps = []
        for node in cluster.nodes:
            with node.client() as r:
                maps.append({p for _, _, p in _slot_map(r)})
        if all((port in m) == present for m in maps):
            return
        assert time.monotonic() < deadline, f"the cluster did not gossip port {port}: {maps}"
        time.sleep(0.05)


def test_a_lost_reply_is_not_resent_in_cluster_mode(cluster: ClusterProcess) -> None:
    """ALO-1 through ``RedisCluster``: one primary announces a ``CutProxy`` in front of
    it, the reply of a claim is lost, and the client raises instead of claiming again
    (redis-py's cluster client with its default retries does claim again)."""
    node = cluster.node_of("{alo}")
    with CutProxy(node.port) as proxy:
        with node.client() as r:
            r.config_set("cluster-announce-port", proxy.port)
        try:
            wait_for_announced(cluster, proxy.port, True)
            with emq_live.connect(cluster.url) as conn:
                q = conn.queue("alo")
                for n in (1, 2, 3):
                    q.remove(J(n))
                    q.enqueue(J(n), b"%d" % n)
                proxy.arm()
                with pytest.raises(redis.exceptions.ConnectionError):
                    q.claim(60_000)
                assert proxy.cuts == 1
                assert q.counts() == {"pending": 2, "active": 1, "schedule": 0, "dead": 0}  # ALO-4
                resending = redis.cluster.RedisCluster(host="127.0.0.1", port=cluster.nodes[0].port, protocol=2)
                with Connection(resending, ScriptSet()) as other:
                    other.scripts.load(resending)
                    proxy.arm()
                    assert other.queue("alo").claim(60_000) == Claimed(J(3), b"3", 1)  # resent, silently
                assert proxy.cuts == 2
                assert q.counts() == {"pending": 0, "active": 3, "schedule": 0, "dead": 0}
        finally:
            with node.client() as r:
                r.config_set("cluster-announce-port", 0)
            wait_for_announced(cluster, proxy.port, False)


def test_the_restricted_user_runs_on_the_cluster(cluster: ClusterProcess) -> None:
    """specs/acl.json's rules with the cluster extras, on every node (ACLs are per node);
    without either extra, redis-py's cluster client cannot start."""
    admins = [n.client() for n in cluster.nodes]
    url = f"redis+cluster://emq:{PASSWORD}@127.0.0.1:{cluster.nodes[0].port}"

    def make(rules: list[str]) -> None:
        for a in admins:
            a.execute_command("ACL", "SETUSER", "emq", "reset", "on", ">" + PASSWORD, *rules)
            a.acl_log_reset()

    try:
        with cluster.client() as c:
            c.set(keyspace.VERSION_KEY, spec.WIRE_VERSION, nx=True)
        make(acl.rules(cluster=True))
        workload(url, _AllPrimaries(admins))
        assert all(refused(a) == set() for a in admins)
        for extra in acl.spec()["cluster_commands"]:
            make([r for r in acl.rules(cluster=True) if r != "+" + extra])
            with pytest.raises(emq_live.ConnectError):  # the client's one line for any refused handshake
                emq_live.connect(url)
            assert any(("command", extra) in refused(a) for a in admins), extra
    finally:
        for a in admins:
            a.execute_command("ACL", "DELUSER", "emq")
            a.close()


class _AllPrimaries:
    """The administrator of ``workload`` for a cluster: SCRIPT FLUSH on every node."""

    def __init__(self, admins: list[Any]) -> None:
        self.admins = admins

    def script_flush(self) -> None:
        for a in self.admins:
            a.script_flush()

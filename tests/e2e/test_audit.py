"""``emq audit``: a read-only census of a live keyspace.

The oracle is the whole-snapshot check: on a corrupted queue, the violations the audit
finds a batch at a time are exactly ``invariants.check_invariants(queue.snapshot())``'s, at any
batch size. It runs as a user whose ACL (specs/acl.json ``audit``) allows only reads, on
one Valkey and on a 3-primary cluster with queues on several primaries.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from typing import Any

import pytest
import redis

import emq_live
from emq_kit import audit as audit_mod
from emq_kit import cli
from emq_kit.audit import AuditError, Progress, audit
from emq_kit.server import ClusterProcess
from emq_live import acl
from emq_model import errors, invariants, keyspace, spec
from tests.e2e.test_acl import PASSWORD, make_user, refused, url
from tests.livekit import J


def corrupt(r: Any, q: str) -> None:
    """A queue with live jobs and one of each kind of damage."""
    with emq_live.connect(_url_of(r)) as conn:
        queue = conn.queue(q)
        for n in (1, 2, 3):
            queue.enqueue(J(n), b"p%d" % n)
        queue.schedule(J(4), b"later", delay_ms=60_000)
        queue.claim(60_000)
    k = {kind: keyspace.queue_key(q, kind) for kind in keyspace.KINDS}
    row = keyspace.prefix(q) + "job:"
    r.zadd(k["pending"], {J(10): 0})  # member with no row
    r.hset(row + J(11), mapping={"state": "pending", "attempts": 0, "payload": "x"})  # row in no location
    r.zadd(k["dead"], {J(2): 0})  # in two locations
    r.zadd(k["pending"], {J(12): 5})
    r.hset(row + J(12), mapping={"state": "pending", "attempts": 0, "payload": "s"})  # bad score
    r.set(keyspace.prefix(q) + "junk", 1)  # stray key
    r.zadd(k["active"], {"not-an-id": 1})  # malformed member, no row
    r.zadd(k["pending"], {J(13): 0})
    r.hset(row + J(13), mapping={"state": "dead", "attempts": 0, "payload": "<b>&</b>"})  # wrong state
    r.set(row + J(14), "a string")  # a row key of another type
    r.zadd(k["schedule"], {J(14): 1})
    r.zadd(k["pending"], {b"\xff\xfe": 0})  # not UTF-8
    r.hset(k["metrics:completed"], mapping={"count": 3, "extra": 1})  # counter outside the grammar
    r.set(k["metrics:failed"], "7")  # counter of another type
    with emq_live.connect(_url_of(r)) as conn:  # lanes: sound ones, then their damage
        queue = conn.queue(q)
        for n, g in ((20, "g1"), (21, "g1"), (22, "g2"), (23, "g3")):
            queue.lane_enqueue(J(n), b"l", g)
        queue.lane_pause("g3")
        queue.lane_claim(60_000)
    lane = keyspace.lane_keys(q)
    r.zadd(keyspace.lane_key(q, "g2"), {J(24): 0})
    r.hset(row + J(24), mapping={"state": "pending", "attempts": 0, "payload": "x", "group": "g1"})  # another group
    r.zadd(keyspace.lane_key(q, "g4"), {J(25): 0})
    r.hset(row + J(25), mapping={"state": "pending", "attempts": 0, "payload": "x", "group": "g4"})  # off the ring
    r.hincrby(lane["gactive"], "g2", 2)  # counts jobs that are not active
    r.set(keyspace.lane_key(q, "g5"), "a lane key of another type")


def _url_of(r: Any) -> str:
    kw = r.connection_pool.connection_kwargs
    return f"redis://127.0.0.1:{kw['port']}"


def oracle(target_url: str, q: str) -> Counter[tuple[str, str | None, str]]:
    with emq_live.connect(target_url) as conn:
        return Counter(tuple(v) for v in invariants.check_invariants(conn.queue(q).snapshot()))


def found(result: audit_mod.AuditResult, q: str) -> Counter[tuple[str, str | None, str]]:
    return Counter(tuple(v) for name, v in result.violations if name == q)


@pytest.mark.parametrize("batch", [1, 2, 1000])
def test_the_audit_finds_exactly_what_the_whole_snapshot_check_finds(server, admin, batch: int) -> None:
    corrupt(admin, "au")
    make_user(admin, "auditor", acl.rules(audit=True))
    result = audit(url(server, "auditor"), ["au"], batch=batch)
    want = oracle(server.url, "au")
    assert {v[0] for v in want} == {"INV-1", "INV-2", "INV-3", "INV-4", "INV-6", "INV-9", "INV-10", "INV-11"}
    assert found(result, "au") == want and result.total == sum(want.values())
    assert refused(admin) == set()
    (q,) = result.queues
    with emq_live.connect(server.url) as conn:
        snap = conn.queue("au").snapshot()
    assert q.counts == {loc: len(snap.location(loc)) for loc in spec.LOCATIONS}
    assert q.rows == len(snap.rows) and q.stray == len(snap.stray)
    assert q.lanes == sum(len(e) for _, e in snap.lanes)
    assert (q.completed, q.failed) == (snap.completed, snap.failed)
    assert sum(q.by_invariant.values()) == result.total and not result.clean


def test_a_sound_keyspace_is_clean_and_its_counts_are_the_clients(server, admin) -> None:
    with emq_live.connect(server.url) as conn:
        queue = conn.queue("ok")
        queue.enqueue_many([(J(n), b"x") for n in range(1, 40)])
        for _ in range(5):
            c = queue.claim(60_000)
        queue.complete(c.id, c.token)
        for n in range(40, 60):  # lanes in every state a sound queue has them (lifecycle.md §10)
            queue.lane_enqueue(J(n), b"l", f"g{n % 4}")
        queue.lane_pause("g3")
        queue.lane_limit("g1", 1)
        queue.lane_weight("g2", 3)
        for _ in range(3):
            queue.lane_wclaim(60_000)
        counts = queue.counts()
        lanes = sum(len(e) for _, e in queue.snapshot().lanes)
    make_user(admin, "auditor", acl.rules(audit=True))
    result = audit(url(server, "auditor"), batch=7)
    assert result.violations == [] and result.clean and result.fence == spec.WIRE_VERSION
    (q,) = result.queues
    assert q.queue == "ok" and q.counts == counts and q.completed == 1 and q.rows == 58 and q.lanes == lanes > 0


def lane_program(url: str, q: str, rnd: random.Random, steps: int) -> None:
    """A random program of lane and plain ops on ``q`` (every call a sound one)."""
    held: list[Any] = []
    with emq_live.connect(url) as conn:
        queue = conn.queue(q)
        for n in range(1, steps + 1):
            op, g = rnd.randrange(10), f"g{rnd.randrange(5)}"
            if op < 2:
                queue.enqueue(J(n), b"x")
            elif op < 5:
                queue.lane_enqueue(J(n), b"x", g)
            elif op == 5:
                held.extend(c for c in (queue.lane_claim(60_000), queue.claim(60_000)) if c is not None)
            elif op == 6:
                held.extend(queue.lane_wclaim(60_000))
            elif op == 7 and held:
                c = held.pop(rnd.randrange(len(held)))
                queue.complete(c.id, c.token) if rnd.random() < 0.7 else queue.retry(c.id, c.token, delay_ms=0,
                                                                                       max_attempts=1, error="e")
            elif op == 8:
                queue.lane_pause(g) if rnd.random() < 0.5 else queue.lane_resume(g)
            else:
                queue.lane_limit(g, rnd.randrange(4)) if rnd.random() < 0.5 else queue.lane_weight(g, rnd.randrange(1, 4))


def damage(r: Any, q: str, rnd: random.Random, times: int) -> None:
    """An operator's hand on ``q``'s lanes: keys deleted, members added to lanes, rows'
    groups rewritten, ``gactive`` moved, groups pushed on the ring."""
    keys, row = sorted(r.keys(keyspace.pattern(q))), keyspace.prefix(q) + "job:"
    lane = keyspace.lane_keys(q)
    for _ in range(times):
        g, job = f"g{rnd.randrange(6)}", J(rnd.randrange(1, 200))
        [lambda: r.delete(rnd.choice(keys)),
         lambda: r.zadd(keyspace.lane_key(q, g), {job: 0}),
         lambda: r.hset(row + job, "group", g),
         lambda: r.hincrby(lane["gactive"], g, rnd.choice((-1, 1))),
         lambda: r.rpush(lane["ring"], g)][rnd.randrange(5)]()


@pytest.mark.parametrize("seed", range(3))
def test_lanes_sound_or_damaged_audit_as_the_whole_check_finds(server, admin, seed: int) -> None:
    """Random lane programs (pauses, limits, weights, grouped and plain claims): the audit
    finds exactly the whole check's violations, none while sound, at any batch size; then
    the same after an operator's random damage to the lanes (INV-9..11)."""
    rnd = random.Random(seed)
    lane_program(server.url, "ln", rnd, 300)
    for hurt in (0, 12):
        damage(admin, "ln", rnd, hurt)
        want = oracle(server.url, "ln")
        lane_rules = {v[0] for v in want} & {"INV-9", "INV-10", "INV-11"}
        assert (lane_rules != set()) if hurt else (want == Counter()), want
        for batch in (1, 7, 1000):
            result = audit(server.url, ["ln"], batch=batch)
            assert found(result, "ln") == want and result.total == sum(want.values()), (hurt, batch)


def test_without_queues_it_finds_every_queue_by_the_key_grammar(server, admin) -> None:
    names = ["a*b", "x[1]", "plain", "ü"]
    with emq_live.connect(server.url) as conn:
        for n, q in enumerate(names, 1):
            conn.queue(q).enqueue(J(n), b"x")
    admin.set("other-app:key", 1)
    admin.set("emq:{}:odd", 1)  # no queue may be named "": nobody's key
    make_user(admin, "auditor", acl.rules(audit=True))
    seen: list[Progress] = []
    result = audit(url(server, "auditor"), batch=1, progress=seen.append)
    assert [q.queue for q in result.queues] == sorted(names) and result.clean
    assert all(q.counts["pending"] == 1 for q in result.queues)
    assert {p.stage for p in seen} >= {"discover", "pending", "keys"}
    walks = [p for p in seen if p.stage == "pending"]
    assert all(p.total == 1 and p.done == 1 for p in walks) and len(walks) == len(names)


def test_progress_comes_a_batch_at_a_time(server, admin) -> None:
    with emq_live.connect(server.url) as conn:
        conn.queue("big").enqueue_many([(J(n), b"x") for n in range(1, 501)])
    seen: list[Progress] = []
    audit(server.url, ["big"], batch=50, progress=seen.append)
    done = [p.done for p in seen if p.stage == "pending"]
    # ZSCAN's COUNT is a hint; our pages are cut at exactly `batch`
    assert done == list(range(50, 501, 50)) and all(p.total == 500 for p in seen if p.stage == "pending")


def test_the_auditor_cannot_write(server, admin) -> None:
    make_user(admin, "auditor", acl.rules(audit=True))
    with redis.Redis.from_url(url(server, "auditor")) as r:
        assert r.zcard(keyspace.queue_key("q", "pending")) == 0
        for call in (lambda: r.zadd(keyspace.queue_key("q", "pending"), {J(1): 0}),
                     lambda: r.hset(keyspace.prefix("q") + "job:" + J(1), "state", "pending"),
                     lambda: r.delete(keyspace.queue_key("q", "dead")),
                     lambda: r.set(keyspace.VERSION_KEY, "2"),
                     lambda: r.evalsha("0" * 40, 0)):
            with pytest.raises(redis.exceptions.NoPermissionError):
                call()


@pytest.mark.parametrize("command", list(acl.spec()["audit"]["commands"]))
def test_every_command_of_the_auditor_is_needed(server, admin, command: str) -> None:
    corrupt(admin, "au")
    make_user(admin, "lesser", [r for r in acl.rules(audit=True) if r != "+" + command])
    with pytest.raises(AuditError):
        audit(url(server, "lesser"), batch=3)
    assert ("command", command) in refused(admin)


def test_bad_arguments_are_refused_before_any_io() -> None:
    for kw in ({"queues": ["a{b}"]}, {"batch": 0}, {"keep": -1}, {"batch": True}):
        with pytest.raises(errors.ArgError):
            audit("redis://127.0.0.1:1", **kw)


def test_the_command_exits_0_clean_1_violations_2_environment(server, admin, capsys) -> None:
    with emq_live.connect(server.url) as conn:
        conn.queue("ok").enqueue(J(1), b"x")
    assert cli.main(["audit", server.url, "--quiet"]) == cli.EXIT_OK
    corrupt(admin, "au")
    assert cli.main(["audit", server.url, "--queue", "au", "--quiet"]) == cli.EXIT_FAIL
    out = capsys.readouterr().out
    assert f"au: INV-2 {J(10)}: is in pending but has no row" in out
    assert "1 queue(s), " in out
    assert cli.main(["audit", "--url", server.url, "--queue", "au", "--quiet"]) == cli.EXIT_FAIL  # as every command
    again = capsys.readouterr().out
    assert again.startswith("au: ") and out.endswith(again)
    for twice in (["audit", "--quiet"], ["audit", server.url, "--url", server.url]):  # the URL once, and given
        assert cli.main(twice) == cli.EXIT_ENV
        assert "give the deployment once: --url URL" in capsys.readouterr().err
    admin.set(keyspace.VERSION_KEY, "999")
    assert cli.main(["audit", server.url, "--quiet"]) == cli.EXIT_ENV
    assert "wire version" in capsys.readouterr().err
    make_user(admin, "nobody", [])
    assert cli.main(["audit", url(server, "nobody"), "--quiet"]) == cli.EXIT_ENV
    err = capsys.readouterr().err
    assert PASSWORD not in err


def test_an_audit_that_read_no_key_is_inconclusive_never_clean(server, admin, capsys) -> None:
    """A queue named that holds no key (a mistyped name) or a deployment with no queue:
    nothing was judged, so ``INCONCLUSIVE (empty)``, exit 0, the queue said to hold no
    key; beside a queue that holds keys the audit is clean, the empty one said so."""
    from emq_kit.report.document import validate

    code = cli.main(["audit", server.url, "--queue", "nonexist", "--quiet", "--json"])
    doc = json.loads(capsys.readouterr().out)
    validate(doc)
    assert code == cli.EXIT_OK and (doc["verdict"], doc["detail"]) == ("inconclusive", "empty")
    assert cli.main(["audit", server.url, "--quiet"]) == cli.EXIT_OK
    out = capsys.readouterr().out
    assert "emq audit: INCONCLUSIVE (empty)  0 queue(s)" in out, out
    assert cli.main(["audit", server.url, "--layout", "bullmq"]) == cli.EXIT_OK  # its one queue: absent
    assert "emq audit: INCONCLUSIVE (empty)  bullmq layout" in capsys.readouterr().out
    with emq_live.connect(server.url) as conn:
        conn.queue("ok").enqueue(J(1), b"x")
    assert cli.main(["audit", server.url, "--queue", "ok", "--queue", "nonexist", "--quiet"]) == cli.EXIT_OK
    out = capsys.readouterr().out
    assert "emq audit: CONFORMS (clean)" in out and "nonexist: " in out and "(holds no key: nothing judged)" in out
    assert "ok: " in out and out.count("holds no key") == 1, out


def test_a_cluster_with_queues_on_several_primaries(cluster: ClusterProcess) -> None:
    names = ["c0", "c1", "c2", "c3", "c4", "c5"]
    owners = {q: cluster.node_of("{" + q + "}").port for q in names}
    assert len(set(owners.values())) == 3, owners
    for node in cluster.nodes:
        with node.client() as r:
            make_user(r, "auditor", acl.rules(audit=True, cluster=True))
    with cluster.client() as rc:
        for q in names:
            for key in rc.scan_iter(match=keyspace.pattern(q)):
                rc.delete(key)
    with emq_live.connect(cluster.url) as conn:
        for n, q in enumerate(names, 1):
            conn.queue(q).enqueue_many([(J(100 * n + i), b"x") for i in range(20)])
    bad = [q for q in names if owners[q] != owners["c0"]][:2] + ["c0"]
    for q in bad:
        with cluster.node_of("{" + q + "}").client() as r:
            r.zadd(keyspace.queue_key(q, "dead"), {J(1): 0})
    user_url = cluster.url.replace("://", f"://auditor:{PASSWORD}@")
    result = audit(user_url, batch=6)
    assert [q.queue for q in result.queues if q.queue in names] == names
    assert {(q, v.invariant, v.id) for q, v in result.violations} == {(q, "INV-2", J(1)) for q in bad}
    assert all(q.counts["pending"] == 20 for q in result.queues if q.queue in names)
    for node in cluster.nodes:
        with node.client() as r:
            seen = {(e["reason"], e["object"]) for e in r.acl_log()} - {("command", "client|setinfo")}
            assert seen == set(), (node.port, seen)


def test_the_docs_give_the_auditors_acl_line() -> None:
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "commands.md").read_text("utf-8")
    assert acl.setuser("emq-audit", audit=True) in doc

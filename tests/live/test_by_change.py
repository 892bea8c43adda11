"""A snapshot read by what a step wrote (specs/lifecycle.md DEPTH-3, DEPTH-4) on a real
Valkey: it equals the whole read after every step of random programs on a deep queue,
operator faults included; the read changes no server setting and leaves nothing behind;
a user whose ACL refuses key tracking is read whole, said once."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import pytest
import redis

from emq_kit.check import faults
from emq_kit.check.clock import ServerClock
from emq_kit.check.focus import Focus
from emq_kit.check.live import LiveTarget, named
from emq_kit.check.pools import POOL, QUEUES, background
from emq_kit.check.profiles import PROFILES
from emq_kit.check.run import run_check
from emq_kit.check.target import open_target
from emq_kit.selftest.mutation import Mutant, all_mutants, copy_scripts
from emq_live import acl
from emq_live.delta import Kept, read_change, sort_keys
from emq_live.tracking import Tracker
from emq_model import change, keyspace, spec
from emq_model.errors import EmqError
from tests.e2e.test_acl import PASSWORD, make_user
from tests.livekit import edited_scripts, flush_url

GROUPS = ("a", "b")


def random_call(rng: random.Random, claims: list[tuple[str, int]]) -> tuple[str, dict[str, Any]]:
    """One op with arguments drawn from a small pool (duplicates, stale tokens, late
    completes and lane traffic are common), at a virtual clock of its own."""
    job, now = rng.choice(POOL), rng.randrange(0, 10_000)
    token = rng.choice(claims) if claims and rng.random() < 0.8 else (job, rng.randrange(1, 4))
    return rng.choice([
        ("enqueue", {"id": job, "payload": b"p"}),
        ("schedule", {"id": job, "payload": b"s", "delay_ms": rng.randrange(0, 5_000), "now": now}),
        ("claim", {"lease_ms": rng.randrange(1, 5_000), "now": now}),
        ("claim_many", {"n": rng.randrange(1, 4), "lease_ms": 1_000, "now": now}),
        ("complete", {"id": token[0], "token": token[1]}),
        ("retry", {"id": token[0], "token": token[1], "delay_ms": 10, "max_attempts": 2, "error": "e", "now": now}),
        ("extend", {"id": token[0], "token": token[1], "lease_ms": 100, "now": now}),
        ("promote", {"now": now, "limit": 5}),
        ("reap", {"now": now, "limit": 5}),
        ("remove", {"id": job}),
        ("reprocess", {"id": job}),
        ("enqueue_many", {"jobs": [(j, b"m") for j in rng.sample(POOL, 3)]}),
        ("complete_many", {"jobs": [token]}),
        ("lane_enqueue", {"id": job, "payload": b"l", "group": rng.choice(GROUPS)}),
        ("lane_claim", {"lease_ms": 1_000, "now": now}),
        ("lane_wclaim", {"lease_ms": 1_000, "now": now}),
        ("lane_pause", {"group": rng.choice(GROUPS)}),
        ("lane_resume", {"group": rng.choice(GROUPS)}),
        ("lane_weight", {"group": rng.choice(GROUPS), "w": rng.randrange(1, 3)}),
    ])


def run(target: LiveTarget, name: str, op: str, args: dict[str, Any], claims: list[tuple[str, int]]) -> Any:
    """``op`` on the target; its answer (None when refused), its claims kept."""
    try:
        answer = target.call(name, op, args)
    except (EmqError, redis.exceptions.ResponseError):  # a refusal, or a wrong script's error
        return None
    for got in answer if isinstance(answer, list) else [answer]:
        if hasattr(got, "token"):
            claims.append((got.id, got.token))
    return answer


def operator(target: LiveTarget, name: str, rng: random.Random) -> Callable[[], None]:
    """An operator's fault (FLT-3..5), and how it is undone: a key of each kind spoiled
    with another type and mended (a location, a row, a lane, a counter, the ring, a lane
    hash), a key outside the grammar written and dropped (each of the faults' tempting
    names), a row deleted. The reads in between are by change too (DEPTH-3)."""
    job, group = rng.choice(POOL), rng.choice(GROUPS)
    key = rng.choice([("pending", {}), ("active", {}), ("row", {"id": job}), ("lane", {"group": group}),
                      ("completed", {}), ("ring", {}), ("gactive", {})])
    kind = rng.choice(faults.wrong_kinds(key[0]))
    stray = rng.choice(faults.STRAY_KEYS)
    return rng.choice([
        lambda: (target.spoil_key(name, key[0], kind, **key[1]), lambda: target.mend_key(name, key[0], **key[1]))[1],
        lambda: (target.stray_key(name, stray, rng.choice(faults.KINDS)), lambda: target.drop_key(name, stray))[1],
        lambda: (target.forget_row(name, job), lambda: None)[1],
    ])()


def program(target: LiveTarget, rng: random.Random, steps: int, deep: int, share: float = 0.05) -> Counter[str]:
    """``steps`` random calls and operator faults (a ``share`` of the steps, each undone
    later) on both queues, ``deep`` background jobs in each first: after every step, each
    queue's snapshot read by change is the whole one. How many faults and undos there
    were, and how many of them were read by change (``last_change``)."""
    claims: list[tuple[str, int]] = []
    undo: list[tuple[str, Callable[[], None]]] = []
    faulted: Counter[str] = Counter()
    for name in QUEUES:
        run(target, name, "enqueue_many", {"jobs": [(j, b"") for j in background(deep)]}, claims)
        target.snapshot(name)
    for _ in range(steps):
        name, fault = rng.choice(QUEUES), True
        if undo and rng.random() < 0.5:
            name, undone = undo.pop()
            undone()
        elif rng.random() < share:
            undo.append((name, operator(target, name, rng)))
        else:
            run(target, name, *random_call(rng, claims), claims)
            fault = False
        for queue in QUEUES:
            assert target.snapshot(queue) == target.queue(queue).snapshot()
        if fault:
            faulted["faults"] += 1
            faulted["by change"] += target.last_change(name) is not None
    return faulted


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_read_by_change_equals_the_whole_read_after_every_step(valkey: Any, seed: int) -> None:
    """Random programs of a deep run (300 background jobs a queue), operator faults
    included: every fault and undo is read by change, a spoiled or stray key among them,
    and most reads are (else this proves nothing)."""
    target = LiveTarget(flush_url(valkey))
    try:
        assert target.read_changes(True)
        faulted = program(target, random.Random(seed), 150, 300, share=0.15)
        assert faulted["faults"] >= 10 and faulted["by change"] == faulted["faults"], faulted
        assert target.reads["change"] > 20 * target.reads["whole"], target.reads
    finally:
        target.close()


WRITES = ("ZADD", "ZREM", "HSET", "HINCRBY", "DEL", "HDEL")
MANY_KEYS = ("claim", "promote", "reap", "retry", "complete", "lane_claim", "lib")


def writing_mutants() -> list[Mutant]:
    """Every fifth selftest mutant of a write in the scripts that move jobs between many
    keys (a member left behind, misrouted, a row or counter not written...)."""
    return [m for m in all_mutants() if m.script in MANY_KEYS and any(w in m.before for w in WRITES)][::5]


@pytest.mark.parametrize("mutant", writing_mutants(), ids=lambda m: m.key)
def test_a_read_by_change_equals_the_whole_read_under_a_mutant(valkey: Any, mutant: Mutant,
                                                               tmp_path: Path) -> None:
    """What a wrong script writes is read by change as exactly as what ours writes: a
    member moved without its row, a member left in two places, a counter not counted."""
    scripts = copy_scripts(tmp_path, mutant.script, mutant.apply)
    target = LiveTarget(flush_url(valkey), str(scripts))
    try:
        assert target.read_changes(True)
        program(target, random.Random(7), 80, 50)
    finally:
        target.close()


# A claim that also renames the highest pending member once pending is deep: no row
# written, no cardinality changed, no candidate named; only a whole read sees it.
CLAIM_LOOP = "for _, id in ipairs(dropped) do"
SWAP = ('local last = redis.call("ZRANGE", k.pending, -1, -1, "WITHSCORES")\n'
        'if #last == 2 and redis.call("ZCARD", k.pending) > 40 then\n'
        '  redis.call("ZREM", k.pending, last[1])\n'
        '  redis.call("ZADD", k.pending, last[2], last[1] .. "x")\n'
        'end\n' + CLAIM_LOOP)


@pytest.fixture(scope="module")
def swapping(tmp_path_factory: pytest.TempPathFactory) -> str:
    return edited_scripts(tmp_path_factory.mktemp("swap"), "claim", CLAIM_LOOP, SWAP)


def test_a_swapped_member_escapes_a_read_by_change_and_not_the_read_at_the_end(valkey: Any, swapping: str) -> None:
    """DEPTH-4: a read by change cannot see a member swapped for one no candidate names
    (every cardinality kept); ``read_whole`` reads it whole, which does."""
    target = LiveTarget(flush_url(valkey), swapping)
    name = QUEUES[0]
    try:
        assert target.read_changes(True)
        target.call(name, "enqueue_many", {"jobs": [(j, b"") for j in background(50)]})
        before = target.snapshot(name)
        target.call(name, "claim", {"lease_ms": 1_000, "now": 1})
        seen, whole = target.snapshot(name), target.queue(name).snapshot()
        assert seen != whole and len(seen.pending) == len(whole.pending) == len(before.pending) - 1
        assert whole.pending[-1][0] == before.pending[-1][0] + "x"
        assert target.read_whole(name) and target.snapshot(name) == whole
    finally:
        target.close()



@pytest.mark.parametrize("other", [False, True])
def test_a_deep_location_spoiled_and_mended_is_read_at_once(valkey: Any, other: bool) -> None:
    """DEPTH-3: a spoiled location reads as empty and a mended one as what it held, each
    named whole (INC-1), the mend known by its ``DUMP``, so neither names its 300
    members; a member another client wrote after the mend (``other``) makes that ``DUMP``
    another, and the location is read whole, that member included."""
    url = flush_url(valkey)
    target = LiveTarget(url)
    name = QUEUES[0]
    try:
        assert target.read_changes(True)
        target.call(name, "enqueue_many", {"jobs": [(j, b"") for j in background(300)]})
        held = target.snapshot(name).pending
        target.spoil_key(name, "pending", "string")
        assert target.snapshot(name) == target.queue(name).snapshot()
        was, spoiled, _ = target.last_change(name)
        assert spoiled.whole == {"pending": ()} and not spoiled.members
        target.mend_key(name, "pending")
        if other:
            with redis.Redis.from_url(url) as r:
                r.zadd(keyspace.queue_keys(name)[0], {POOL[0]: 0})
        whole, reads = target.queue(name).snapshot(), Counter(target.reads)
        assert target.snapshot(name) == whole
        if other:
            assert target.reads["whole"] == reads["whole"] + 1 and POOL[0] in dict(whole.pending)
        else:
            mended = target.last_change(name)[1]
            assert mended.whole["pending"] is held and not mended.members
    finally:
        target.close()


def test_a_location_written_after_its_last_read_is_not_taken_from_that_read_at_its_mend(valkey: Any) -> None:
    """A spoil that follows calls not read yet (a ``LiveTarget`` used by hand) keeps no
    entries for the mend: the last read's would be stale, and a claim and an enqueue keep
    the cardinality the mend's read checks."""
    target = LiveTarget(flush_url(valkey))
    name = QUEUES[0]
    try:
        assert target.read_changes(True)
        target.call(name, "enqueue_many", {"jobs": [(j, b"") for j in background(300)]})
        target.snapshot(name)
        target.call(name, "claim", {"lease_ms": 1_000, "now": 1})
        target.call(name, "enqueue", {"id": POOL[0], "payload": b"p"})
        target.spoil_key(name, "pending", "string")
        target.snapshot(name)
        target.mend_key(name, "pending")
        assert target.snapshot(name) == target.queue(name).snapshot()
    finally:
        target.close()


@pytest.mark.parametrize("seed", [4, 5])
def test_the_change_read_is_the_reference_change(valkey: Any, seed: int) -> None:
    """INC-3 for the server's producer: the ``Change`` read by the keys a step wrote
    replays (``emq_model.change.apply``) to the whole snapshot after it, and agrees
    (INC-4) with the exact change between the two whole snapshots; where ``Kept`` finds
    no doubt, its patch is that snapshot too."""
    rng, claims = random.Random(seed), []
    url = flush_url(valkey)
    target = LiveTarget(url)
    name = QUEUES[0]
    tracker = Tracker(target.conn.redis)
    try:
        tracker.watch(keyspace.prefix(name))
        queue = target.queue(name)
        target.call(name, "enqueue_many", {"jobs": [(j, b"") for j in background(200)]})
        before, exact = queue.snapshot(), 0
        tracker.touched()
        for _ in range(120):
            op, args = random_call(rng, claims)
            answer = run(target, name, op, args, claims)
            keys = sort_keys(name, tracker.touched() or ())
            assert keys is not None
            got = read_change(target.conn.redis, name, before, keys,
                              {*named(args), *named(answer), *queue.last_dropped})
            after = queue.snapshot()
            assert got is not None
            if change.apply(before, got) == after:
                exact += 1
                assert change.agree(before, change.between(before, after), got)
                assert Kept(before).apply(got) == after
            else:  # a member moved that no candidate named: the cardinality says so
                assert Kept(before).apply(got) is None
            before = after
        assert exact > 100
    finally:
        tracker.close()
        target.close()


def test_tracking_changes_no_server_setting_and_ends_with_the_run(valkey: Any) -> None:
    """DEPTH-3: no CONFIG is touched (``notify-keyspace-events`` as it was), and once the
    target is closed no tracking client is left on the server, however the run ended:
    the server ends tracking with the kit's connection."""
    url = flush_url(valkey)
    admin = redis.Redis.from_url(url)
    setting = admin.config_get("notify-keyspace-events")
    target = LiveTarget(url)
    assert target.read_changes(True)
    target.call(QUEUES[0], "enqueue", {"id": POOL[0], "payload": b"x"})
    assert [c for c in admin.client_list() if "t" in c["flags"]]  # tracking while the run is on
    assert admin.config_get("notify-keyspace-events") == setting
    target.close()
    assert not [c for c in admin.client_list() if "t" in c["flags"]]
    assert admin.config_get("notify-keyspace-events") == setting
    admin.close()


@pytest.fixture
def admin(valkey: Any) -> Any:
    """An administrator of ``valkey``'s database 0 (a restricted user may not SELECT),
    the fence written (the user may only read it); users it makes are deleted after."""
    r = redis.Redis.from_url(valkey.url)
    r.set(keyspace.VERSION_KEY, spec.WIRE_VERSION, nx=True)
    yield r
    r.execute_command("ACL", "DELUSER", "emq-by-change")
    r.close()


def as_user(valkey: Any, admin: Any, rules: list[str]) -> LiveTarget:
    make_user(admin, "emq-by-change", rules)
    return LiveTarget(f"redis://emq-by-change:{PASSWORD}@127.0.0.1:{valkey.port}")


def test_a_user_with_the_tracking_rules_reads_by_change(valkey: Any, admin: Any) -> None:
    """specs/acl.json's ``tracking`` rules are enough to read by change."""
    target = as_user(valkey, admin, acl.rules(tracking=True))
    try:
        assert target.read_changes(True) and not target.notes
        for job in POOL[:2]:
            target.call(QUEUES[0], "enqueue", {"id": job, "payload": b"x"})
            assert target.snapshot(QUEUES[0]) == target.queue(QUEUES[0]).snapshot()
        assert target.reads == {"whole": 1, "change": 1}
    finally:
        target.close()


@pytest.mark.parametrize("rule", [None, *acl.spec()["tracking"]["rules"]])
def test_a_user_without_a_tracking_rule_is_read_whole_said_once(valkey: Any, admin: Any, capsys: Any,
                                                                 rule: str | None) -> None:
    """specs/acl.json's least-privilege user (``None``), or one with the ``tracking``
    rules but one: every snapshot is read whole, said once on stderr and in ``notes``,
    and the run goes on."""
    rules = acl.rules() if rule is None else [r for r in acl.rules(tracking=True) if r != rule]
    target = as_user(valkey, admin, rules)
    try:
        target.read_changes(True)
        assert not target.read_changes(True)
        for name, job in zip(QUEUES, POOL):
            target.call(name, "enqueue", {"id": job, "payload": b"x"})
            assert target.snapshot(name).pending == ((job, 0),)
        assert len(target.notes) == 1 and "read whole" in target.notes[0]
        assert capsys.readouterr().err.count("read whole") == 1
        assert not target.reads  # read as before: no tracking at all
    finally:
        target.close()


def test_fakeredis_is_read_whole_said_once(capsys: Any) -> None:
    """A deep run on fakeredis reads from the server's memory, whole: said once however
    many examples ask."""
    target = LiveTarget(None)
    try:
        assert not any(target.read_changes(True) for _ in range(3))
        assert len(target.notes) == 1 and "fakeredis" in target.notes[0]
        assert capsys.readouterr().err.count("read whole") == 1
    finally:
        target.close()


@pytest.fixture(scope="module")
def corrupt_fill(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Enqueue (enqueue_many's too) with one job of a deep fill scored 1, not 0: the
    251st job a queue takes."""
    return edited_scripts(tmp_path_factory.mktemp("fill"), "enqueue", 'redis.call("ZADD", k.pending, "0", id)',
                          'redis.call("ZADD", k.pending, redis.call("ZCARD", k.pending) == 250 and "1" or "0", id)')


def test_a_fill_that_corrupts_one_job_is_caught_at_its_step_read_by_change_or_whole(valkey: Any,
                                                                                     corrupt_fill: str) -> None:
    """The fill's steps are checked as any other (DEPTH-1): one job of 500 scored wrong is
    the first fill step's INV-8 difference, read by change on Valkey (DEPTH-3: the
    scores of the step's candidates, one command a location) as read whole on fakeredis."""
    found = []
    for url in (flush_url(valkey), None):
        target = open_target(url, corrupt_fill)
        try:
            report = run_check(target, PROFILES["dev"], seed=2, examples=2, steps=5,
                               focus=Focus(report=False, depth=600))
        finally:
            target.close()
        assert report.divergence is not None and report.divergence.rule == "INV-8", report.divergence
        step = report.divergence.step
        assert step.op == "enqueue_many" and len(step.args["jobs"]) == 500
        found.append((step.index, step.queue))
    assert found[0] == found[1] == (1, QUEUES[0])


def test_a_raw_call_in_a_deep_run_is_read_whole_after_it(valkey: Any) -> None:
    """DEPTH-4: a raw call names no id a read by change could take as a candidate, so the
    read after it is whole. Seed 6 of this run sends, on the server's clock, an accepted
    ``extend`` past the client (its lease at the range's edge) that moves an active
    member's score and writes no row: read by change, the stale score was a difference
    the run reported and no replay showed."""
    target = open_target(flush_url(valkey))
    clock = ServerClock.over(target.conn.redis)
    try:
        report = run_check(target, PROFILES["dev"], seed=6, examples=20, steps=25, clock=clock,
                           focus=Focus(report=False, depth=30))
    finally:
        clock.close()
        target.close()
    assert report.verdict != "differs", report.divergence
    raw = sum(n for cell, n in report.hits.items() if cell.startswith("raw/"))
    assert raw and target.reads["change"] > target.reads["whole"], (raw, target.reads)

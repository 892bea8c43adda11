"""The BullMQ layout (specs/layouts/bullmq.md): the pure model on its own, then the model
against BullMQ's unmodified scripts on Valkey 8 and Redis 7, step by step (reply,
projection, invariants), by hand for each transition and by seeded random runs."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator

import fakeredis
import pytest

from emq_kit.claim import ONE_BYTE
from emq_live.layouts.bullmq import NO_CMSGPACK, QUEUE, BullTarget, LayoutUnavailable, bullmq_version
from emq_model.errors import ArgError
from emq_model.layouts.bullmq import (
    LOCATIONS,
    LOCK_MISMATCH,
    MISSING_JOB,
    MISSING_LOCK,
    NO_LOCK,
    NOT_IN_STATE,
    PRIORITY_LIMIT,
    BullModel,
    Projection,
    Retention,
    check_projection,
    diff,
    table,
)
from emq_model.layouts.bullmq_steps import OPS, Steps
from tests.hostile import HOSTILE
from tests.livekit import dump

DB = 12  # a database of its own on the session servers
# Random runs per server, 150 steps each; raise it for a longer hunt
# (benchmarks/bullmq-findings.md records one).
RUNS = int(os.environ.get("EMQ_BULLMQ_RUNS", "12"))
T0 = 1_000_000


# -- the model alone ------------------------------------------------------------


def test_add_places_by_kind() -> None:
    m = BullModel()
    assert m.add("", T0) == "1"
    assert m.add("", T0, delay=500) == "2"
    assert m.add("", T0, priority=3) == "3"
    assert m.add("", T0, lifo=True) == "4"
    p = m.projection()
    assert p.location("wait") == ("1", "4")  # LPUSH at the head, RPUSH (lifo) at the tail
    assert dict(p.zsets)["delayed"] == (("2", (T0 + 500) * 0x1000),)
    assert dict(p.zsets)["prioritized"] == (("3", 3 * 2**32 + 1),)
    assert p.counter == 4 and p.priority_counter == 1
    assert not check_projection(p)


def test_custom_id_duplicate_is_a_no_op_but_counts() -> None:
    m = BullModel()
    assert m.add("900001", T0) == "900001"
    assert m.add("900001", T0 + 5, delay=100) == "900001"
    p = m.projection()
    assert p.location("wait") == ("900001",) and p.hash("900001")["timestamp"] == str(T0)
    assert p.counter == 2


def test_delayed_same_millisecond_keeps_arrival_order() -> None:
    m = BullModel()
    for _ in range(3):
        m.add("", T0, delay=10)
    assert dict(m.projection().zsets)["delayed"] == tuple(
        (str(i + 1), (T0 + 10) * 0x1000 + i) for i in range(3)
    )


def test_take_order_wait_then_prioritized_then_due_delayed() -> None:
    m = BullModel()
    m.add("", T0, priority=2)  # 1
    m.add("", T0, priority=1)  # 2
    m.add("", T0)  # 3
    m.add("", T0, delay=100)  # 4
    assert m.take("a", T0) == ("3", 0)
    assert m.take("b", T0) == ("2", 0)  # lower priority value first
    assert m.take("c", T0) == ("1", 0)
    assert m.take("d", T0) == (None, T0 + 100)  # nothing ready: the next due time
    assert m.priority_counter == 0  # an empty prioritized resets the counter
    assert m.take("e", T0 + 100) == ("4", 0)  # due: promoted, then taken
    p = m.projection()
    assert p.location("active") == ("4", "1", "2", "3")
    assert dict(p.locks) == {"1": "c", "2": "b", "3": "a", "4": "e"}
    assert p.hash("4")["delay"] == "0" and p.hash("4")["ats"] == "1"
    assert not check_projection(p)


@pytest.mark.parametrize(("keep", "kept"), [(-1, ["1", "2", "3"]), (0, []), (2, ["2", "3"])])
def test_complete_under_retention(keep: int, kept: list[str]) -> None:
    m = BullModel(Retention(completed=keep))
    for _ in range(3):
        m.add("", T0)
    for i in range(3):
        jid, _ = m.take(f"t{i}", T0)
        assert m.complete(jid, f"t{i}", T0 + i, '"ok"') == 0
    p = m.projection()
    assert list(p.location("completed")) == kept
    assert sorted(jid for jid, _ in p.hashes) == kept
    for jid in kept:
        assert p.hash(jid)["finishedOn"] == str(T0 + int(jid) - 1) and p.hash(jid)["atm"] == "1"
    assert not check_projection(p)


def test_finish_fences_on_the_token() -> None:
    m = BullModel()
    m.add("", T0)
    m.take("a", T0)
    assert m.complete("1", "b", T0, "1") == LOCK_MISMATCH
    assert m.complete("7", "a", T0, "1") == MISSING_JOB
    m.lapse("1")
    assert m.fail("1", "a", T0, "x") == MISSING_LOCK
    assert m.projection().location("active") == ("1",)


def test_failed_attempt_routes() -> None:
    m = BullModel()
    m.add("", T0)
    m.add("", T0, priority=4)
    m.take("a", T0)
    m.take("b", T0)
    assert m.retry("1", "a", T0 + 1, "boom") == 0
    assert m.backoff("2", "b", T0 + 1, 200, "bang") == 0
    p = m.projection()
    assert p.location("wait") == ("1",) and p.hash("1")["atm"] == "1" and p.hash("1")["failedReason"] == "boom"
    assert dict(p.zsets)["delayed"] == (("2", (T0 + 201) * 0x1000),) and p.hash("2")["delay"] == "200"
    assert m.promote("2") == 0 and m.promote("2") == NOT_IN_STATE
    assert m.location("2") == "prioritized"  # a job keeps its priority through a backoff
    assert not check_projection(m.projection())


def test_stall_takes_two_checks_and_defers_failure_past_the_max() -> None:
    m = BullModel(max_stalled=1)
    m.add("", T0)
    m.take("a", T0)
    assert m.check_stalled(T0) == []  # the first check only makes candidates
    assert m.stalled == {"1"}
    assert m.extend("1", "a") == 1 and m.stalled == set()  # extending withdraws it
    m.check_stalled(T0)
    m.lapse("1")
    assert m.check_stalled(T0) == ["1"]
    assert m.location("1") == "wait" and "defa" not in m.hashes["1"]
    m.take("b", T0)
    m.check_stalled(T0)
    m.lapse("1")
    assert m.check_stalled(T0) == ["1"]
    assert m.hashes["1"]["stc"] == "2" and "defa" in m.hashes["1"]  # the worker must fail it
    m.take("c", T0)
    assert m.fail("1", "c", T0, "stalled") == 0
    assert "defa" not in m.hashes["1"] and m.location("1") == "failed"


def test_remove_refused_while_locked_and_reprocess() -> None:
    m = BullModel()
    m.add("", T0)
    m.take("a", T0)
    assert m.remove("1") == 0
    assert m.fail("1", "a", T0 + 1, "x") == 0
    assert m.reprocess("1", "completed") == NOT_IN_STATE
    assert m.reprocess("1", "failed") == 1
    h = m.hashes["1"]
    assert m.location("1") == "wait" and "finishedOn" not in h and "failedReason" not in h and h["atm"] == "1"
    assert m.remove("1") == 1 and m.location("1") is None and "1" not in m.hashes
    assert m.remove("1") == 1  # no job: still 1


def test_invariants_name_each_violation() -> None:
    p = Projection.build(
        {"wait": ["1", "1"], "active": ["2"]},
        {"completed": [("2", 5)]},
        [],
        {"3": "t"},
        {"1": {}, "4": {}},
        0,
        0,
    )
    found = " ".join(check_projection(p))
    for rule in ("BQ-INV-1", "BQ-INV-2", "BQ-INV-3", "BQ-INV-4"):
        assert rule in found


# -- BullMQ's scripts ---------------------------------------------------------


@pytest.fixture(params=["valkey", "redis_server"])
def target(request: pytest.FixtureRequest) -> Iterator[BullTarget]:
    server = request.getfixturevalue(request.param)
    client = server.client(db=DB)
    client.flushdb()
    yield BullTarget(client)
    client.flushdb()
    client.close()


class Pair:
    """The model and the scripts driven together; every step's reply and projection
    must agree and the scripts' projection must keep the invariants."""

    def __init__(self, target: BullTarget, retention: Retention = Retention(), name: str = QUEUE[1:-1]) -> None:
        self.model = BullModel(retention, max_stalled=target.max_stalled)
        self.target = BullTarget(target.client, retention, name=name)

    def __getattr__(self, op: str):
        def step(*args):
            want = getattr(self.model, op)(*args)
            got = getattr(self.target, op)(*args)
            seen = self.target.projection()
            assert got == want, f"{op}{args}: scripts replied {got!r}, model {want!r}"
            assert not diff(self.model.projection(), seen), diff(self.model.projection(), seen)
            assert not check_projection(seen), check_projection(seen)
            return got

        return step

    @property
    def seen(self) -> Projection:
        return self.target.projection()


GLOBBY = ("*", "?", "[", "]", "\\", "β*[x]", "a?")
"""Queue names holding the glob's special characters (KS-3 accepts each): a run's
one-byte name may be any printable byte, a user's name anything."""


@pytest.mark.parametrize("name", GLOBBY)
def test_wipe_deletes_its_queue_only(target: BullTarget, name: str) -> None:
    """OWN-1: ``wipe`` of a queue whose name holds ``*``, ``?``, ``[``... deletes that
    queue's keys and no other queue's (its SCAN glob is escaped)."""
    client = target.client
    others = [n for n in ("A", "ab", "a?b", *GLOBBY) if n != name]
    for n in others:
        client.rpush(f"emq:{{{n}}}:wait", "7")
        client.hset(f"emq:{{{n}}}:7", "data", "a user's")
    theirs = sorted(client.scan_iter(match="*"))
    mine = BullTarget(client, name=name)
    mine.add("", T0)
    assert mine.projection().location("wait") == ("1",)
    mine.wipe()
    assert sorted(client.scan_iter(match="*")) == theirs
    assert all(client.hget(f"emq:{{{n}}}:7", "data") == b"a user's" for n in others)


def test_the_scripts_agree_with_the_model_under_every_name_a_run_may_draw(target: BullTarget) -> None:
    """The bullmq layout's queue is one byte, so a run sends it as its one-byte name,
    drawn at random among ``ONE_BYTE`` (OWN-2); a user's ``--queue`` may be any name of
    tests/hostile.py. Under each, beside every other's keys, a random program (one seed)
    agrees step by step with the model, and ``wipe`` leaves every other key as it was."""
    client = target.client
    names = dict.fromkeys((*ONE_BYTE, *HOSTILE))
    for n in names:
        client.set(f"emq:{{{n}}}:kept", "a user's")
    for n in names:
        client.delete(f"emq:{{{n}}}:kept")
        theirs = dump(client)
        q = Pair(target, name=n)
        steps = Steps(random.Random(7))
        for _ in range(30):
            op, args = steps.draw(q.model)
            getattr(q, op)(*args)
        q.target.wipe()
        assert dump(client) == theirs, n


def test_version_is_the_pinned_one(target: BullTarget) -> None:
    assert target.version == bullmq_version() == table()["package"]["version"]


def test_each_transition_on_the_scripts(target: BullTarget) -> None:
    q = Pair(target)
    assert q.add("", T0) == "1"
    assert q.add("", T0, 500) == "2"
    assert q.add("", T0, 0, 3) == "3"
    assert q.add("900001", T0) == "900001"
    assert q.add("900001", T0) == "900001"
    assert q.take("a", T0) == ("1", 0)
    assert q.take("b", T0) == ("900001", 0)
    assert q.complete("1", "a", T0 + 1, '"done"') == 0
    assert q.seen.hash("1")["returnvalue"] == '"done"'
    assert q.complete("900001", "a", T0 + 1, "1") == LOCK_MISMATCH
    assert q.retry("900001", "b", T0 + 2, "boom") == 0
    assert q.take("c", T0 + 2) == ("900001", 0)
    assert q.backoff("900001", "c", T0 + 3, 100, "again") == 0
    assert q.promote("2") == 0
    assert q.promote("2") == NOT_IN_STATE
    assert q.take("d", T0 + 3) == ("2", 0)
    assert q.check_stalled(T0 + 4) == []
    assert q.extend("2", "d") == 1
    assert q.extend("2", "zz") == 0
    assert q.check_stalled(T0 + 5) == []
    assert q.lapse("2") == 1
    assert q.fail("2", "d", T0 + 6, "late") == MISSING_LOCK
    assert q.check_stalled(T0 + 6) == ["2"]
    # the stalled job went to the tail (next in line), ahead of the due backoff
    assert q.take("e", T0 + 104) == ("2", 0)
    assert q.take("f", T0 + 104) == ("900001", 0)
    assert q.fail("900001", "f", T0 + 104, "final") == 0
    assert q.reprocess("900001", "failed", True) == 1
    assert q.remove("3") == 1
    assert q.remove("2") == 0  # locked by "e"
    assert q.lapse("2") == 1
    assert q.remove("2") == 1
    seen = q.seen
    assert seen.location("wait") == ("900001",) and seen.location("completed") == ("1",)
    assert seen.hash("900001").get("atm") is None  # reset by reprocess
    assert seen.hash("3") is None and seen.hash("2") is None


def test_stall_past_the_max_on_the_scripts(target: BullTarget) -> None:
    q = Pair(target)
    q.add("", T0)
    for token in "ab":
        q.take(token, T0)
        q.check_stalled(T0)
        q.lapse("1")
        assert q.check_stalled(T0) == ["1"]
    assert q.seen.hash("1")["stc"] == "2" and "defa" in q.seen.hash("1")
    q.take("c", T0)
    assert q.fail("1", "c", T0, "job stalled more than allowable limit") == 0
    assert "defa" not in q.seen.hash("1")


@pytest.mark.parametrize("keep", [0, 2])
def test_retention_on_the_scripts(target: BullTarget, keep: int) -> None:
    q = Pair(target, Retention(completed=keep, failed=keep))
    for _ in range(6):
        q.add("", T0)
    for i in range(6):
        jid, _ = q.take(f"t{i}", T0 + i)
        (q.complete if i % 2 else q.fail)(jid, f"t{i}", T0 + i, "r")
    seen = q.seen
    # jobs 2, 4, 6 completed and 1, 3, 5 failed; keep 2 leaves the newest two of each
    assert seen.location("completed") == (() if keep == 0 else ("4", "6"))
    assert seen.location("failed") == (() if keep == 0 else ("3", "5"))
    assert sorted(jid for jid, _ in seen.hashes) == ([] if keep == 0 else ["3", "4", "5", "6"])


@pytest.mark.parametrize("seed", range(RUNS))
def test_random_runs_agree(target: BullTarget, seed: int) -> None:
    rng = random.Random(seed)
    keep = table()["run"]["keep"]
    q = Pair(target, Retention(rng.choice(keep["completed"]), rng.choice(keep["failed"])))
    steps = Steps(rng)
    for _ in range(150):
        op, args = steps.draw(q.model)
        getattr(q, op)(*args)


def test_integer_custom_id_meets_the_auto_id(target: BullTarget) -> None:
    """benchmarks/bullmq-findings.md F-1: an auto id equal to an existing integer custom
    id overwrites that job's hash and puts the id in wait twice; two workers then take
    the same id, the second overwrites the first one's lock, and the job ends in active
    and completed at once (Node's client refuses integer custom ids; the Python client
    3.4.4 does not). The model follows the scripts, so it predicts all of it."""
    model = BullModel()
    for side in (model, target):
        assert side.add("2", T0) == "2"
        assert side.add("", T0 + 1) == "2"
    seen = target.projection()
    assert not diff(model.projection(), seen)
    assert seen.location("wait") == ("2", "2")
    assert [v[:8] for v in check_projection(seen)] == ["BQ-INV-2", "BQ-INV-1"]
    for side in (model, target):
        assert side.take("a", T0 + 2) == side.take("b", T0 + 3) == ("2", 0)
        assert side.complete("2", "a", T0 + 4, "1") == LOCK_MISMATCH
        assert side.complete("2", "b", T0 + 4, "1") == 0
    seen = target.projection()
    assert not diff(model.projection(), seen)
    assert check_projection(seen) == ["BQ-INV-1 job 2 in ['active', 'completed']"]
    for side in (model, target):
        assert side.check_stalled(T0 + 5) == []
        assert side.check_stalled(T0 + 6) == ["2"]  # back to wait: it will run a third time
    seen = target.projection()
    assert not diff(model.projection(), seen)
    assert check_projection(seen) == ["BQ-INV-1 job 2 in ['wait', 'completed']"]


def test_fakeredis_is_one_typed_error() -> None:
    server = fakeredis.FakeServer()
    client = fakeredis.FakeRedis(server=server)
    with pytest.raises(LayoutUnavailable) as err:
        BullTarget(client)
    assert err.value.reason == NO_CMSGPACK and "\n" not in NO_CMSGPACK
    assert client.dbsize() == 0


def test_no_lock_token_on_a_locked_job_leaves_the_lock_behind(target: BullTarget) -> None:
    """benchmarks/bullmq-findings.md F-2: finishing with BullMQ's no-lock token "0"
    bypasses the holder's lock and leaves it on a finished job; the holder can still
    extend it, removal is refused, and the holder's own finish writes its reason into the
    finished job before it is refused."""
    model = BullModel()
    for side in (model, target):
        side.add("", T0)
        side.take("a", T0)
    assert target.complete("1", NO_LOCK, T0 + 1, "1") == model.complete("1", NO_LOCK, T0 + 1, "1") == 0
    seen = target.projection()
    assert not diff(model.projection(), seen)
    assert seen.location("completed") == ("1",) and dict(seen.locks) == {"1": "a"}
    assert check_projection(seen) == ["BQ-INV-4 lock on 1, which is not active"]
    assert target.extend("1", "a") == 1
    assert target.remove("1") == 0
    assert target.fail("1", "a", T0 + 2, "late") == model.fail("1", "a", T0 + 2, "late") == NOT_IN_STATE
    seen = target.projection()
    assert not diff(model.projection(), seen)
    assert seen.hash("1")["failedReason"] == "late" and seen.location("completed") == ("1",)


def test_refused_retry_still_promotes(target: BullTarget) -> None:
    q = Pair(target)
    q.add("", T0, 10)
    assert q.retry("7", "nobody", T0 + 10, "x") == MISSING_JOB
    assert q.seen.location("wait") == ("1",)


def test_no_lock_take_is_recovered_by_the_stalled_check(target: BullTarget) -> None:
    q = Pair(target)
    q.add("", T0)
    assert q.take(NO_LOCK, T0) == ("1", 0)
    assert q.seen.locks == ()
    assert q.check_stalled(T0) == []
    assert q.check_stalled(T0) == ["1"]


def test_stall_count_survives_reprocess(target: BullTarget) -> None:
    q = Pair(target)
    q.add("", T0)
    q.take("a", T0)
    q.check_stalled(T0)
    q.lapse("1")
    q.check_stalled(T0)
    q.take("b", T0)
    q.complete("1", "b", T0, "1")
    assert q.reprocess("1", "completed", True) == 1
    q.take("c", T0)
    q.check_stalled(T0)
    q.lapse("1")
    assert q.check_stalled(T0) == ["1"]
    assert q.seen.hash("1")["stc"] == "2" and "defa" in q.seen.hash("1")  # one stall in its new life


@pytest.mark.parametrize(
    ("op", "args"),
    [
        ("add", ("x1", T0)),
        ("add", ("", -1)),
        ("add", ("", T0, 0, PRIORITY_LIMIT + 1)),
        ("take", ("", T0)),
        ("complete", ("", "a", T0, "1")),
        ("backoff", ("1", "a", T0, -5, "r")),
        ("reprocess", ("1", "active", False)),
        ("lapse", (1,)),
    ],
)
def test_bad_arguments_are_refused_before_anything_is_sent(target: BullTarget, op: str, args: tuple) -> None:
    with pytest.raises(ArgError):
        getattr(target, op)(*args)
    assert target.client.dbsize() == 0


def test_table_names_shipped_scripts_with_their_key_counts() -> None:
    """Each script of the table is one the package lists, and its KEYS list is as long as
    the count BullMQ writes into the file name (moveToFinished-14: fourteen keys)."""
    from bullmq.redis_connection import SCRIPT_DEFINITIONS

    for name, entry in table()["scripts"].items():
        assert entry["file"] in SCRIPT_DEFINITIONS.values(), name
        assert len(entry["keys"]) == int(entry["file"].removesuffix(".lua").rsplit("-", 1)[1]), name
    assert set(OPS) == set(table()["ops"])
    for op in OPS:
        assert callable(getattr(BullModel, op)) and callable(getattr(BullTarget, op)), op
    assert list(LOCATIONS) == list(table()["locations"])

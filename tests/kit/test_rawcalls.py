"""Raw calls: the scripts' own checks, reached past the client.

- The oracle (``rawcalls.verdict``) refuses every spoil with the code of the one thing
  spoiled and accepts every edge, from the contract's tables.
- The sweep of every kind x op x variant finds nothing on our scripts, on fakeredis,
  Valkey 8 and Redis 7.
- Each one-check edit of lib.lua or batch.lua (``CHECK_EDITS``) in a copy of our scripts
  is found by the sweep, on fakeredis and on Valkey; the Hypothesis draws find one too.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

import emq_live
from emq_kit.check import raw as rawcalls
from emq_kit.check.raw import CHECK_EDITS, KINDS, OPS, CheckEdit, RawJudge, calls, variants, verdict
from emq_kit.selftest.mutation import CHECK_OPERATOR, check_mutants, copy_scripts
from emq_live.scripts import ScriptSet
from emq_model import errors, keyspace, spec
from emq_model.model import QueueModel
from tests.livekit import flush_url

SPOILS = ("id", "id-overflow", "queue", "keys-count", "foreign-key", "row-key", "decimal", "range", "argv-count",
          "empty-integer", "batch-size")
EDGES = ("edge-queue", "edge-id", "edge-range", "edge-batch", "server-clock")
IDS = ("id", "id-overflow")


def populated() -> QueueModel:
    """A model with a job in each location."""
    m = QueueModel(rawcalls.QUEUE)
    for n, job in enumerate(rawcalls.EDGE_IDS[:1] + tuple(variants._absent_ids(4)[1:])):
        m.enqueue(job, b"p")
    m.claim(10, now=rawcalls.NOW)
    m.claim(10, now=rawcalls.NOW)
    dead = sorted(m.sets["active"])[-1]
    m.retry(dead, 1, delay_ms=0, max_attempts=1, error=b"e", now=rawcalls.NOW)
    return m


def test_the_kinds_are_the_spoils_and_the_edges() -> None:
    assert set(KINDS) == set(SPOILS) | set(EDGES)


@pytest.mark.parametrize("kind", KINDS)
def test_the_oracle_refuses_each_spoil_with_its_code_and_accepts_each_edge(kind: str) -> None:
    """One thing spoiled at a time: an id spoil is EMQKIND, every other spoil EMQARG (CC-6),
    and every edge is a well-formed call."""
    model = populated()
    made = [c for op in OPS for c in calls(kind, op, model)]
    assert made, f"no op takes raw calls of kind {kind}"
    for call in made:
        if kind in EDGES:
            assert call.expected is None, str(call)
        else:
            assert call.expected == (errors.KIND if kind in IDS else errors.ARG), str(call)


def test_a_row_key_of_another_id_exists_for_the_edge_id() -> None:
    """An accepted edge call may leave the job with body 2^63-1 where the op looks for
    one; the spoil still names a valid other id (the one below) and the oracle refuses it."""
    m = QueueModel(rawcalls.QUEUE)
    m.enqueue(rawcalls.EDGE_IDS[1], b"p")
    for op in ("remove", "state"):
        [call] = calls("row-key", op, m)
        own = keyspace.job_key(rawcalls.QUEUE, rawcalls.EDGE_IDS[1]).encode()
        assert call.argv[0] == rawcalls.EDGE_IDS[1].encode() and call.keys[-1] not in (own, b"")
        assert call.expected == errors.ARG


def test_every_well_formed_call_is_what_the_client_sends() -> None:
    """The assembled base call of every op decodes to the model's arguments, and the
    client, given those, sends exactly the same KEYS and ARGV."""
    model = populated()
    conn = emq_live.connect()
    queue = conn.queue(rawcalls.QUEUE)
    for op in OPS:
        b = rawcalls.base(op, model)
        keys, argv = b.assemble()
        decoded = verdict(op, keys, argv)
        assert isinstance(decoded, rawcalls.Decoded) and decoded.queue == rawcalls.QUEUE, (op, decoded)
        if op in ("counts", "state"):
            continue
        if "jobs" in decoded.args:
            built = queue._items(op, decoded.args["jobs"])
        else:
            builder = getattr(queue, f"_{op}")
            built = builder(**{name: decoded.args.get(name) for name in inspect.signature(builder).parameters})
        assert [variants._bytes(k) for k in built.keys] == keys, op
        assert [variants._bytes(a) for a in built.args] == argv, op
    conn.close()


def test_the_edges_are_the_contracts() -> None:
    sizes = [len(q.encode()) for q in rawcalls.EDGE_QUEUES]
    assert {1, keyspace.QUEUE_MAX_BYTES} == {1, spec.LIMITS["queue_max_bytes"]} <= set(sizes)
    assert sizes.count(1) == 1  # one one-byte name: a run on a server has one of its own (OWN-2)
    assert any("!" in q for q in rawcalls.EDGE_QUEUES) and any("~" in q for q in rawcalls.EDGE_QUEUES)
    assert {len(c.encode()) for q in rawcalls.EDGE_QUEUES for c in q} >= {1, 2, 3, 4}
    assert all(len(q.encode()) == keyspace.QUEUE_MAX_BYTES + 1 for q in rawcalls.BAD_QUEUES[1:3])
    for q in rawcalls.EDGE_QUEUES:
        keyspace.check_queue(q)  # also a KS-3 name: the model can hold it
    assert rawcalls.OVERFLOWING_IDS[0][3:] > rawcalls.EDGE_IDS[1][3:]


# -- the sweep on real servers --------------------------------------------------------


def judge_on(target: str, request: pytest.FixtureRequest, scripts: str | Path | None = None) -> RawJudge:
    if target == "fakeredis":
        conn = emq_live.connect(scripts=scripts)
    else:
        conn = emq_live.connect(flush_url(request.getfixturevalue(target)), scripts=scripts)
    request.addfinalizer(conn.close)
    return RawJudge(conn)


@pytest.mark.parametrize("target", ["fakeredis", "valkey", "redis_server"])
def test_our_scripts_pass_the_whole_sweep(target: str, request: pytest.FixtureRequest) -> None:
    judge = judge_on(target, request)
    seen: dict[str, int] = {}
    found = []
    for call, finding in rawcalls.sweep(judge):
        seen[call.spoil.split(":")[0]] = seen.get(call.spoil.split(":")[0], 0) + 1
        if finding is not None:
            found.append(str(finding))
    assert not found, "\n".join(found[:5])
    assert set(seen) == set(KINDS)
    assert sum(seen.values()) > 600


MUTANTS = dict(zip((e.name for e in CHECK_EDITS), check_mutants()))


def _edited(edit: CheckEdit, tmp_path: Path) -> Path:
    """A copy of our scripts with the edit's selftest mutant applied."""
    mutant = MUTANTS[edit.name]
    return copy_scripts(tmp_path, mutant.script, mutant.apply)


def test_every_edit_is_one_selftest_mutant_of_one_line(tmp_path: Path) -> None:
    assert len(MUTANTS) == len(CHECK_EDITS)
    assert len({m.key for m in MUTANTS.values()}) == len(MUTANTS)
    for edit in CHECK_EDITS:
        m = MUTANTS[edit.name]
        assert m.operator == CHECK_OPERATOR and m.script == edit.script
        assert m.before.replace(edit.before, edit.after) == m.after != m.before
        copy = tmp_path / edit.name
        copy.mkdir()
        scripts = ScriptSet(_edited(edit, copy))
        changed = [name for name, s in scripts.scripts.items() if s.sha != ScriptSet()[name].sha]
        assert changed, edit.name


@pytest.mark.parametrize("target", ["fakeredis", "valkey"])
@pytest.mark.parametrize("edit", CHECK_EDITS, ids=lambda e: e.name)
def test_the_sweep_finds_each_one_check_edit(edit: CheckEdit, target: str, tmp_path: Path,
                                             request: pytest.FixtureRequest) -> None:
    judge = judge_on(target, request, _edited(edit, tmp_path))
    finding = next((f for _, f in rawcalls.sweep(judge) if f is not None), None)
    assert finding is not None, f"{edit.name} ({edit.why}) survived the sweep"


# -- the draws ---------------------------------------------------------------------------

DRAWS = settings(max_examples=150, deadline=None, database=None, derandomize=True,
                 suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def judge_draws(judge: RawJudge) -> None:
    """Hypothesis draws raw calls (``RAW``); the first finding fails the search."""

    @DRAWS
    @given(a=rawcalls.RAW.strategy)
    def check(a: Any) -> None:
        judge.reset()
        for f in rawcalls.prepare(judge, rawcalls.drawn_op(a)):
            raise AssertionError(str(f))
        finding = judge.send(rawcalls.drawn(a, judge.model(rawcalls.QUEUE)))
        assert finding is None, str(finding)

    check()


def test_drawn_raw_calls_pass_our_scripts() -> None:
    conn = emq_live.connect()
    judge_draws(RawJudge(conn))
    conn.close()


@pytest.mark.parametrize("name", ["decimal-leading-zero", "queue-max-strict", "id-bound-off"])
def test_drawn_raw_calls_find_an_edit(name: str, tmp_path: Path) -> None:
    edit = next(e for e in CHECK_EDITS if e.name == name)
    conn = emq_live.connect(scripts=_edited(edit, tmp_path))
    with pytest.raises(AssertionError, match="diverges"):
        judge_draws(RawJudge(conn))
    conn.close()

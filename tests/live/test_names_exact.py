"""A queue's name is never a pattern (OWN-1, KS-3): every place the kit or a script turns
a name into a SCAN glob, a key prefix or a Lua pattern reaches that name's keys and no
other, for the names of tests/hostile.py on a server holding a queue under each of them
and under the names a misread pattern would take for them.

The places: ``keyspace.pattern`` (LiveTarget's wipe, the soak's, the audit's walk of a
queue), snapshot.lua's SCAN of its glob-escaped prefix, ``Names.scan``/``owns`` (a run's
reset, release and ``emq clean``), the audit's discovery, and the group check of
lib.lua's ``emq.is_group``, the scripts' one Lua pattern, against Python's."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from emq_kit.audit import audit
from emq_kit.check.live import LiveTarget
from emq_kit.check.names import Names
from emq_model import errors, keyspace, spec
from tests.hostile import HOSTILE, NAMES
from tests.livekit import LIVE, J, dump, flush_url

SUFFIX = "1f3a9c02"
"""A run's suffix; ``alpha-1f3a9c02`` of HOSTILE is under it, the other names are not."""


@pytest.fixture(params=LIVE)
def hosted(request: pytest.FixtureRequest) -> Iterator[LiveTarget]:
    """A LiveTarget on fakeredis, Valkey or Redis whose server holds, under every name
    of ``NAMES``, a pending job, a job in lane ``a-b.c`` and a stray key."""
    url = None if request.param == "fakeredis" else flush_url(
        request.getfixturevalue("valkey" if request.param == "valkey" else "redis_server"))
    target = LiveTarget(url)
    for name in NAMES:
        q = target.conn.queue(name)
        assert q.enqueue(J(1), b"x") == "enqueued" and q.lane_enqueue(J(2), b"y", "a-b.c") == "enqueued"
        target.conn.redis.set(keyspace.prefix(name) + "kept", "stray")
    yield target
    target.conn.close()


def under(name: str, keys: Any) -> set[bytes]:
    """The keys of ``keys`` under ``name``'s prefix, the grammar's own test (no pattern)."""
    head = keyspace.prefix(name).encode()
    return {k for k in keys if k.startswith(head)}


def test_a_names_glob_its_snapshot_and_a_runs_names_reach_its_keys_only(hosted: LiveTarget) -> None:
    r = hosted.conn.redis
    every = set(r.scan_iter(count=1000))
    assert all(under(name, every) for name in NAMES)
    for name in HOSTILE:
        own = under(name, every)
        assert set(r.scan_iter(match=keyspace.pattern(name), count=1000)) == own, name
        names = Names(SUFFIX, given={name: name})  # a run's --queue name: its reset, release, emq clean
        assert set(names.scan(r)) == own and {k for k in every if names.owns(k)} == own, name
        snap = hosted.conn.queue(name).snapshot()  # snapshot.lua's SCAN
        assert (snap.stray, sorted(dict(snap.rows))) == ((keyspace.prefix(name) + "kept",), [J(1), J(2)]), name
        assert [i for i, _ in snap.pending] == [J(1)] and [(g, [i for i, _ in e]) for g, e in snap.lanes] == \
            [("a-b.c", [J(2)])], name


def test_a_wipe_of_a_name_deletes_its_keys_only(hosted: LiveTarget) -> None:
    """LiveTarget's wipe (a queue's first hand-out after a reset), one name after the
    other: each takes its own keys, every other key stays byte for byte."""
    r = hosted.conn.redis
    for name in HOSTILE:
        before = dump(r)
        hosted.reset()
        hosted.queue(name)
        assert dump(r) == {k: v for k, v in before.items() if k not in under(name, before)}, name


def test_the_audit_finds_every_name_and_reads_each_queue_as_its_own(hosted: LiveTarget) -> None:
    if hosted.url is None:
        pytest.skip("the audit reads a server by URL")
    result = audit(hosted.url)
    assert [a.queue for a in result.queues] == sorted(NAMES)
    census = {a.queue: {**a.to_json(), "queue": None} for a in result.queues}
    assert all(c == census["a"] for c in census.values()), census  # the same queue under every name
    assert census["a"]["rows"] == 2 and census["a"]["counts"]["pending"] == 1


@pytest.mark.parametrize("group", ["a-b", "a.b", "-", ".", "a%b", "a(b", "a[b", "*", "?", "%", "a^", "$", "a]", "a+",
                                   "a)", "%a", "[^a]", "." * 64, "a" * 63 + "%"])
def test_lua_and_python_judge_a_group_alike(group: str) -> None:
    """LANE-2 in lib.lua is ``string.find`` of a class built from the alphabet: a group
    holding any of Lua's specials is refused there exactly when Python refuses it."""
    from emq_live import connect

    try:
        spec.check_value("group", "group", group)
        python = "ok"
    except errors.ArgError:
        python = "EMQARG"
    conn = connect()
    try:
        lua = conn.scripts.run(conn.redis, "lane_pause", keyspace.queue_keys("q"), [group]).decode()
    except errors.ArgError:
        lua = "EMQARG"
    assert lua == python == ("ok" if all(c.isascii() and (c.isalnum() or c in "_.-") for c in group) else "EMQARG")

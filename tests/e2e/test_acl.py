"""Least privilege: a Valkey user with the rules of specs/acl.json runs
the whole conformance suite; without any one rule it cannot; and it can do nothing else.

An administrator connection creates the user, writes the fence once (the user may only
read it) and reads the server's ACL LOG, which names every command or key refused.
"""

from __future__ import annotations

from typing import Any

import pytest
import redis

import emq_live
from emq_kit import cli
from emq_kit.check import raw
from emq_kit.check.lanes import CELLS as LANE_CELLS
from emq_kit.check.live import LiveTarget
from emq_kit.check.pools import QUEUES
from emq_kit.claim import Claim
from emq_kit.errors import TargetUnavailable
from emq_kit.server import ServerProcess
from emq_live import acl
from emq_live.urls import ConnectError
from emq_model import keyspace, spec
from emq_model.model import QueueModel
from tests.livekit import J

PASSWORD = "s3cret-emq"


def make_user(admin: Any, user: str, rules: list[str]) -> None:
    admin.execute_command("ACL", "SETUSER", user, "reset", "on", ">" + PASSWORD, *rules)


def url(server: ServerProcess, user: str, db: int = 0) -> str:
    return f"redis://{user}:{PASSWORD}@127.0.0.1:{server.port}/{db}"


WORKLOAD_DB = 1
"""The workload's database: a URL naming one other than 0 makes the client SELECT it on
connect, so the rules that let it do so are among those shown needed."""


def in_workload_db(server: ServerProcess, user: str) -> str:
    """The user's URL of the workload's database, its fence written there by an administrator."""
    with server.client(db=WORKLOAD_DB) as r:
        r.set(keyspace.VERSION_KEY, spec.WIRE_VERSION)
    return url(server, user, WORKLOAD_DB)


def refused(admin: Any) -> set[tuple[str, str]]:
    """(reason, object) of every ACL LOG entry but redis-py's CLIENT SETINFO on connect,
    which it sends, sees refused and ignores."""
    return {(e["reason"], e["object"]) for e in admin.acl_log()} - {("command", "client|setinfo")}


def workload(target_url: str, admin: Any) -> None:
    """Everything the client and ``emq check`` do, once each: the run's claim (its record
    and lease, specs/ownership.md), connect (fence, script loads), a target's reset and
    its forget_row fault, every transition on the server clock, the batch ops, the lane
    ops, every read, a NOSCRIPT reload."""
    with Claim(target_url, ["acl"], command="acl workload"):
        _workload(target_url, admin)


def _workload(target_url: str, admin: Any) -> None:
    target = LiveTarget(target_url)
    try:
        q = target.queue("acl")
        q.enqueue(J(9), b"x")
        target.reset()
        q = target.queue("acl")  # deletes J9's keys
        assert q.enqueue(J(1), b"a") == "enqueued"
        # emq check's raw calls: a refused call is judged on every key's DUMP and PTTL
        judge = raw.RawJudge(target.conn, match="emq:*")
        assert judge.send(raw.calls("keys-count", "enqueue", QueueModel("acl"))[0]) is None
        assert q.schedule(J(2), b"b", delay_ms=0) == "scheduled"
        assert q.promote() == 1
        c = q.claim(60_000)
        assert q.extend(c.id, c.token, 60_000) == "ok"
        assert q.retry(c.id, c.token, delay_ms=0, max_attempts=1, error="e") == "dead"
        assert q.reprocess(c.id) == "ok"
        c = q.claim(1, now=0)
        assert q.reap(now=1) == 1
        assert q.complete(c.id, c.token) == "ok"
        assert q.remove(J(2)) == "ok"
        assert q.browse(5) == [] and q.job(J(1)) is None
        assert q.counts() == dict.fromkeys(spec.LOCATIONS, 0) and q.state(J(1)) == "absent"
        assert q.enqueue_many([(J(4), b"d"), (J(5), b"e")]) == ["enqueued", "enqueued"]
        got = q.claim_many(2, 60_000)
        assert q.complete_many([(c.id, c.token) for c in got]) == ["ok", "ok"]
        assert [q.lane_enqueue(J(n), b"l", "p") for n in (6, 7)] == ["enqueued", "enqueued"]
        assert q.lane_pause("p") == "ok" and q.snapshot().paused == ("p",)
        assert q.lane_resume("p") == "ok" and q.snapshot().ring == ("p",)
        assert q.lane_weight("p", 2) == "ok" and q.lane_limit("p", 3) == "ok"
        lane = q.lane_wclaim(60_000)
        assert q.lane_enqueue(J(8), b"l", "p") == "enqueued"
        lane.append(q.lane_claim(60_000))
        assert q.complete_many([(c.id, c.token) for c in lane]) == ["ok"] * 3
        assert q.lane_limit("p", 0) == "ok" and q.lane_weight("p", 1) == "ok"
        q.enqueue(J(3), b"c")
        target.forget_row("acl", J(3))
        for kind in ("string", "stream"):  # emq check's spoil_key fault, and mend_key
            target.spoil_key("acl", "pending", kind)
            target.mend_key("acl", "pending")
        assert q.snapshot().pending == ((J(3), 0),)
        admin.script_flush()
        assert q.claim(5) is None and q.last_dropped == (J(3),)
        assert target.describe()["server"].startswith("valkey ")
    finally:
        target.close()


def test_the_restricted_user_runs_the_whole_workload_with_nothing_refused(server, admin) -> None:
    make_user(admin, "emq", acl.rules())
    workload(in_workload_db(server, "emq"), admin)
    assert refused(admin) == set()


@pytest.mark.parametrize("rule", acl.rules())
def test_every_rule_is_needed(server, admin, rule: str) -> None:
    """Without any one rule the workload fails, and the server says it refused exactly
    what that rule grants. A refusal while connecting (the fence, the script loads) is the
    client's one-line ``ConnectError``; one inside the workload, the server's own error."""
    make_user(admin, "lesser", [r for r in acl.rules() if r != rule])
    with pytest.raises((redis.exceptions.ResponseError, ConnectError, TargetUnavailable)):
        workload(in_workload_db(server, "lesser"), admin)
    seen = refused(admin)
    if rule.startswith("+"):
        assert ("command", rule[1:]) in seen
    else:
        pattern = rule.split("~", 1)[1]
        assert any(reason == "key" and _glob(pattern, obj) for reason, obj in seen), seen


def _glob(pattern: str, key: str) -> bool:
    """The ACL's glob for our two patterns: ``*`` matches anything, the rest is literal."""
    import fnmatch

    return fnmatch.fnmatchcase(key, pattern.replace("[", "[[]"))


def test_the_restricted_user_can_do_nothing_else(server, admin) -> None:
    make_user(admin, "emq", acl.rules())
    admin.set("other-app:secret", "x")
    with redis.Redis.from_url(url(server, "emq")) as r:
        for call in (
            lambda: r.flushall(),
            lambda: r.flushdb(),
            lambda: r.config_get("*"),
            lambda: r.keys("*"),
            lambda: r.get("other-app:secret"),
            lambda: r.set("other-app:secret", "mine"),
            lambda: r.set(keyspace.VERSION_KEY, "2"),  # the fence is read-only
            lambda: r.delete(keyspace.VERSION_KEY),
            lambda: r.eval("return 1", 0),  # no ad-hoc Lua: only EVALSHA
            lambda: r.info(),
            lambda: r.acl_list(),
        ):
            with pytest.raises(redis.exceptions.NoPermissionError):
                call()
        # SCRIPT LOAD does not widen the rights: a loaded script's commands are checked too
        sha = r.script_load("return redis.call('GET', KEYS[1])")
        with pytest.raises(redis.exceptions.ResponseError, match="(?i)permission|can't"):
            r.evalsha(sha, 1, "other-app:secret")
        sha = r.script_load("return redis.call('FLUSHALL')")
        with pytest.raises(redis.exceptions.ResponseError, match="(?i)permission|can't"):
            r.evalsha(sha, 0)
    assert admin.get("other-app:secret") == b"x"
    assert admin.get(keyspace.VERSION_KEY) == spec.WIRE_VERSION.encode()


def test_the_fence_is_written_by_an_administrator(server, admin) -> None:
    """The user may only read ``{emq}:version``: on a server without it, connecting is
    refused until an administrator writes it (docs/server.md, Least privilege)."""
    make_user(admin, "emq", acl.rules())
    admin.delete(keyspace.VERSION_KEY)
    # the user may run SET (emq check's spoil_key) but not on the fence: %R~{emq}:version
    with pytest.raises(ConnectError, match="(?i)no permissions to access a key"):
        LiveTarget(url(server, "emq"))
    admin.set(keyspace.VERSION_KEY, spec.WIRE_VERSION, nx=True)
    LiveTarget(url(server, "emq")).close()


@pytest.mark.parametrize("own, other", [("β*[x]", "βyx"), ("*", "alpha"), ("a?", "ab"), ("[ab]", "a"),
                                        ("a\\b", "ab"), ("a[b", "a[b2"), ("a%b", "a%bc"), ("a-b", "a-bb")])
def test_a_user_of_one_queue_reaches_no_other(server, admin, own: str, other: str) -> None:
    """docs/server.md: ``~`` + the queue's escaped glob (``keyspace.pattern``) instead of
    ``~emq:{*}:*`` confines a user to one queue, even one named with glob characters:
    ``other`` is a queue the unescaped glob of ``own`` (or a prefix match) would reach."""
    rules = [r for r in acl.rules() if r != "~emq:{*}:*"] + ["~" + keyspace.pattern(own)]
    make_user(admin, "one", rules)
    with emq_live.connect(url(server, "one")) as conn:
        assert conn.queue(own).enqueue(J(1), b"mine") == "enqueued"
        with pytest.raises(redis.exceptions.ResponseError, match="(?i)permission"):
            conn.queue(other).enqueue(J(1), b"not mine")
    assert admin.exists(keyspace.job_key(own, J(1))) and not admin.exists(keyspace.job_key(other, J(1)))


def test_emq_check_passes_under_the_restricted_user(server, admin, capsys) -> None:
    """The whole conformance suite (profile ci, coverage-gated) as the restricted user:
    its reset deletes only the keys of its own queues (no FLUSHALL), and the server
    refused nothing along the way. Raw calls and their sweep run beside the windows of
    deferred verification: a raw call once went before a window's steps, and seed 7
    then reported 11 differences on correct scripts (tests/e2e/test_check.py has the run
    under suffixed names). The machine's queues go under the user's names (``--queue``),
    the raw calls' own under the run's: when it ends the server holds what it held. The
    one command it was refused is its try of the optional tracking (specs/acl.json
    ``tracking``; without it raw calls are judged by every key, DEPTH-6)."""
    make_user(admin, "emq", acl.rules())
    admin.set("other-app:keep", "1")
    admin.set("emq:{βyx}:pending", "a queue whose name the unescaped glob of 'β*[x]' matches")
    before = sorted(admin.keys())
    assert cli.main(["check", "--url", url(server, "emq"), "--seed", "7", "--queue", QUEUES[0],
                     "--queue", QUEUES[1]]) == cli.EXIT_OK
    out = capsys.readouterr().out
    cells = len(spec.cells()) + len(LANE_CELLS) + len(raw.KINDS)  # lanes, and a cell per raw kind
    assert "CONFORMS" in out and f"cells {cells}/{cells}" in out and "sweep phase: calls" in out
    assert refused(admin) == {("command", "client|id")}
    assert [e["count"] for e in admin.acl_log() if e["object"] == "client|id"] == [1]  # tried once
    assert sorted(admin.keys()) == before  # the run's record and keys are gone, the others' intact


@pytest.mark.parametrize("rule", ["+dump", "+restore"])
def test_a_user_without_a_rule_the_kit_needs_is_told_which(server, admin, rule: str, capsys) -> None:
    """A command of the kit's own that the user's ACL refuses (a raw call's fingerprint,
    ``DUMP``, in the sweep; a mended key's ``RESTORE``, in the search) ends the run
    with one line naming it and where the rules are: the environment's, never a verdict
    and never an ``emq bug``. The run's keys are gone afterwards."""
    make_user(admin, "lesser", [r for r in acl.rules() if r != rule])
    before = sorted(admin.keys())
    code = cli.main(["check", "--url", url(server, "lesser"), "--seed", "1", "--examples", "30"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == cli.EXIT_ENV, err
    assert f"no permissions to run the '{rule[1:]}' command" in err[-1] and "specs/acl.json" in err[-1], err
    assert "emq bug" not in err[-1] and "Traceback" not in "\n".join(err)
    assert sorted(admin.keys()) == before


@pytest.mark.parametrize("rule", ["+evalsha", "+script|load"])
def test_a_run_refused_its_scripts_leaves_nothing_on_a_server_without_a_fence(server, admin, rule: str,
                                                                              capsys) -> None:
    """OWN-5: a soak whose user may claim but not run the scripts ends with one line, and
    its record and lease are gone. The fence absent when it began, its release deleted
    it — a DEL the ACL refuses on the read-only fence, absent or not, which ended the
    release before the record's own deletion: both stayed, and nothing said so."""
    make_user(admin, "noscripts", [r for r in acl.rules() if r != rule])
    admin.delete(keyspace.VERSION_KEY)
    before = sorted(admin.keys())
    code = cli.main(["soak", "--url", url(server, "noscripts"), "--seconds", "5", "--jobs", "20", "--workers", "2"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == cli.EXIT_ENV and len(err) == 1 and "cannot open a queue connection" in err[0], err
    assert sorted(admin.keys()) == before
    # a run of the user's killed under its claim (its lease gone): emq clean removes it, the
    # fence it would have deleted absent and read-only (OWN-6)
    claim = Claim(url(server, "noscripts"), ["acl"], command="acl workload")
    claim.__enter__()
    claim._stop.set()
    claim._close()  # as a process killed under its claim: its record and lease stay, its connection goes
    admin.delete(*[k for k in admin.keys() if k.endswith(b":live")])
    assert cli.main(["clean", "--url", url(server, "noscripts")]) == cli.EXIT_OK, capsys.readouterr().err
    assert "removed the leftovers of 1 dead run" in capsys.readouterr().out
    assert sorted(admin.keys()) == before


def test_the_docs_give_the_acl_lines() -> None:
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "server.md").read_text("utf-8")
    assert acl.setuser() in doc
    assert acl.setuser(cluster=True) in doc
    assert acl.setuser(tracking=True) in doc

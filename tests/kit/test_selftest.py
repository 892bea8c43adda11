"""`emq selftest`: the six mutation operators make the edits specs/selftest.md says, every
mutant applies to our scripts, the machine kills a real mutant and cannot kill an
equivalent one, and the list of equivalent mutants names only mutants that exist."""

from __future__ import annotations

import json
import multiprocessing
import signal
from pathlib import Path
from typing import Any

import pytest
import redis

from emq_kit import interrupts
from emq_kit.errors import Interrupted, SearchFailed
from emq_kit.selftest import mutation
from emq_kit.selftest.mutation import (
    CHECK_OPERATOR,
    HANG,
    LANE_SCRIPTS,
    OBSERVER,
    UNREPLAYED,
    Mutant,
    all_mutants,
    copy_scripts,
    equivalents,
    judge,
    mutants_of,
    require_verdict,
    summary,
)
from emq_kit.server import ServerProcess
from tests.kit.processes import emq
from tests.kit.test_hang import quick_nodes, quick_server

SCRIPT = """-- a comment with redis.call("DEL", k.row) that is not code
if redis.call("EXISTS", k.row) == 0 then
  return "gone"
end
if attempts < a.max_attempts then
  redis.call("ZADD", k.schedule, emq.int(a.now), id)
end
redis.call("HSET", k.row, "state", emq.states.pending, "attempts", "0")
local due = redis.call("ZRANGE", k.active, "-inf", emq.int(a.now), "BYSCORE")
"""


def edits(operator: str) -> list[tuple[int, str]]:
    return [(m.line, m.after.strip()) for m in mutants_of("demo", SCRIPT) if m.operator == operator]


def test_delete_write_removes_each_write_and_skips_comments() -> None:
    assert edits("delete-write") == [(6, ""), (8, "")]


def test_no_operator_edits_a_trailing_comment() -> None:
    """A mutant that only edits a comment is the same script: it would survive as a
    false "survived" (promote.lua's `-- ... (LANE-1)` became `(LANE-0)`)."""
    line = 'local lane = emq.lane_route(a, row) -- returns to its lane (LANE-1): 0 or 1 < 2'
    assert mutants_of("x", line + "\n") == []
    for m in all_mutants():
        if "--" in m.before:
            comment = m.before[m.before.index("--"):]
            assert m.after == "" or m.after.endswith(comment), m.key


def test_swap_compare_swaps_operators_and_range_bounds() -> None:
    assert (5, "if attempts <= a.max_attempts then") in edits("swap-compare")
    assert (9, 'local due = redis.call("ZRANGE", k.active, "-inf", "(" .. emq.int(a.now), "BYSCORE")') in \
        edits("swap-compare")


def test_flip_constant_flips_zero_and_one() -> None:
    assert (2, 'if redis.call("EXISTS", k.row) == 1 then') in edits("flip-constant")
    assert (8, 'redis.call("HSET", k.row, "state", emq.states.pending, "attempts", "1")') in edits("flip-constant")


def test_drop_precondition_disables_guards_that_return() -> None:
    assert edits("drop-precondition") == [(2, "if false then")]


def test_misroute_zadd_sends_the_id_to_the_next_location() -> None:
    assert edits("misroute-zadd") == [(6, 'redis.call("ZADD", k.dead, emq.int(a.now), id)')]


def test_drop_state_write_keeps_the_other_fields() -> None:
    assert edits("drop-state-write") == [(8, 'redis.call("HSET", k.row, "attempts", "0")')]


def test_every_mutant_of_our_scripts_applies_and_has_a_unique_key() -> None:
    mutants = all_mutants()
    assert {m.operator for m in mutants} == {"delete-write", "swap-compare", "flip-constant", "drop-precondition",
                                             "misroute-zadd", "drop-state-write", CHECK_OPERATOR}
    assert len({m.key for m in mutants}) == len(mutants)
    assert all(m.after != m.before for m in mutants)


def test_the_operators_reach_every_lane_script() -> None:
    mutants = all_mutants()
    assert set(LANE_SCRIPTS) == {"lane_enqueue", "lane_claim", "lane_config"}
    for script in LANE_SCRIPTS:
        assert {m.operator for m in mutants if m.script == script} >= {"delete-write", "flip-constant"}, script
    ring_writes = {m.before.strip().split(",")[0] for m in mutants if m.script == "lib" and m.operator == "delete-write"}
    assert {'redis.call("RPUSH"', 'redis.call("RPOP"', 'redis.call("LREM"'} <= ring_writes


def test_a_lane_mutant_is_killed_by_emq_check_on_the_copy(tmp_path: Path) -> None:
    """A lane_pause that writes nothing to the paused set: ``emq check --scripts COPY``
    (the lane rules on fakeredis) finds it, at the lane_pause, by INV-8's keyspace."""
    mutant = next(m for m in all_mutants() if m.script == "lane_config" and m.operator == "delete-write"
                  and "SADD" in m.before)
    copy = tmp_path / "lua"
    copy.mkdir()
    copy_scripts(copy, mutant.script, mutant.apply)
    done = emq("check", "--scripts", str(copy), "--profile", "dev", "--seed", "1", "--first", "--json")
    assert done.returncode == 1, done.stdout + done.stderr
    report = json.loads(done.stdout)
    signature = report["check"]["differences"][0]["signature"]
    assert report["detail"] == "counterexample" and signature == {"cell": "lane_pause/ok", "rule": "INV-8"}, signature


def test_the_equivalent_list_names_only_existing_mutants_with_reasons() -> None:
    keys = {m.key for m in all_mutants(observer=True)}
    for key, reason in equivalents().items():
        assert key in keys, f"stale entry in equivalent_mutants.json: {key}"
        assert len(reason) > 20


def test_a_real_mutant_is_killed_with_a_short_trace() -> None:
    mutant = next(m for m in all_mutants() if m.operator == "delete-write" and m.script == "complete"
                  and "DEL" in m.before and "ZREM" not in m.before)
    verdict = judge(mutant, None, budget=120, seed=0)
    assert verdict.status == "killed" and 1 <= verdict.shrunk <= 6 and verdict.rule
    assert verdict.shrink_seconds is not None and verdict.shrink_seconds > 0
    s = summary([verdict])
    assert s["median_shrink_seconds"] == s["max_shrink_seconds"] == round(verdict.shrink_seconds, 3)


def test_an_equivalent_mutant_survives_its_budget() -> None:
    """lib.lua's byte comparison starts at byte 0 instead of 1: string.byte(s, 0) is no
    value on both sides, equal, so the loop goes on as before; nothing can tell them
    apart, so no search may kill it."""
    mutant = next(m for m in all_mutants() if m.script == "lib" and m.before.strip() == "for i = 1, #a do")
    verdict = judge(mutant, None, budget=5, seed=0)
    assert verdict.status == "survived" and verdict.examples >= 1  # a survivor had whole examples run against it
    assert summary([verdict])["survived"] == 1


def test_a_difference_no_replay_shows_is_neither_a_kill_nor_a_survival(monkeypatch: pytest.MonkeyPatch) -> None:
    """enqueue.lua made to write a wrong attempts count when the server clock's
    microseconds are a multiple of 100: the search meets it within a few examples, and a
    replay of the shrunk steps almost never does. A difference no replay showed is no
    verdict: the search goes on from the next seed for the rest of the budget
    (specs/selftest.md), and the verdict is never "survived": no verdict (the run stops,
    exit 2) or, when a replay did show one, killed."""
    from importlib import resources

    from emq_kit.selftest import mutation

    lines = resources.files("emq_live").joinpath("lua/enqueue.lua").read_text("utf-8").split("\n")
    n = next(i for i, line in enumerate(lines, 1) if 'redis.call("HSET", k.row, "state"' in line)
    mutant = Mutant("now-and-then", "enqueue", n, lines[n - 1], lines[n - 1] + ' if tonumber(redis.call("TIME")[2]) '
                    '% 100 == 0 then redis.call("HSET", k.row, "attempts", "7") end')
    # the allowance past the budget for a difference being shrunk and replayed: the
    # judging parent's, so the test's worst case is 25 s, not 80
    monkeypatch.setattr(mutation, "SHRINK_ALLOWANCE", 5.0)
    verdict = judge(mutant, None, budget=20, seed=0)
    assert verdict.status in (UNREPLAYED, "killed"), verdict
    if verdict.status == UNREPLAYED:
        # every difference met failed to replay, or the last was still being shrunk and replayed
        assert "none shown again by a replay" in verdict.reason or "not shrunk and replayed" in verdict.reason, verdict
        with pytest.raises(SearchFailed, match=r"mutant 1 of 1 \(now-and-then\|enqueue\|.*no verdict"):
            require_verdict(verdict, 1, 1)


@pytest.mark.parametrize("key", sorted(equivalents()))
def test_listed_equivalents_are_not_killed_quickly(key: str, request: Any) -> None:
    mutant = next(m for m in all_mutants(observer=True) if m.key == key)
    # snapshot.lua runs on a server only (on fakeredis the snapshot is read from memory)
    url = request.getfixturevalue("valkey").url if mutant.script in OBSERVER else None
    # a budget that runs whole examples after the sweep even on a loaded machine: one spent
    # before the first whole example is unjudged, no survival
    verdict = judge(mutant, url, budget=10, seed=0)
    assert verdict.status == "survived" and verdict.examples >= 1, verdict


def test_snapshot_lua_is_mutated_on_a_server_only() -> None:
    """On fakeredis the kit reads the snapshot from memory: snapshot.lua never runs there."""
    assert not [m for m in all_mutants() if m.script == "snapshot"]
    assert len([m for m in all_mutants(observer=True) if m.script == "snapshot"]) > 20


@pytest.mark.parametrize("program", ["valkey-server", "redis-server"])
def test_a_snapshot_mutant_that_never_returns_is_killed_and_its_server_freed(program: str,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """``until cursor == "1"``: snapshot.lua's SCAN loop never ends and blocks the server;
    the judge's watch finds the call in flight past ``hang.SERVER_SECONDS``, stops its
    script (SCRIPT KILL) and calls it a kill, without waiting for the budget, and the
    server answers again (the next mutant would otherwise fail on BUSY). On a private
    server with the quicker bounds (the judge's child is forked: it has them too); the
    cluster's test below waits out the defaults."""
    mutant = next(m for m in all_mutants(observer=True) if m.script == "snapshot" and m.after.strip() == 'until cursor == "1"')
    with quick_server(program, monkeypatch) as server:
        verdict = judge(mutant, server.url, budget=600, seed=0)
        assert verdict.status == "killed" and verdict.rule == HANG, verdict
        # the watch's kill, not the spent budget's (600 s: however loaded the machine, the
        # check reaches its first snapshot well before), nor the child's own socket timeout
        assert verdict.reason.startswith("a call had not returned"), verdict
        assert verdict.seconds < 600, verdict
        with server.client() as r:
            assert r.ping()
            with pytest.raises(redis.exceptions.ResponseError, match="NOTBUSY"):
                r.execute_command("SCRIPT", "KILL")


def test_an_interrupted_judge_ends_its_child_before_it_stops_the_script(monkeypatch: pytest.MonkeyPatch,
                                                                       ctrl_c: None) -> None:
    """INT-2: Ctrl-C while a mutant is judged on a server ends the judge's child first,
    then stops a script of its still running; the other way round the live child sent
    its next call, which hung again, and the stop waited on each (6 s, not a second or
    two)."""
    mutant = next(m for m in all_mutants() if m.key == "flip-constant|claim|if #page == 0 then|0")
    alive: list[list[int | None]] = []
    stop, answered = mutation.stop_script, mutation._answered

    def stop_script(url: str) -> bool:
        alive.append([child.pid for child in multiprocessing.active_children()])
        return stop(url)

    def interrupted(*args: Any) -> bool:
        signal.raise_signal(signal.SIGINT)  # noted: raised at the wait's first turn, the child at work
        return answered(*args)

    monkeypatch.setattr(mutation, "stop_script", stop_script)
    monkeypatch.setattr(mutation, "_answered", interrupted)
    with ServerProcess("valkey-server") as server, interrupts.stopping():
        with pytest.raises(Interrupted):
            judge(mutant, server.url, budget=600, seed=0)
        interrupts.handled()
        with server.client() as r:
            assert r.ping()
    assert alive == [[]], alive


def test_the_watch_sees_a_clusters_commands_and_frees_its_primaries(cluster: Any,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """On a cluster the client sends through ``RedisCluster``, not ``redis.Redis``: the
    judge's watch sees its commands too, so the never-ending snapshot loop is killed by
    the watch (not when the budget is spent) and every primary answers again. Under the
    quicker bounds (test_hang's own cluster test waits out the defaults)."""
    mutant = next(m for m in all_mutants(observer=True) if m.script == "snapshot" and m.after.strip() == 'until cursor == "1"')
    with quick_nodes(cluster, monkeypatch):
        verdict = judge(mutant, cluster.url, budget=600, seed=0)
        assert verdict.status == "killed" and verdict.rule == HANG, verdict
        assert verdict.reason.startswith("a call had not returned"), verdict
        for node in cluster.nodes:
            with node.client() as r:
                with pytest.raises(redis.exceptions.ResponseError, match="NOTBUSY"):
                    r.execute_command("SCRIPT", "KILL")


def test_selftest_on_fakeredis_says_snapshot_lua_is_not_exercised(capsys: pytest.CaptureFixture[str]) -> None:
    from emq_kit import cli

    assert cli.main(["selftest", "--only", "delete-write|enqueue|", "--budget", "20"]) == cli.EXIT_OK
    out, err = capsys.readouterr()
    assert "snapshot.lua is not mutated on the embedded fakeredis" in err
    assert "|snapshot|" not in out and "snapshot.lua:" not in out


def test_a_mutant_whose_script_never_returns_on_fakeredis_is_killed_as_a_hang(tmp_path: Path, monkeypatch: Any) -> None:
    """lane_claim's ``ZRANGE lane.key, 0, 0`` made ``1, 0``: the lane looks empty yet stays
    on the ring, so the turn loop never ends. On fakeredis the script runs in the kit's
    child process (no SCRIPT KILL): a command that has not returned is the hang. The
    child is killed, and the mutant's scripts go with it (they were left in the temp
    directory, one directory a killed mutant). The watch's bound is a tenth of its default
    here (1 s of the child's CPU, a call these runs draw takes a few milliseconds; the
    forked child has it too, and its own runtime bound, twice that, may stop the hang
    first: a hang either way); the default's own test is
    ``test_the_embedded_bound_stops_a_loop_and_spares_the_largest_call``."""
    import tempfile

    from emq_kit.selftest import mutation

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the child's temp directory is the test's
    monkeypatch.setattr(mutation, "HANG_AFTER", mutation.HANG_AFTER / 10)
    mutant = next(m for m in all_mutants() if m.script == "lane_claim"
                  and 'redis.call("ZRANGE", lane.key, 1, 0)' in m.after)
    verdict = judge(mutant, None, budget=600, seed=0)
    assert verdict.status == "killed" and verdict.rule == HANG, verdict
    # the hang ends the wait (HANG_AFTER of the child's CPU after the call was sent), not
    # the spent budget: 600 s is far past that however loaded the machine
    assert verdict.seconds < 600, verdict
    assert not list(tmp_path.glob("emq-mutant-*"))


@pytest.mark.parametrize("where", ["valkey", "redis_server"])
def test_a_snapshot_mutant_whose_reply_cannot_be_read_is_killed(where: str, request: Any) -> None:
    """``reply[#reply + 0] = rows``: snapshot.lua's rows overwrite the dead location. The
    client cannot read that reply; it is the step's snapshot divergence (the check process
    died on it and the mutant was reported survived before)."""
    mutant = next(m for m in all_mutants(observer=True) if m.script == "snapshot"
                  and m.after.strip() == "reply[#reply + 0] = rows")
    verdict = judge(mutant, request.getfixturevalue(where).url, budget=60, seed=0)
    assert verdict.status == "killed" and verdict.rule == "INV-8", verdict


def test_a_check_that_fails_in_the_kit_stops_the_selftest_as_an_emq_bug(monkeypatch: pytest.MonkeyPatch,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """A mutant whose check raised in the kit's own code (or whose check process died) has
    no verdict: the run stops with 'emq bug' and names the mutant, never 'survived'."""
    from emq_kit import cli
    from emq_kit.selftest import mutation

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise TypeError("our own mistake")

    monkeypatch.setattr(mutation, "run_check", broken)  # the judging child is forked: it has it too
    assert cli.main(["selftest", "--only", "delete-write|enqueue|", "--budget", "20"]) == cli.EXIT_ENV
    out, err = capsys.readouterr()
    assert "| survived |" not in out and "survived 0" not in out
    assert "emq bug in mutant 1 of" in err and "TypeError: our own mistake" in err


def test_sample_judges_a_seeded_sample_of_our_mutants() -> None:
    """``--sample N`` judges N of the mutants ``--only`` chooses of our scripts, as of
    BullMQ's (it was ignored there: every mutant judged, and the command to run it again
    said ``--sample``)."""
    only = "|enqueue|"
    assert len([m for m in all_mutants() if only in m.key]) > 2
    done = emq("selftest", "--only", only, "--sample", "2", "--seed", "1", "--budget", "5")
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ") and not line.startswith("| operator")]
    assert len(rows) == 2 and "mutants 2 of " in done.stdout, done.stdout + done.stderr


def test_a_part_of_the_mutants_judged_is_said_and_is_no_conformance(tmp_path: Path) -> None:
    """``--only``/``--sample`` judge a part of the mutants: the summary says how many of
    how many and why, and killing them all is ``part-killed`` (inconclusive), never
    ``all-killed`` (conforms), whose meaning is every mutant (specs/verdicts.json)."""
    only, of = "|enqueue|", len(all_mutants())
    report = tmp_path / "r.json"
    done = emq("selftest", "--only", only, "--sample", "2", "--seed", "1", "--budget", "5", "--report", str(report))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "emq selftest: INCONCLUSIVE (part-killed)" in done.stdout, done.stdout
    assert f"mutants 2 of {of} (--only '{only}', a sample of 2, seed 1): killed " in done.stdout, done.stdout
    doc = json.loads(report.read_text())
    assert (doc["verdict"], doc["detail"]) == ("inconclusive", "part-killed")
    assert (doc["selftest"]["summary"]["mutants"], doc["selftest"]["summary"]["of"]) == (2, of)


def test_a_budget_that_runs_no_whole_example_judges_no_mutant(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """A budget spent before one whole example ran against a mutant judged nothing: the
    mutant is unjudged, never survived (nor killed), and a run that left mutants unjudged
    is ``inconclusive (unjudged)``, exit 1, never ``differs (survivors)``; its summary
    says ``-`` for the figures no kill gave, never Python's ``None``."""
    from emq_kit import cli
    from emq_kit.report.document import validate

    path = tmp_path / "r.json"
    code = cli.main(["selftest", "--budget", "0.001", "--sample", "3", "--report", str(path)])
    out = capsys.readouterr().out
    assert code == cli.EXIT_FAIL, out
    assert "emq selftest: INCONCLUSIVE (unjudged)" in out and "survived 0, unjudged 3 " in out, out
    assert "median time-to-kill -; median shrunk trace -; shrinking median -, max -" in out, out
    assert "None" not in out and "| survived |" not in out and out.count("| unjudged |") == 3, out
    doc = json.loads(path.read_text())
    validate(doc)
    assert (doc["verdict"], doc["detail"], doc["exit"]) == ("inconclusive", "unjudged", 1)
    assert (doc["selftest"]["summary"]["survived"], doc["selftest"]["summary"]["unjudged"]) == (0, 3)
    assert {(m["status"], m["examples"]) for m in doc["selftest"]["mutants"]} == {("unjudged", 0)}


@pytest.mark.parametrize("argv", [["selftest", "--budget", "1", "--sample", "1"], ["check", "--profile", "dev"]])
def test_wipe_without_a_server_is_refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """--wipe allows deleting keys on a server: without --url it would do nothing, so it
    is refused in one line, exit 2, before anything runs."""
    from emq_kit import cli

    assert cli.main([*argv, "--wipe"]) == cli.EXIT_ENV
    out, err = capsys.readouterr()
    assert out == "" and err.strip() == f"emq {argv[0]}: --wipe lets the run delete keys a server already holds: it needs --url"

"""``emq check --layout bullmq``: the Hypothesis machine on BullMQ's unmodified scripts
(Valkey 8 and Redis 7), the one-line refusal on fakeredis, a trace that replays, and a
selftest mutant of one BullMQ script caught and shrunk."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import jsonschema
import pytest

from emq_kit.check.profiles import PROFILES
from emq_kit.check.run import run_check
from emq_kit.cli import main
from emq_kit.layouts import layout
from emq_kit.selftest import bullmq as teeth
from emq_kit.selftest.mutation import copy_scripts
from emq_kit.server import ServerProcess
from emq_kit.trace.format import Trace
from emq_live.layouts.bullmq import bullmq_version

DB = 13  # a database of its own on the session servers (test_layout_bullmq uses 12)
# moveToActive without its HINCRBY of attemptsStarted: the projection's ``ats`` parts
# from the model at the first take.
MUTANT = 'delete-write|moveToActive-11|rcall("HINCRBY", jobKey, "ats", 1)|0'


@pytest.fixture(params=["valkey", "redis_server"])
def url(request: pytest.FixtureRequest) -> str:
    server: ServerProcess = request.getfixturevalue(request.param)
    return f"{server.url}/{DB}"


def test_the_machine_conforms_on_bullmqs_scripts(url: str) -> None:
    bull = layout("bullmq")
    target = bull.open_target(url)
    try:
        # the ci profile: a gated run, so "conforms" means every cell of the layout reached
        report = run_check(target, PROFILES["ci"], seed=7, layout=bull)
    finally:
        target.close()
    assert report.verdict == "conforms", report.divergence
    assert report.target["layout"] == "bullmq" and report.target["bullmq"] == bullmq_version()
    assert report.total == report.reached == len(bull.cells()) and ("take", "taken") in bull.cells()
    assert report.hits.get("take/taken", 0) > 0 and report.steps > 15


def test_fakeredis_is_refused_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--layout", "bullmq", "--profile", "dev"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cmsgpack" in err


def test_the_default_layout_is_the_four_sets() -> None:
    assert layout().name == layout("echomq").name == "echomq"
    assert ("claim", "claimed") in layout().cells()


def _mutant_dir(tmp: str) -> Path:
    (mutant,) = [m for m in teeth.all_mutants() if m.key == MUTANT]
    return copy_scripts(tmp, mutant.script, mutant.apply, teeth.commands())


def test_a_mutant_is_caught_shrunk_and_its_trace_replays(valkey: ServerProcess, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    url = f"{valkey.url}/{DB}"
    with tempfile.TemporaryDirectory() as tmp:
        broken = _mutant_dir(tmp)
        rc = main(["check", "--layout", "bullmq", "--url", url, "--scripts", str(broken), "--profile", "dev",
                   "--seed", "3", "--first", "--traces", str(tmp_path)])
        out = capsys.readouterr().out
        assert rc == 1, out
        assert f"bullmq {bullmq_version()}" in out
        (path,) = tmp_path.glob("*.json")
        data = json.loads(path.read_text("utf-8"))
        schema = json.loads(Path("specs/schemas/trace.json").read_text("utf-8"))
        jsonschema.validate(data, schema)
        trace = Trace.load(path)
        assert trace.header["layout"] == "bullmq"
        # shrunk to the retention, one add and the take whose ats the mutant forgot
        assert [s.op for s in trace.steps] == ["retention", "add", "take"]
        assert trace.divergence is not None and trace.divergence["kind"] == "snapshot"
        assert any("ats" in line for line in trace.divergence["evidence"])
        # the trace replays: it diverges again on the mutant, and conforms on the real scripts
        assert main(["replay", str(path), "--url", url, "--scripts", str(broken)]) == 1
    assert main(["replay", str(path), "--url", url]) == 0
    assert "conforms" in capsys.readouterr().out


def test_a_known_difference_ends_later_examples_quietly(valkey: ServerProcess) -> None:
    """A run that reports every difference lists the mutant's once: once shrunk it is
    known, and a later example that meets it ends without failing (the machine base's
    signatures), however many examples meet it."""
    bull = layout("bullmq")
    with tempfile.TemporaryDirectory() as tmp:
        target = bull.open_target(f"{valkey.url}/{DB}", str(_mutant_dir(tmp)))
        try:
            report = run_check(target, PROFILES["dev"], seed=3, layout=bull)
        finally:
            target.close()
    found = [d.signature for d in [*report.differences, *report.unreproduced]]
    assert report.detail == "counterexample" and found, report.detail
    assert len(found) == len(set(found)), found
    assert report.examples >= PROFILES["dev"].examples  # the search went on past the difference


def test_audit_reads_the_layout_and_names_broken_invariants(valkey: ServerProcess,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    import redis

    from emq_live.layouts.bullmq import BullTarget

    url = f"{valkey.url}/{DB + 1}"
    client = redis.Redis.from_url(url)
    bull = BullTarget(client)
    bull.wipe()
    for _ in range(3):
        bull.add("", 1000)
    bull.take("a", 1000)
    assert main(["audit", url, "--layout", "bullmq"]) == 0
    assert "wait=2 " in capsys.readouterr().out
    bull.take("b", 1001)
    assert bull.complete("2", "0", 1002, "done") == 0  # F-2: the no-lock token leaves "b"'s lock behind
    keys = {k: client.dump(k) for k in client.keys("*")}
    assert main(["audit", url, "--layout", "bullmq"]) == 1
    out = capsys.readouterr().out
    assert "BQ-INV-4 lock on 2" in out and "1 violation(s)" in out
    assert {k: client.dump(k) for k in client.keys("*")} == keys  # read only
    bull.wipe()


@pytest.mark.parametrize("argv", [[], ["--queue", "q"], ["--batch", "10"], ["--keep", "0"]])
def test_audit_of_keys_not_the_layouts_is_refused_in_one_line(argv: list[str], valkey: ServerProcess,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """The bullmq layout's queue is ``emq:{q}:``, the prefix of a user's EchoMQ queue
    named ``q``: its audit meets a sorted set where it reads a job hash. One line naming
    the key, exit 2 (the deployment cannot be read as the layout), nothing changed —
    never the kit's own crash. ``--queue``, ``--batch`` and ``--keep`` are the echomq
    layout's: refused, not ignored."""
    import redis

    import emq_live

    url = f"{valkey.url}/{DB + 2}"
    client = redis.Redis.from_url(url)
    client.flushdb()
    with emq_live.connect(url) as conn:
        assert conn.queue("q").enqueue("JOB00000000001", b"a user's") == "enqueued"
    keys = {k: client.dump(k) for k in client.keys("*")}
    assert main(["audit", url, "--layout", "bullmq", *argv]) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "emq bug" not in err, err
    assert (argv[0] in lines[0]) if argv else ("emq:{q}:pending" in lines[0]), err
    assert {k: client.dump(k) for k in client.keys("*")} == keys
    client.flushdb()
    client.close()

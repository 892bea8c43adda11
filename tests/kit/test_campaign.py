"""Campaigns on Dask (specs/campaign.md): a plan's runs as tasks of a ``LocalCluster`` of
two worker processes, combined into one report (CMP-3, CMP-6); runs of one campaign on
one Valkey never meeting (OWN-1); a worker killed mid-run (the run retried, the report
says so) and a server out of reach (no verdict, CMP-4); the corpus a restarted campaign
replays first (CMP-7); the selftest's mutants on the cluster judged as serially; bad
input in one line, exit 2 (CMP-1, CMP-2, CMP-5)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Iterator

import pytest

from emq_kit import cli
from emq_kit._signals import Stopped
from emq_kit.campaign import cluster as dask_cluster
from emq_kit.campaign.campaign import run_campaign
from emq_kit.campaign.matrix import matrix
from emq_kit.campaign.plan import Plan, PlanTarget
from emq_kit.campaign.selftest import run_selftest_on
from emq_kit.campaign.tasks import EVENTS, STOPPED
from emq_kit.report.document import validate
from emq_kit.selftest.mutation import chosen_mutants, equivalents
from emq_kit.server import ServerProcess
from tests import unreadable
from tests.broken import broken_dir, variant
from tests.e2e.test_harm import one_line, run

LOCAL2 = dask_cluster.cluster_of("local:2")
SMALL = {"profiles": ("dev",), "examples": 25, "steps": 25}


def _keys(server: ServerProcess) -> list[bytes]:
    r = server.client()
    try:
        return sorted(r.keys("emq:*") + r.keys("{emq}:run:*"))
    finally:
        r.close()


@pytest.fixture
def own_valkey() -> Iterator[ServerProcess]:
    """A throwaway Valkey of one test's alone."""
    with ServerProcess("valkey-server") as server:
        yield server


def test_a_campaign_on_two_workers_combines_its_runs_and_a_restart_replays_its_corpus(
        own_valkey: ServerProcess, tmp_path: Path) -> None:
    """Four runs on two worker processes, all on one Valkey of its own ("nothing left" is judged
    on it, whatever other tests write to the shared one): the two runs of our scripts
    conform while the two of a broken copy run beside them (their queues never meet),
    the broken copy's difference is listed once with both runs that found it and its
    trace kept in the corpus, each run's report written and valid, nothing left on the
    server. A second campaign on that corpus replays its traces first and sees each fail
    again."""
    broken = broken_dir(variant("missing-del"), tmp_path)
    plan = Plan((PlanTarget("ours", url=own_valkey.url), PlanTarget("broken", url=own_valkey.url, scripts=str(broken))),
                seeds=(1, 2), **SMALL)
    doc = run_campaign(plan, LOCAL2, tmp_path / "one")
    validate(doc)
    body = doc["campaign"]
    assert [r["id"] for r in body["runs"]] == ["ours/dev/virtual/1", "ours/dev/virtual/2", "broken/dev/virtual/1",
                                                "broken/dev/virtual/2"]
    assert all(r["status"] == "verdict" and r["attempts"] == 1 for r in body["runs"]), body["runs"]
    assert {len({w for r in body["runs"] for w in r["workers"]})} == {2}  # both workers ran runs
    ours, theirs = body["runs"][:2], body["runs"][2:]
    assert [r["detail"] for r in ours] == ["no-divergence"] * 2 and not any(r["signatures"] for r in ours)
    assert all((r["verdict"], r["detail"]) == ("differs", "counterexample") for r in theirs)
    assert (doc["verdict"], doc["detail"], doc["exit"]) == ("differs", "counterexample", 1)
    shared = [d for d in body["differences"] if d["runs"] == ["broken/dev/virtual/1", "broken/dev/virtual/2"]]
    assert shared, body["differences"]  # one signature both broken runs found, listed once
    assert len({(d["signature"]["cell"], d["signature"]["rule"]) for d in body["differences"]}) == len(
        body["differences"])
    assert all(Path(d["trace"]).is_file() for d in body["differences"])
    for r in body["runs"]:
        validate(json.loads(Path(r["report"]).read_text("utf-8")))
    corpus = sorted((tmp_path / "one" / "corpus" / "broken").glob("*.json"))
    assert {Path(d["trace"]) for d in body["differences"]} <= set(corpus)
    assert not (tmp_path / "one" / "corpus" / "ours").exists()
    assert body["coverage"]["ours"]["reached"] > 0
    assert _keys(own_valkey) == []  # every run's names gone (OWN-5)
    columns = matrix([("campaign.json", doc)])
    assert [c["name"] for c in columns["columns"]] == ["ours", "broken"]
    for d in body["differences"]:
        row = next(r for r in columns["rows"] if r["name"] == d["signature"]["cell"])
        assert row["cells"][1]["state"] == "differs" and row["cells"][0]["state"] != "differs"

    again = Plan((PlanTarget("broken", url=own_valkey.url, scripts=str(broken)),), seeds=(3,), **SMALL)
    doc2 = run_campaign(again, LOCAL2, tmp_path / "two", corpus=tmp_path / "one" / "corpus")
    validate(doc2)
    (replayed,) = [r["replayed"] for r in doc2["campaign"]["runs"]]
    assert sorted(r["trace"] for r in replayed) == [str(p) for p in corpus]
    assert [r["verdict"] for r in replayed] == ["fails"] * len(corpus), replayed
    assert doc2["detail"] == "counterexample"


def _kill_first_worker(client: Any, killed: list[str]) -> threading.Thread:
    """A thread that SIGKILLs the worker process that starts the first run, as soon as
    the scheduler has its start event (the run then is in its check)."""
    def watch() -> None:
        while not killed:
            events = client.get_events(EVENTS)
            if events:
                address = events[0][1]["worker"]
                pid = client.run(os.getpid, workers=[address])[address]
                os.kill(pid, signal.SIGKILL)
                killed.append(address)
                return
            threading.Event().wait(0.02)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def test_a_worker_killed_mid_run_is_retried_and_a_lost_server_is_no_verdict(tmp_path: Path) -> None:
    """CMP-4: the run whose worker was SIGKILLed while it ran is started again by the
    scheduler on a worker and ends with its verdict, its two attempts and their workers
    listed; runs on a server nobody listens on end, after their retries, without a
    verdict and count in no result."""
    plan = Plan((PlanTarget("fake"), PlanTarget("gone", url="redis://127.0.0.1:1")), seeds=(1,), profiles=("dev",),
                examples=60, steps=40)
    killed: list[str] = []
    watchers: list[threading.Thread] = []
    doc = run_campaign(plan, LOCAL2, tmp_path / "out", retries=1,
                       connected=lambda client: watchers.append(_kill_first_worker(client, killed)))
    validate(doc)
    fake, gone = doc["campaign"]["runs"]
    assert killed, "no worker was killed"
    first = next(r for r in (fake, gone) if r["workers"][0] == killed[0])
    assert first["attempts"] >= 2 and first["workers"][0] == killed[0], first
    assert fake["status"] == "verdict" and fake["detail"] == "no-divergence", fake
    assert gone["status"] == "environment" and gone["verdict"] is gone["detail"] is None and gone["attempts"] >= 2, gone
    assert "127.0.0.1:1" in gone["error"]
    assert (doc["verdict"], doc["detail"], doc["exit"]) == ("inconclusive", "environment", 2)
    assert doc["figures"]["environment"] == 1 and doc["figures"]["judged"] == 1 and doc["figures"]["retried"] >= 1
    assert doc["campaign"]["differences"] == [] and list(doc["campaign"]["coverage"]) == ["fake"]


def test_a_server_never_reached_is_not_said_to_keep_keys(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """OWN-5: a campaign whose runs never reached their server, no worker lost, ends
    without the line of keys kept there for ``emq clean``: no worker wrote any."""
    plan = Plan((PlanTarget("gone", url="redis://127.0.0.1:1"),), seeds=(1,), profiles=("dev",), examples=5, steps=5)
    doc = run_campaign(plan, dask_cluster.cluster_of("local:1"), tmp_path / "out", retries=0)
    assert [r["status"] for r in doc["campaign"]["runs"]] == ["environment"]
    err = capfd.readouterr().err
    assert "could not remove" not in err and "emq clean" not in err, err


def test_a_campaign_of_dev_runs_alone_is_no_conformance_verdict(tmp_path: Path) -> None:
    """TR-18: a dev run meets no difference but gives no conformance verdict, so a
    campaign of dev runs alone is inconclusive (no-divergence, exit 0), never conforms."""
    plan = Plan((PlanTarget("fake"),), seeds=(1, 2), **SMALL)
    doc = run_campaign(plan, dask_cluster.cluster_of("local:1"), tmp_path / "out")
    assert [r["detail"] for r in doc["campaign"]["runs"]] == ["no-divergence"] * 2
    assert (doc["verdict"], doc["detail"], doc["exit"]) == ("inconclusive", "no-divergence", 0)


def test_the_selftest_on_two_workers_judges_the_serial_runs_mutants_alike(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``emq selftest --cluster local:2`` judges the same mutants as the serial run with
    the same seed, each with the same verdict and rule."""
    _judged_alike(["selftest", "--only", "drop-state-write|retry", "--budget", "60", "--seed", "3"], tmp_path, capsys)


def test_the_selftest_on_a_cluster_hands_out_the_equivalent_mutants_first() -> None:
    """CMP-9: on one worker the verdicts come back in the order the mutants were handed
    out, and the one shown equivalent (it runs its whole budget) goes out before the
    killed one listed ahead of it; the verdicts are still listed in the serial order."""
    only = "|claim|local reply"
    listed = [m.key for m in chosen_mutants(None, only)]
    known = equivalents()
    assert len(listed) >= 2 and listed[0] not in known and any(k in known for k in listed[1:])
    came: list[str] = []
    verdicts = run_selftest_on(dask_cluster.cluster_of("local:1"), None, 3.0, 0, only,
                               report=lambda k, n, v: came.append(v.mutant.key))
    assert came[0] in known and sorted(came) == sorted(listed)
    assert [v.mutant.key for v in verdicts] == listed


def _judged_alike(common: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    """The selftest ``common`` run serially, then on ``local:2``: the same exit, the same
    two mutants, each with the same verdict and rule; the cluster's verdicts."""
    code, _, _ = run([*common, "--report", str(tmp_path / "serial.json")], capsys)
    code2, _, _ = run([*common, "--cluster", "local:2", "--report", str(tmp_path / "cluster.json")], capsys)
    serial, spread = (json.loads((tmp_path / f"{n}.json").read_text())["selftest"]["mutants"]
                      for n in ("serial", "cluster"))
    assert code == code2 and len(serial) == 2
    assert [(m["key"], m["status"], m["rule"]) for m in serial] == [(m["key"], m["status"], m["rule"]) for m in spread]
    return list(spread)


def test_a_local_clusters_workers_keep_glibcs_own_trimming() -> None:
    """CMP-5: the workers of ``local:N`` run without the nanny's MALLOC_TRIM_THRESHOLD_,
    so a selftest child forked from one allocates as a child of the serial run does,
    and without the stack sampler; and they may start children."""
    import dask

    with dask_cluster.connected(dask_cluster.cluster_of("local:1")) as client:
        said = client.run(lambda: (os.environ.get("MALLOC_TRIM_THRESHOLD_"), os.environ.get("OMP_NUM_THREADS"),
                                   dask.config.get("distributed.worker.profile.enabled")))
    assert list(said.values()) == [(None, "1", False)], said


def _fails(stopped: bool) -> None:
    """A task that fails: stopped by its command (``Stopped``), or of its own error."""
    raise Stopped(STOPPED) if stopped else ValueError("an error of the task itself")


@pytest.mark.parametrize("debug", [False, True])
def test_a_local_clusters_worker_logs_no_failed_task_but_under_emq_debug(debug: bool, capfd: pytest.CaptureFixture[str],
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """INT-2, CMP-6a: a task the command stopped raises ``Stopped``, a run's environment
    fails, a task has an error of its own: its worker logged each as Dask logs any failed
    task, "Compute Failed" and its traceback, on the command's terminal, once per
    attempt. The command says each run's end itself; ``EMQ_DEBUG=1`` keeps Dask's lines."""
    if debug:
        monkeypatch.setenv("EMQ_DEBUG", "1")  # the workers started below inherit it
    with dask_cluster.connected(dask_cluster.cluster_of("local:1")) as client:
        for stopped, raised in ((True, Stopped), (False, ValueError)):
            with pytest.raises(raised):
                client.submit(_fails, stopped, pure=False).result()
    err = capfd.readouterr().err  # the workers write to the test's own stderr
    assert ("Compute Failed" in err and "an error of the task itself" in err and STOPPED in err) == debug, err
    assert debug or "Traceback" not in err, err


def test_bullmqs_mutants_on_two_workers_are_judged_as_serially(valkey: ServerProcess, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """``emq selftest --layout bullmq --cluster local:2`` judges BullMQ's mutants (the
    same ``--only`` choice) on the workers, each under a claim of its own on the one
    Valkey, with the serial run's verdict and rule."""
    spread = _judged_alike(["selftest", "--layout", "bullmq", "--url", f"{valkey.url}/14", "--only",
                            'moveToActive-11|rcall("HINCRBY", jobKey, "ats"', "--budget", "60", "--seed", "3"],
                           tmp_path, capsys)
    assert any(m["status"] == "killed" for m in spread), spread


@pytest.fixture
def kitless_worker(tmp_path: Path) -> Iterator[str]:
    """A dask scheduler and one worker whose Python cannot import the kit (no site
    packages' .pth files: the kit's editable install is one), the scheduler's address."""
    import sysconfig

    import distributed

    site = sysconfig.get_paths()["purelib"]
    env = {**os.environ, "PYTHONPATH": site, "DASK_DISTRIBUTED__WORKER__DAEMON": "False"}
    scheduler = subprocess.Popen([sys.executable, "-S", "-m", "distributed.cli.dask_scheduler", "--host",
                                  "127.0.0.1", "--port", "0", "--no-dashboard", "--scheduler-file",
                                  str(tmp_path / "s.json")], env=env, cwd=tmp_path, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
    procs = [scheduler]
    try:
        with distributed.Client(scheduler_file=str(tmp_path / "s.json"), timeout=60) as client:
            address = client.scheduler.address
            procs.append(subprocess.Popen([sys.executable, "-S", "-m", "distributed.cli.dask_worker", address,
                                           "--nthreads", "1", "--no-nanny", "--no-dashboard"], env=env, cwd=tmp_path,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            client.wait_for_workers(1, timeout=60)
        yield address
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_a_worker_without_the_kit_is_one_line(kitless_worker: str, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """CMP-5: a worker that cannot import the kit is named in one line, exit 2, before
    any run."""
    code, out, err = run(["campaign", "--cluster", kitless_worker, "--out", str(tmp_path / "o")], capsys)
    assert code == cli.EXIT_ENV and out == ""
    line = one_line(err)
    assert line.startswith("emq campaign: worker tcp://") and "emq[campaign]" in line, line
    assert not (tmp_path / "o" / "runs").exists()


@pytest.mark.parametrize("argv, says", [
    (["--cluster", "local:0"], "argument --cluster: the number of worker processes must be at least 1, got 0"),
    (["--cluster", "local:257"], "must be at most 256"),
    (["--cluster", "mars://x"], "give local:N"),
    (["--target", "ftp:x"], "give fakeredis, a server's URL"),
    (["--target", "fakeredis", "--clock", "server"], "run fakeredis/dev/server/0: --clock server needs a server"),
    (["--target", "a=fakeredis", "--target", "a=redis://127.0.0.1:1"], "lists the target 'a' twice"),
    (["--target", "../../escaped=fakeredis"], "the target name '../../escaped' does not match"),
    (["--target", "a/b=fakeredis"], "the target name 'a/b' does not match"),
    (["--seeds", "1,1"], "lists the seed 1 twice"),
    (["--seeds", "18446744073709551616"], "must be at most"),
    (["--report", "/nonexistent/dir/r.json"], "the report"),
    (["--cluster", "tcp://127.0.0.1:1"], "no Dask scheduler answers at tcp://127.0.0.1:1"),
])
def test_bad_input_is_one_line_exit_2_before_any_run(argv: list[str], says: str, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dask_cluster, "CONNECT_SECONDS", 2.0)
    code, out, err = run(["campaign", "--out", str(tmp_path / "o"), *argv], capsys)
    assert code == cli.EXIT_ENV and out == "", err
    assert says in one_line(err)
    assert not (tmp_path / "o" / "runs").exists()


@pytest.mark.parametrize("says, banner", [("it said nothing within 2 s", b""),
                                           ("its first bytes are no Dask handshake", b"SSH-2.0-OpenSSH_9.2\r\n")])
def test_a_service_that_is_no_scheduler_is_one_line(says: str, banner: bytes, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """CMP-5: ``--cluster tcp://`` naming a port where another service answers (one that
    waits for a request, as Valkey does, or speaks a banner) is one line, exit 2, within
    the connect bound: Dask's own client waited on it without end."""
    import socket

    monkeypatch.setattr(dask_cluster, "CONNECT_SECONDS", 2.0)
    with socket.create_server(("127.0.0.1", 0)) as listener:
        def serve() -> None:
            with contextlib.suppress(OSError):
                conn, _ = listener.accept()
                with conn:
                    conn.sendall(banner)
                    conn.recv(1)  # held open until the kit lets go

        threading.Thread(target=serve, daemon=True).start()
        port = listener.getsockname()[1]
        code, out, err = run(["campaign", "--cluster", f"tcp://127.0.0.1:{port}", "--out", str(tmp_path / "o")],
                             capsys)
    assert code == cli.EXIT_ENV and out == ""
    line = one_line(err)
    assert f"tcp://127.0.0.1:{port} answers, but not as a Dask scheduler: {says}" in line, line
    assert not (tmp_path / "o" / "runs").exists()


@pytest.mark.parametrize("place", ["runs/fakeredis", "corpus/fakeredis"])
def test_a_file_where_a_targets_directory_goes_is_one_line_before_any_run(place: str, tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """CMP-1, OUT-1: a file where a target's reports or corpus go is refused before the
    cluster is asked for anything (it was ``emq bug: FileExistsError``, after other
    targets' runs had run)."""
    blocker = tmp_path / "o" / place
    blocker.parent.mkdir(parents=True)
    blocker.write_text("x")
    code, out, err = run(["campaign", "--out", str(tmp_path / "o"), "--cluster", "local:1"], capsys)
    assert code == cli.EXIT_ENV and out == "", err
    line = one_line(err)
    assert str(blocker) in line and "emq bug" not in line, line
    assert sorted(p.relative_to(tmp_path / "o").as_posix() for p in (tmp_path / "o").rglob("*")) == \
        sorted({place, place.split("/")[0]}), "something ran"


@pytest.mark.parametrize("argv, says", [
    ([], "the server's Lua has no cmsgpack"),
    (["--url", "redis://127.0.0.1:1"], "cannot open a queue connection to redis://127.0.0.1:1"),
])
def test_bullmqs_selftest_on_a_cluster_without_a_fit_server_is_one_line(argv: list[str], says: str,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """``--layout bullmq --cluster``: the server is checked as serially, before the
    cluster is asked for anything: one line, exit 2."""
    code, out, err = run(["selftest", "--layout", "bullmq", "--cluster", "local:2", *argv], capsys)
    assert code == cli.EXIT_ENV and out == "", err
    assert says in one_line(err)


@pytest.mark.parametrize("text, says", [
    ("targets = [", "is not TOML"),
    ("[[targets]]\nname = 'x'\nurl = 'redis://h'\nspeed = 3\n", "at targets/0: Additional properties"),
    ("seeds = [1]\n", "at (top): 'targets' is a required property"),
    ("[[targets]]\nname = 'x'\nseeds = [-1]\n", "at targets/0"),
    ("seeds = [-1]\n[[targets]]\nname = 'x'\n", "at seeds/0: -1 is less than the minimum of 0"),
    ("seeds = [1, 1]\n[[targets]]\nname = 'x'\n", "at seeds: [1, 1] has non-unique elements"),
    ("profiles = ['nightly']\n[[targets]]\nname = 'x'\n", "run x/nightly/virtual/0: argument --profile: invalid"),
    ("[[targets]]\nname = 'x'\nlayout = 'bullmq'\n", "run x/dev/virtual/0: bullmq layout: the server's Lua has no"),
    ("[[targets]]\nname = 'x'\nurl = 'redis://h:1/abc'\n", "target x: redis://h:1/abc: the path '/abc' names no database"),
    *unreadable.KINDS.items(),  # refused before a byte is read (TR-9c)
])
def test_a_malformed_plan_is_one_line_naming_where(text: str, says: str, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    plan = unreadable.write(tmp_path / "plan.toml", text)
    code, out, err = run(["campaign", str(plan), "--out", str(tmp_path / "o")], capsys)
    assert code == cli.EXIT_ENV and out == ""
    line = one_line(err)
    assert says in line and (str(plan) in line or line.startswith(("emq campaign: run ", "emq campaign: target "))), line

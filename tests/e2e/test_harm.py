"""The hostile catalogue: the kit harms nothing it does not own.

One test per item of specs/ownership.md (and of the rules beside it), each on fakeredis,
Valkey and through a driver where the item applies. Sections, each its own: ownership
(OWN-*), bounds (BD-*), outputs first (OUT-*), secrets (SEC-*, specs/safety.md), traces are
data (TR-9*, specs/trace.md), interrupts (INT-*, specs/safety.md).
"""

from __future__ import annotations

import ast
import base64
import contextlib
import gc
import json
import os
import pty
import re
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from emq_kit import bounds, cli, interrupts, redaction
from emq_kit.check.live import LiveTarget
from emq_kit.check.names import Names, vocabulary
from emq_kit.claim import ONE_BYTE, RUN, Claim, clean
from emq_kit.errors import KitBug
from emq_kit.server import ServerProcess
from emq_kit.trace import validate
from emq_kit.trace.format import Trace
from emq_model import spec
from tests import unreadable
from tests.broken import broken_dir, variant
from tests.kit.processes import faulty, kit_lines
from tests.shown import block

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "corpus"
EMQ = Path(sys.executable).with_name("emq")  # the console script, as a user runs it


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``emq ARGV`` in this process: its exit code (argparse's too), stdout, stderr."""
    try:
        code = cli.main(argv)
    except SystemExit as exc:  # argparse's own refusals
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


@contextlib.contextmanager
def interrupted_at_the_end(proc: subprocess.Popen[str]) -> Iterator[None]:
    """Ctrl-C (SIGINT to its process group, as a terminal sends it) to ``proc`` once the
    block is done, waiting for it to end; SIGKILLed if the block fails or it outlives that."""
    try:
        yield
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


@pytest.fixture(scope="module")
def private() -> Iterator[ServerProcess]:
    """A Valkey of this module's own: what a command leaves on it is all there is."""
    with ServerProcess() as server:
        yield server


@pytest.fixture
def empty(private: ServerProcess) -> Iterator[ServerProcess]:
    with private.client() as r:
        r.flushall()
    yield private


# -- ownership (OWN-1..8) --------------------------------------------------------------------

USER = tuple(n for n in (*vocabulary(), "emq-bench", "soak", "q", "a", "Z") if n)
"""A user's queues under every name a command of the kit may send (the machine's, the raw
and hostile calls', the bench's, the soak's, the bullmq layout's) and a few one-byte
names; the empty name is the one refused instead (``test_keys_under_a_name_the_run...``)."""
JOB = "JOB00000000001"


def fill(r: Any) -> None:
    """The user's data: under each name of ``USER`` a pending set, a row, a plain key and
    one with a TTL; beside them keys of other applications, one in the kit's own slot."""
    pipe = r.pipeline(transaction=False)
    for name in (n.encode("utf-8", "surrogatepass") for n in USER):
        head = b"emq:{" + name + b"}:"
        pipe.zadd(head + b"pending", {JOB: 0})
        pipe.hset(head + b"job:" + JOB.encode(), mapping={"state": "pending", "payload": "the user's"})
        pipe.set(head + b"kept", "precious")
        pipe.set(head + b"fleeting", "precious", px=10**9)
    pipe.set("other-app:key", "x")
    pipe.set("{emq}:theirs", "a key in the kit's slot, not the kit's")
    pipe.set(RUN + "not-a-record", "a key under the kit's record prefix that is no record")
    pipe.execute()


def image(r: Any) -> dict[bytes, tuple[bytes, int]]:
    """Every key of the server with its DUMP and PTTL."""
    keys = sorted(r.scan_iter(count=1000))
    pipe = r.pipeline(transaction=False)
    for key in keys:
        pipe.dump(key)
        pipe.pttl(key)
    flat = pipe.execute()
    return {k: (flat[2 * i], flat[2 * i + 1]) for i, k in enumerate(keys)}


def assert_intact(before: dict[bytes, tuple[bytes, int]], after: dict[bytes, tuple[bytes, int]], what: str) -> None:
    """The server holds exactly the user's keys, each byte for byte (DUMP) with its expiry
    (a TTL only ever runs down): nothing deleted, overwritten or left behind."""
    assert sorted(after) == sorted(before), f"{what}: gone {sorted(set(before) - set(after))[:5]}, " \
                                            f"left {sorted(set(after) - set(before))[:5]}"
    for key, (dump, ttl) in before.items():
        now_dump, now_ttl = after[key]
        assert now_dump == dump, f"{what}: {key!r} changed"
        assert (now_ttl == ttl == -1) or (0 < now_ttl <= ttl), f"{what}: {key!r} expiry {ttl} -> {now_ttl}"


@pytest.fixture
def server() -> Iterator[ServerProcess]:
    """A Valkey of the test's own, holding the user's data (and no ``{emq}:version``: a
    kit that writes one must remove it)."""
    with ServerProcess() as s:
        with s.client() as r:
            fill(r)
        yield s


BENCH = ["--repeat", "1", "--examples", "2", "--steps", "5", "--depth", "1500", "--depth-examples", "1",
         "--jobs", "200", "--single-jobs", "30", "--batch", "20", "--sizes", "10,100", "--lanes", "3,30",
         "--fakeredis-sizes", "10,40", "--probes", "5", "--audit-jobs", "30", "--shrink-mutants", "1",
         "--shrink-budget", "10", "--coverage-seeds", "0"]
"""A small ``emq bench`` whose every part runs: two sizes of each scale, the deep run
filling 1,500 jobs a queue (its keys past one page of the SCAN that cleans a run up,
OWN-5), not the 10,000 of the depth figure's default."""


def _quick(url: str) -> list[str]:
    return ["--url", url, "--profile", "dev", "--examples", "5", "--steps", "20", "--seed", "3"]


def _commands(url: str, tmp: Path) -> dict[str, list[str]]:
    """Every command that writes to a server, each ending a way it can end."""
    broken = str(tmp / "broken")
    trace = str(CORPUS / "retry-two-sets.json")
    live = f"{EMQ} driver --live"
    return {
        # ci, cut short: the raw sweep (every edge and bad name), then an unreached cell: exit 1
        "check ci": ["check", "--url", url, "--examples", "2", "--steps", "5", "--seed", "3"],
        "check difference": ["check", *_quick(url), "--scripts", broken, "--traces", str(tmp / "t")],
        "check given names": ["check", *_quick(url), "--queue", "mine", "--queue", "mine-too"],
        "check server clock": ["check", *_quick(url), "--clock", "server"],
        "check driver": ["check", *_quick(url), "--driver", live],
        "check bullmq": ["check", *_quick(url), "--layout", "bullmq"],
        "selftest": ["selftest", "--url", url, "--only", "complete", "--budget", "3"],
        "soak": ["soak", "--url", url, "--workers", "2", "--jobs", "60", "--seconds", "20"],
        "bench": ["bench", "--url", url, *BENCH],
        "replay": ["replay", trace, "--url", url, "--scripts", str(ROOT / "emq_live" / "lua")],  # its code given
        "replay driver": ["replay", trace, "--url", url, "--driver", live],
        "audit": ["audit", url, "--quiet"],
    }


@pytest.mark.parametrize("command", list(_commands("", Path())))
def test_a_command_writes_only_its_own_names_and_leaves_nothing(command: str, server: ServerProcess, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """OWN-1, OWN-2, OWN-5, OWN-7: on a server holding a user's queues under every name
    the kit may send, each command (conforming, finding a difference, through a driver,
    under --queue names, the bullmq layout...) runs, and after it ends the server holds
    the user's keys byte for byte and nothing of the kit's — no queue, no record, no
    ``{emq}:version`` it wrote."""
    with server.client() as r:
        before = image(r)
        broken_dir(variant("state-not-written"), tmp_path).rename(tmp_path / "broken")
        argv = _commands(server.url, tmp_path)[command]
        code, out, err = run(argv, capsys)
        assert code in (cli.EXIT_OK, cli.EXIT_FAIL), f"{argv}: {err[-2000:]}"
        assert_intact(before, image(r), command)


def test_the_pytest_plugin_leaves_nothing(server: ServerProcess, tmp_path: Path) -> None:
    """OWN-1 for ``pytest --emq``: its check item and its trace items run on the server
    through the command line, and leave it as they found it."""
    traces = tmp_path / "traces"
    traces.mkdir()
    (traces / "stored.json").write_text((CORPUS / "retry-two-sets.json").read_text())
    with server.client() as r:
        before = image(r)
        # the code under test given (a copy of the built-in scripts): the stored trace ran other code (TR-9)
        done = subprocess.run([sys.executable, "-m", "pytest", "--emq", "--emq-url", server.url, "--emq-scripts",
                               str(ROOT / "emq_live" / "lua"), "--emq-profile", "dev", "--emq-seed", "3",
                               "--emq-traces", str(traces), "-q", "-p", "no:cacheprovider"],
                              capture_output=True, text=True, cwd=tmp_path, timeout=300)
        assert "2 passed" in done.stdout, done.stdout[-2000:] + done.stderr[-2000:]
        assert_intact(before, image(r), "pytest --emq")


def test_keys_under_a_name_the_run_would_write_are_refused_unless_wiped(server: ServerProcess,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """OWN-3: the empty queue name carries no suffix (the raw calls' refused name, only a
    broken implementation writes under it): keys there are refused before any write,
    one line naming them and ``--wipe``; with ``--wipe`` the run deletes them, and
    leaves the rest as it found it."""
    with server.client() as r:
        r.set("emq:{}:x", "theirs")
        before = image(r)
        for argv in (["check", *_quick(server.url)], ["selftest", "--url", server.url, "--only", "complete"],
                     ["replay", str(CORPUS / "retry-two-sets.json"), "--url", server.url, "--scripts",
                      str(ROOT / "emq_live" / "lua")]):
            code, out, err = run(argv, capsys)
            line = one_line(err)
            assert code == cli.EXIT_ENV and out == "" and "'emq:{}:x'" in line and "--wipe" in line, err
            assert_intact(before, image(r), f"{argv[0]}, refused")  # before any write: not even a record
        code, out, err = run(["check", *_quick(server.url), "--wipe"], capsys)
        assert code == cli.EXIT_OK, err
        del before[b"emq:{}:x"]
        assert_intact(before, image(r), "check --wipe")


@pytest.mark.parametrize("command", ["check bullmq", "check ci"])
def test_a_run_takes_no_glob_character_for_its_one_byte_name(command: str, server: ServerProcess, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """OWN-2: the run's one-byte name, its only name without the suffix, is never a glob's
    special character (a target that wipes its queue by an unescaped glob would, given
    ``*``, wipe the user's). With every other printable one-byte name held by a user's
    key, the run is refused in one line and writes nothing."""
    with server.client() as r:
        for b in range(0x21, 0x7F):
            if chr(b) not in "{}*?[]\\":
                r.set(b"emq:{" + bytes([b]) + b"}:kept", "precious")
        before = image(r)
        code, out, err = run(_commands(server.url, tmp_path)[command], capsys)
        assert code == cli.EXIT_ENV and "every one-byte queue name" in one_line(err), err
        assert_intact(before, image(r), command)


def test_every_one_byte_name_a_run_may_draw_reaches_its_own_keys_only(server: ServerProcess) -> None:
    """OWN-2, OWN-5, OWN-6 for every value of the one random choice that names a queue: a
    run draws its one-byte name among the free ones of ``ONE_BYTE`` (seeded by its random
    suffix), so a test of one run covers one candidate. For each candidate, on a server
    holding a user's keys under every other one-byte name and every name of ``USER``:
    the run takes it, ``Names.key``/``owns``/``scan`` agree on its keys, its queue's wipe
    (LiveTarget's reset), its release and ``emq clean`` of a dead run under it delete
    its keys and nothing else."""
    logical = ("alpha", "q")  # a machine queue, suffixed, and the bullmq layout's one-byte one
    with server.client() as r:
        for c in ONE_BYTE:
            r.set(b"emq:{" + c.encode() + b"}:kept", "precious")
        start = image(r)
        target = LiveTarget(server.url, fence=False)  # closed without its close: that wipes what it used
        try:
            for c in ONE_BYTE:
                head = b"emq:{" + c.encode() + b"}:"
                saved = {k: v for k, v in image(r).items() if k.startswith(head)}
                r.delete(*saved)  # the candidate is the one free name: the draw must take it
                before = image(r)
                with Claim(server.url, logical, command="emq check", say=lambda line: None) as names:
                    assert names.one_byte == c and names.key(b"emq:{q}:job:" + JOB.encode()) == head + b"job:" + JOB.encode()
                    assert not any(names.owns(k) for k in before)
                    written = _write_under(r, names)
                    assert set(names.scan(r)) == written and all(names.owns(k) for k in written)
                    target.reset()
                    target.queue(c)  # a reset's wipe of the run's one-byte queue
                    assert set(names.scan(r)) == written - {k for k in written if k.startswith(head)}
                assert_intact(before, image(r), f"the release of a run named {c!r}")
                dead = Names("deadbeef", logical, one_byte=c)  # a SIGKILLed run's record: no lease
                r.set(RUN + dead.suffix, json.dumps({"id": dead.suffix, "pid": 0, "names": dead.to_json()}))
                _write_under(r, dead)
                assert clean(r).keys == 2 * 3
                assert_intact(before, image(r), f"emq clean of a dead run named {c!r}")
                for key, (dump, ttl) in saved.items():
                    r.restore(key, max(ttl, 0), dump)
        finally:
            target.conn.close()
        assert_intact(start, image(r), "every one-byte name drawn in turn")


def _write_under(r: Any, names: Names) -> set[bytes]:
    """A pending set, a row and a stray key under each of the run's two server names."""
    written: set[bytes] = set()
    for logical in ("alpha", "q"):
        head = b"emq:{" + str(names.server(logical)).encode() + b"}:"
        r.zadd(head + b"pending", {JOB: 0})
        r.hset(head + b"job:" + JOB.encode(), "state", "pending")
        r.set(head + b"stray", "the run's")
        written |= {head + b"pending", head + b"job:" + JOB.encode(), head + b"stray"}
    return written


def _wait(what: str, holds: Callable[[], bool], proc: subprocess.Popen[str], seconds: float = 60) -> None:
    """Until ``holds()``, while ``proc`` runs (a bounded wait for a condition, no sleep
    standing in for it)."""
    deadline = time.monotonic() + seconds
    while not holds():
        assert proc.poll() is None, f"the run ended before {what}: {proc.communicate()}"
        assert time.monotonic() < deadline, f"no {what} within {seconds} s"
        time.sleep(0.05)


def _stopped_holding_queues(r: Any, before: dict[bytes, Any], proc: subprocess.Popen[str]) -> list[int]:
    """The run stopped, then its drivers (found once it is stopped: a run opens a driver
    per phase, so one found earlier may have closed, and a later one not yet exist), at a
    moment its queues are on the server: stopped between two examples (the queues just
    wiped), they are let go on until the queues are back, and stopped again. The drivers'
    pids."""
    for _ in range(20):
        os.kill(proc.pid, signal.SIGSTOP)
        drivers = _descendants(proc.pid)  # a driver runs in a session of its own (DP-18)
        for pid in drivers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
        if any(k.startswith(b"emq:{") for k in _leftovers(r, before)):
            return drivers
        for pid in (*drivers, proc.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        _wait("queue keys of the run", lambda: any(k.startswith(b"emq:{") for k in _leftovers(r, before)), proc)
    raise AssertionError("the run and its drivers were never stopped with its queues on the server")


def _records(r: Any) -> list[bytes]:
    return [k for k in r.scan_iter(match=RUN + "*") if k.count(b":") == 2 and not k.endswith(b"not-a-record")]


SHOWN_URL = "redis://127.0.0.1:6399"
"""The server docs/server.md's ``emq clean`` example names."""


def _as_shown(line: str, url: str) -> str:
    """``emq clean``'s line with what differs between runs masked: the keys a killed run
    had written, its pid and suffix."""
    line = line.replace(url, "URL")
    return re.sub(r"\d+ keys", "N keys", re.sub(r"pid \d+, suffix [0-9a-f]+", "pid P, suffix S", line))


def _leftovers(r: Any, before: dict[bytes, Any]) -> set[bytes]:
    return {k for k in r.scan_iter(count=1000) if k not in before}


@pytest.mark.parametrize("how", ["check", "check driver"])
def test_a_killed_run_is_cleaned_by_emq_clean_and_by_the_next_run_but_a_live_one_is_not(
        how: str, server: ServerProcess, capsys: pytest.CaptureFixture[str]) -> None:
    """OWN-4, OWN-6: a run marks its keys with a record and a lease. While it lives,
    ``emq clean`` leaves it alone; SIGKILLed, its queues stay on the server until ``emq
    clean`` (or the next run's start) removes them, saying so in one line, and only them."""
    argv = {"check": ["check", "--url", server.url, "--profile", "thorough", "--seed", "5"],
            "check driver": ["check", "--url", server.url, "--profile", "thorough", "--seed", "5",
                             "--driver", f"{EMQ} driver --live"],
            }[how]
    with server.client() as r:
        before = image(r)
        for cleaner in (["clean", "--url", server.url], ["check", *_quick(server.url)]):
            proc = subprocess.Popen([str(EMQ), *argv], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            drivers: list[int] = []
            try:
                _wait("a record and queue keys of the run", lambda: bool(_records(r)) and
                      len(_leftovers(r, before)) > 4, proc)
                code, out, err = run(["clean", "--url", server.url], capsys)
                assert code == cli.EXIT_OK and "no leftovers of dead runs" in out and "(1 live run)" in out, out
                assert _records(r), "emq clean removed a live run's record"
                # A driver left alive cleans its queues when its input ends (its own close);
                # stopped first, it stands for a crash of the whole machine, which leaves them.
                drivers = _stopped_holding_queues(r, before, proc)
                assert drivers or how == "check", "no driver process under the run"
                proc.send_signal(signal.SIGKILL)
                proc.wait(timeout=30)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
                for pid in drivers:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
            left = _leftovers(r, before)
            assert any(k.startswith(b"emq:{") for k in left) and _records(r), left
            code, out, err = run(cleaner, capsys)
            said = out if cleaner[0] == "clean" else err
            assert "removed the leftovers of 1 dead run" in said and f"pid {proc.pid}" in said, out + err
            if cleaner[0] == "clean":  # as docs/server.md shows it
                assert _as_shown(said.strip(), server.url) == _as_shown(block("clean").output[0], SHOWN_URL)
            assert_intact(before, image(r), f"{how}, then {cleaner[0]}")


FOREIGN_RECORDS = {
    "one-byte": {"id": "x1", "names": {"suffix": "x1", "logical": ["z"]}},
    "brace": {"id": "x2", "names": {"suffix": "x2", "logical": ["a}:b"]}},
    "pid": {"id": "x3", "names": {"suffix": "x3", "logical": ["alpha"]}, "pid": "abc"},
    "list": ["not", "a", "record"],
}
"""Run records no run of the kit writes (by hand, by another version): names it cannot
map, a pid that is no number (on this host, under a lease), a record of another shape."""


def test_a_record_no_run_of_the_kit_wrote_is_left_alone_and_blocks_nothing(
        server: ServerProcess, capsys: pytest.CaptureFixture[str]) -> None:
    """OWN-6: a run record the kit cannot read is not its to judge: ``emq clean`` and a
    run's start leave it (and its lease) untouched and go on (it was ``emq bug``, exit 2,
    for every run on the server)."""
    from emq_kit.claim import LIVE, host

    with server.client() as r:
        for n, (name, doc) in enumerate(FOREIGN_RECORDS.items()):
            key = f"{RUN}ffff000{n}"
            r.set(key, json.dumps({**doc, "host": host()} if isinstance(doc, dict) else doc))
            r.set(key + LIVE, "1")
        before = image(r)
        code, out, err = run(["clean", "--url", server.url], capsys)
        assert code == cli.EXIT_OK and "no leftovers of dead runs" in out, out + err
        code, out, err = run(["check", *_quick(server.url)], capsys)
        assert code == cli.EXIT_OK and "emq bug" not in err, out + err
        assert_intact(before, image(r), "a foreign record")


def test_a_live_runs_queue_names_are_refused_to_another_run(server: ServerProcess, ctrl_c: None,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """OWN-3: ``--queue`` names a live run's record lists are that run's, even between
    its examples, when they hold no key: another run naming them is refused, ``--wipe``
    or not, and the live run goes on undisturbed."""
    mine = ["--queue", "mine", "--queue", "mine-too"]
    with server.client() as r:
        before = image(r)
        proc = subprocess.Popen([str(EMQ), "check", "--url", server.url, "--profile", "thorough", *mine],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
        with interrupted_at_the_end(proc):
            _wait("the run's record", lambda: bool(_records(r)), proc)
            for wipe in ([], ["--wipe"]):
                code, out, err = run(["check", *_quick(server.url), *mine, *wipe], capsys)
                assert code == cli.EXIT_ENV and "is a live run's" in one_line(err) and f"pid {proc.pid}" in err
        assert_intact(before, image(r), "a live run's names refused")


class Planted(RuntimeError):
    """An exception of the kit's own, planted mid-run."""


@pytest.mark.parametrize("where", ["progress", "step"])
def test_a_run_that_crashes_in_the_kit_leaves_nothing(where: str, server: ServerProcess,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """OWN-5: an exception of the kit mid-run — the caller's progress callback at an
    example's start, or the kit's own code inside a step while the run's queues hold keys —
    is one ``emq bug`` line and no verdict, however Hypothesis replays the example (the
    planted fault happens once), and the server holds what it held."""
    from emq_kit.check import coverage
    from emq_kit.cli import check

    planted: list[int] = []

    class Crashing(check.CheckProgress):
        def __call__(self, run: Any) -> None:
            if run.examples == 2 and not planted:
                planted.append(run.examples)
                raise Planted("planted")
            super().__call__(run)

    add = coverage.Coverage.add

    def crashing_add(self: coverage.Coverage, op: str, outcome: str) -> None:
        if not planted and op == "enqueue":
            with server.client() as r:
                if any(k.startswith(b"emq:{alpha-") for k in r.scan_iter(match="emq:*")):  # mid-run
                    planted.append(1)
                    raise Planted("planted")
        add(self, op, outcome)

    if where == "progress":
        monkeypatch.setattr(check, "CheckProgress", Crashing)
    else:
        monkeypatch.setattr(coverage.Coverage, "add", crashing_add)
    with server.client() as r:
        before = image(r)
        code, out, err = run(["check", *_quick(server.url)], capsys)
        assert planted, "the planted fault never ran"
        assert code == cli.EXIT_ENV and out == "", err  # the kit's failure: no verdict
        assert [line for line in kit_lines(err) if line.strip()] == [
            f"emq check: emq bug{' in the progress callback' * (where == 'progress')}: Planted: planted "
            f"({KitBug.REPORT})"], err
        assert_intact(before, image(r), "a crash of the kit")


@pytest.mark.parametrize("command", ["check", "check driver", "selftest", "soak"])
def test_an_interrupted_run_leaves_nothing(command: str, server: ServerProcess, ctrl_c: None) -> None:
    """OWN-5: Ctrl-C (SIGINT to the command's process group, as a terminal sends it) once
    the run's queues hold keys: however the command then ends, the server holds what it
    held."""
    argv = {"check": ["check", "--url", server.url, "--profile", "thorough", "--seed", "5"],
            "check driver": ["check", "--url", server.url, "--profile", "thorough", "--seed", "5",
                             "--driver", f"{EMQ} driver --live"],
            "selftest": ["selftest", "--url", server.url, "--budget", "60"],
            "soak": ["soak", "--url", server.url, "--workers", "4", "--jobs", "100000", "--seconds", "60"]}[command]
    with server.client() as r:
        before = image(r)
        proc = subprocess.Popen([str(EMQ), *argv], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        with interrupted_at_the_end(proc):
            _wait("queue keys of the run", lambda: len(_leftovers(r, before)) > 4, proc)
        assert_intact(before, image(r), f"{command}, interrupted")


def test_a_terminated_run_leaves_nothing(server: ServerProcess, ctrl_c: None) -> None:
    """OWN-5, INT-1: SIGTERM to the command alone (what ``timeout``, a CI job's time limit
    and ``docker stop`` send) once its queues hold keys ends it as Ctrl-C does: exit 130,
    ``interrupted`` with its seed, the server as it was (SIGTERM's default ended it at
    once, its queues left for ``emq clean``)."""
    argv = ["check", "--url", server.url, "--profile", "thorough", "--seed", "5", "--depth", "300"]
    with server.client() as r:
        before = image(r)
        proc = subprocess.Popen([str(EMQ), *argv], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        try:
            _wait("queue keys of the run", lambda: len(_leftovers(r, before)) > 4, proc)
            proc.terminate()
            _, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert proc.returncode == 130 and "emq check: interrupted; seed 5" in err, err
        assert "Traceback" not in err
        assert_intact(before, image(r), "check, terminated")


def test_two_runs_on_one_server_never_meet(server: ServerProcess) -> None:
    """OWN-2: two runs at once on one server, the raw calls' one-byte edge included, each
    under names of its own: both conform, and the server holds what it held."""
    with server.client() as r:
        before = image(r)
        argv = [str(EMQ), "check", "--url", server.url, "--profile", "dev", "--examples", "40", "--hostile", "only"]
        procs = [subprocess.Popen([*argv, "--seed", str(seed)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True) for seed in (1, 2)]
        outs = [p.communicate(timeout=300) for p in procs]
        for p, (out, err) in zip(procs, outs):
            assert p.returncode == cli.EXIT_OK and "no divergence" in out, out + err
        suffixes = [out.split("alpha as 'alpha-")[1][:8] for out, _ in outs]
        assert suffixes[0] != suffixes[1]
        assert_intact(before, image(r), "two runs at once")


# -- bounds (BD-1) -------------------------------------------------------------------------


def _argv(option: str, value: str) -> list[str]:
    command, flag = option.split()
    given = {"audit": ["redis://127.0.0.1:1"], "replay": ["a-trace.json"]}.get(command, [])  # its positional
    return [command, *given, flag, value]


def _above(b: bounds.Bound) -> str:
    return str(b.high + 1) if b.kind == "integer" else repr(float(b.high) * 2)


@pytest.mark.parametrize("option", [o for o in bounds.BOUNDS if not o.startswith("pytest ")])
def test_every_numeric_option_has_a_documented_upper_bound_refused_in_one_line(
        option: str, capsys: pytest.CaptureFixture[str]) -> None:
    """BD-1: each numeric option's ``--help`` prints its range, and one above the upper
    bound (10^23 examples too) is refused in one line, exit 2, before any work; the bound
    itself is accepted. docs/commands.md's table gives the same ranges."""
    b = bounds.bound(option)
    command, flag = option.split()
    code, out, err = run([command, "--help"], capsys)
    assert code == 0 and b.text() in " ".join(out.split()), f"{option}: {b.text()} not in --help"
    for value in (_above(b), *(["10" + "0" * 23] if b.kind == "integer" else ["inf", "nan"])):
        code, out, err = run(_argv(option, value), capsys)
        assert code == cli.EXIT_ENV and out == "", (option, value, out)
        assert f"argument {flag}: must be" in one_line(err), err
    parser = cli.parser()
    at = str(int(b.high)) if b.kind == "integer" else str(b.high)
    namespace = parser.parse_args(_argv(option, at))
    assert getattr(namespace, flag[2:].replace("-", "_")) in (b.high, (b.high,))
    table = (ROOT / "docs" / "commands.md").read_text("utf-8")
    assert f"| `emq {option}` | {b.text()} |" in table, f"docs/commands.md's bounds table lacks {option}"


def test_the_pytest_plugins_seed_is_bounded_too(tmp_path: Path) -> None:
    """BD-1 for ``pytest --emq-seed``: pytest's own parser refuses it, exit 4 (usage)."""
    b = bounds.bound("pytest --emq-seed")
    done = subprocess.run([sys.executable, "-m", "pytest", "--emq", "--emq-seed",
                           str(b.high + 1), "--co", "-q", str(tmp_path)], capture_output=True, text=True, cwd=tmp_path,
                          timeout=60)
    assert done.returncode == 4 and "must be at most" in done.stderr, done.stdout + done.stderr
    table = (ROOT / "docs" / "commands.md").read_text("utf-8")
    assert f"| `pytest --emq-seed` | {b.text()} |" in table


# -- outputs first (OUT-1) --------------------------------------------------------------------

BAD_PATHS = ("/proc/nope/out", "{file}/under-a-file", "{dir}", "{dangling}", "{loop}", "")
"""A directory that cannot be created, a path under a file, (for a file) a directory, a
symbolic link to a path in no directory, one of two links that lead to each other, and
an empty path (which ``Path`` reads as the current directory)."""


def _outputs(url: str) -> list[tuple[list[str], str, str]]:
    """(argv, flag, what) of every output path of every command; the command reaches the
    server ``url`` if it ran at all."""
    trace = str(CORPUS / "retry-two-sets.json")
    return [
        (["check", "--url", url, "--profile", "dev"], "--report", "the report"),
        (["check", "--url", url, "--profile", "dev"], "--html", "the HTML page"),
        (["check", "--url", url, "--profile", "dev"], "--traces", "traces"),
        (["check", "--url", url, "--profile", "dev"], "--write-expect", "the expectations"),
        (["check", "--url", url, "--profile", "dev"], "--summary", "the summary"),
        (["replay", trace, "--url", url], "--report", "the report"),
        (["replay", trace, "--url", url], "--html", "the HTML page"),
        (["replay", trace, "--url", url], "--pytest", ""),
        (["selftest", "--url", url, "--only", "enqueue"], "--report", "the report"),
        (["selftest", "--url", url, "--only", "enqueue"], "--json", "the report"),
        (["soak", "--url", url, "--seconds", "1"], "--report", "the report"),
        (["soak", "--url", url, "--seconds", "1"], "--html", "the HTML page"),
        (["bench", "--url", url], "--report", "the report"),
        (["bench", "--url", url], "--json", "the report"),
        (["audit", url], "--report", "the report"),
    ]


def test_a_dash_is_stdout_not_a_file_named_dash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """OUT-1: ``--pytest -`` prints the regression test (it once wrote a file named ``-``),
    and is refused beside ``--json``, which prints on stdout too."""
    monkeypatch.chdir(tmp_path)
    trace = str(CORPUS / "retry-two-sets.json")
    code, out, err = run(["replay", trace, "--pytest", "-"], capsys)
    assert out.startswith('"""Regression test written by `emq replay --pytest`') and not (tmp_path / "-").exists()
    code, out, err = run(["replay", trace, "--pytest", "-", "--json"], capsys)
    assert code == cli.EXIT_ENV and out == "" and "--pytest - and --json" in one_line(err)


@pytest.mark.parametrize("case", range(len(_outputs(""))))
def test_every_output_path_is_checked_before_any_work(case: int, empty: ServerProcess, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """OUT-1: an output that cannot be written (its directory cannot be made, it is under
    a file, a file's path is a directory, a symbolic link leads nowhere) is one line
    naming it, exit 2, and nothing ran: stdout is empty and the server was not written
    (not even ``{emq}:version``)."""
    argv, flag, what = _outputs(empty.url)[case]
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    dangling, loop = tmp_path / "dangling", tmp_path / "loop"
    dangling.symlink_to(tmp_path / "gone" / "out")
    loop.symlink_to(tmp_path / "loop-back")
    (tmp_path / "loop-back").symlink_to(loop)
    for shape in BAD_PATHS:
        if shape == "{dir}" and flag == "--traces":
            continue  # a directory is what --traces wants
        bad = shape.format(file=blocker, dir=tmp_path, dangling=dangling, loop=loop)
        code, out, err = run([*argv, flag, bad], capsys)
        line = one_line(err)
        assert code == cli.EXIT_ENV and out == "", (argv, flag, bad, out)
        assert bad in line and (what in line or flag in line), line
        with empty.client() as r:
            assert r.dbsize() == 0, (argv, flag, r.keys())


def test_emq_scripts_probes_every_file_before_it_writes_one(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """OUT-1: ``emq scripts --out DIR`` where one file of the bundle cannot be written
    (a directory in its place) writes none of them, and an empty ``--out`` is refused
    (it wrote the bundle into the current directory)."""
    (tmp_path / "claim.lua").mkdir()
    code, out, err = run(["scripts", "--out", str(tmp_path)], capsys)
    assert code == cli.EXIT_ENV and "claim.lua: it is a directory" in one_line(err)
    assert [p.name for p in tmp_path.iterdir()] == ["claim.lua"]
    code, out, err = run(["scripts", "--out", ""], capsys)
    assert code == cli.EXIT_ENV and "the path is empty" in one_line(err)


def test_one_file_is_one_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """OUT-1: two outputs naming one file (by a link too), an output over the
    expectations file read, and an output that is stdout beside ``--json`` are one line,
    exit 2, before any work; the file read is left as it was."""
    argv = ["check", "--profile", "dev", "--examples", "2", "--steps", "3", "--seed", "1",
            "--traces", str(tmp_path / "traces")]
    pinned, report = tmp_path / "expect.toml", tmp_path / "r.json"
    pinned.write_text('[[difference]]\nsignature = "claim/empty T-claim-4"\nreason = "known"\n', "utf-8")
    listed = pinned.read_text("utf-8")
    (tmp_path / "link").symlink_to(report)
    for extra, says in (
            (["--expect", str(pinned), "--write-expect", str(pinned)], "is the file --expect reads"),
            (["--report", str(report), "--html", str(report)], "is the file --report writes"),
            (["--report", str(report), "--summary", str(tmp_path / "link")], "is the file --report writes"),
            (["--json", "--summary", "/dev/stdout"], "is stdout, where --json prints the report")):
        code, out, err = run([*argv, *extra], capsys)
        assert code == cli.EXIT_ENV and out == "" and says in one_line(err), (extra, err)
    assert pinned.read_text("utf-8") == listed and not report.exists() and not (tmp_path / "traces").exists()


@pytest.mark.parametrize("flag", ["--report", "--summary", "--html"])
def test_an_output_path_that_is_no_file_of_its_own_is_written_through(flag: str, tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """OWN-1, INT-3: an output path that is a symbolic link (to a file, to a device as
    ``/dev/stdout`` is) is written through and stays a link (renamed over, ``/dev/stdout``
    became a plain file in ``/dev`` for root); a path of its own is replaced whole."""
    argv = ["check", "--profile", "dev", "--examples", "2", "--steps", "3", "--seed", "1", flag]
    real, link, null, own = tmp_path / "real", tmp_path / "link", tmp_path / "null", tmp_path / "own"
    real.write_text("old")
    link.symlink_to(real)
    null.symlink_to(os.devnull)
    for path in (link, null, own):
        code, out, err = run([*argv, str(path)], capsys)
        assert code == cli.EXIT_OK, err
    assert link.is_symlink() and link.resolve() == real and real.read_text() not in ("", "old")
    assert null.is_symlink() and Path(os.devnull).is_char_device()
    assert own.read_text() and not list(tmp_path.glob(".*.part"))


# -- secrets (SEC-1, SEC-2) ------------------------------------------------------------------
#
# Every line and every file the kit writes shows a URL without its password.

EMQ = Path(sys.executable).with_name("emq")  # the console script, as a user runs it
KIT = ROOT / "emq_kit"


def emq(*argv: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 300) -> tuple[int, str, str]:
    """``emq ARGV`` as a user runs it, in ``cwd`` (every file it writes by default lands
    there: its temp dir too): exit code, stdout, stderr."""
    tmp = cwd / "tmp"
    tmp.mkdir(exist_ok=True)
    done = subprocess.run([str(EMQ), *argv], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "TMPDIR": str(tmp), **(env or {})})
    return done.returncode, done.stdout, done.stderr



PASSWORD = "pw-n0t-t0-be-seen"
DEAD = f"redis://:{PASSWORD}@127.0.0.1:1/0"  # nothing listens on port 1: every command's error line


@pytest.fixture(scope="module")
def locked() -> Iterator[ServerProcess]:
    """A private Valkey that asks for ``PASSWORD`` (``requirepass``)."""
    with ServerProcess() as server:
        with server.client() as r:
            r.config_set("requirepass", PASSWORD)
        yield server


def _written(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


def test_no_output_of_any_command_shows_a_password(locked: ServerProcess, tmp_path: Path) -> None:
    """check (built-in client and a driver), replay, soak, bench, selftest, audit and
    ``pytest --emq`` with JUnit, with every output option, on a server that asks for a
    password, and each command's error line on a dead one: the password is in no line
    printed and no file written; every URL shown has ``***`` for its userinfo."""
    host = locked.url.removeprefix("redis://")
    plain, named = f"redis://:{PASSWORD}@{host}/0", f"redis://default:{PASSWORD}@{host}/0"  # both userinfo forms
    scripts = broken_dir(variant("state-not-written"), tmp_path)
    seen: list[str] = []

    def run(*argv: str, codes: tuple[int, ...] = (0,), env: dict[str, str] | None = None) -> str:
        code, out, err = emq(*argv, cwd=tmp_path, env=env)
        seen.append(out + err)
        assert code in codes, f"emq {redaction.scrub(' '.join(argv))}: exit {code}\n{out}{err}"
        return out + err

    first = ["--profile", "dev", "--seed", "1", "--first"]
    printed = run("check", "--url", plain, "--scripts", str(scripts), *first, "--traces", "traces",
                  "--report", "check.json", "--html", "check.html", "--write-expect", "expect.toml", codes=(1,))
    assert "***@" in printed
    run("check", "--url", named, "--scripts", str(scripts), *first, "--traces", "traces", "--json", codes=(1,))
    driver = f"{EMQ} driver --live --scripts {scripts}"
    run("check", "--url", named, "--driver", driver, *first, "--traces", "dtraces", "--report", "driver.json",
        "--html", "driver.html", codes=(1,))
    trace = _written(tmp_path / "traces")[0]
    assert "***@" in trace.read_text()
    run("replay", str(trace), "--url", plain, "--scripts", str(scripts), "--report", "replay.json",
        "--html", "replay.html", "--pytest", "test_replay.py", codes=(1,))
    run("replay", str(trace), "--scripts", str(scripts), "--json", codes=(1,), env={"EMQ_URL": named})
    run("soak", "--url", plain, "--jobs", "20", "--workers", "2", "--seconds", "30", "--report", "soak.json",
        "--html", "soak.html")
    run("soak", "--url", named, "--jobs", "20", "--workers", "2", "--seconds", "30", "--json")
    run("bench", "--url", named, *BENCH, "--report", "bench.json")
    one = ["--only", "delete-write|enqueue|", "--budget", "20"]
    run("selftest", "--url", plain, *one, "--report", "selftest.json")
    run("selftest", "--url", named, *one, "--json")
    run("audit", named, "--report", "audit.json")
    run("audit", f"redis://{host}/0?password={PASSWORD}", "--json")
    for argv in (["check", "--url", DEAD], ["replay", str(trace), "--url", DEAD, "--scripts", str(scripts)],
                 ["soak", "--url", DEAD],
                 ["bench", "--url", DEAD, *BENCH], ["selftest", "--url", DEAD, *one], ["audit", DEAD]):
        assert "***@127.0.0.1:1" in run(*argv, codes=(2,))
    (tmp_path / "conftest.py").write_text("")
    for url, code in ((plain, 0), (DEAD, 1)):  # the stored trace conforms on the built-in scripts, given (TR-9)
        done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--emq", "--emq-url", url,
                               "--emq-scripts", str(ROOT / "emq_live" / "lua"),
                               "--emq-profile", "dev", "--emq-seed", "1", "--emq-traces", "traces", "-rA", "--ignore=test_replay.py",
                               f"--junitxml=junit-{code}.xml"], cwd=tmp_path, capture_output=True, text=True,
                              timeout=300, env={**os.environ, "TMPDIR": str(tmp_path / "tmp")})
        seen.append(done.stdout + done.stderr)
        assert done.returncode == code, done.stdout + done.stderr
    assert "***@127.0.0.1:1" in (tmp_path / "junit-1.xml").read_text()

    files = _written(tmp_path)
    assert {"check.json", "check.html", "expect.toml", "driver.json", "replay.json", "replay.html",
            "test_replay.py", "soak.json", "soak.html", "bench.json", "selftest.json", "audit.json",
            "junit-0.xml", "junit-1.xml"} <= {p.name for p in files}
    leaks = [p for p in files if PASSWORD.encode() in p.read_bytes()]
    assert leaks == []
    assert [text for text in seen if PASSWORD in text] == []


def test_no_tool_the_kit_starts_has_the_password_on_its_command_line(locked: ServerProcess, tmp_path: Path) -> None:
    """SEC-1: a command line is readable by every user of the machine (``ps``,
    /proc/PID/cmdline). ``emq bench`` starts valkey-cli (its ``--pipe`` replays) with the
    password in its environment, and valkey-benchmark, which takes one only on its
    command line, not at all on a server that asks for one: those ceilings are said to
    be unmeasured, and why. Each tool is run through a wrapper that logs its argv."""
    wrappers = tmp_path / "bin"
    wrappers.mkdir()
    log = tmp_path / "argv.log"
    for name in ("valkey-cli", "valkey-benchmark"):
        real = shutil.which(name)
        assert real is not None
        (wrappers / name).write_text(f'#!/bin/sh\necho "{name} $*" >> {log}\nexec {real} "$@"\n')
        (wrappers / name).chmod(0o755)
    host = locked.url.removeprefix("redis://")
    code, out, err = emq("bench", "--url", f"redis://default:{PASSWORD}@{host}/0", *BENCH, cwd=tmp_path,
                         env={"PATH": f"{wrappers}:{os.environ['PATH']}"})
    assert code == 0, out + err
    ran = log.read_text()
    assert "valkey-cli" in ran and "--pipe" in ran and PASSWORD not in ran, ran
    assert "valkey-benchmark" not in ran, ran
    rtt = next(line for line in out.splitlines() if line.lstrip().startswith("rtt.valkey "))
    assert "valkey-benchmark takes a password only on its command line" in rtt, rtt


def test_scrub_masks_every_form_a_secret_takes() -> None:
    """Userinfo up to the last ``@`` (a raw ``@`` in a password), query parameters, and a
    remembered secret anywhere: percent-decoded, JSON- and HTML-escaped."""
    scrub = redaction.scrub
    assert scrub("on redis://u:p@ss@h:1/0 now") == "on redis://***@h:1/0 now"
    assert scrub("'valkeys+cluster://:x@h:1', rediss://h:2") == "'valkeys+cluster://***@h:1', rediss://h:2"
    assert scrub("redis://h:1/0?db=1&password=sec&username=me") == "redis://h:1/0?db=1&password=***&username=***"
    said = "cannot connect to redis://h:1?password=***: invalid username-password pair"  # a line of a URL redacted
    assert scrub(said) == said and scrub("h:1?password=***:sec") == "h:1?password=***"
    redaction.remember(["--url", 'redis://:s%22ecr%26t-9@h:1/0'])
    for form in ('s%22ecr%26t-9', 's"ecr&t-9', 's\\"ecr&t-9', "s&quot;ecr&amp;t-9"):
        assert scrub(f"the server said {form}!") == "the server said ***!", form
    assert scrub("no secret here") == "no secret here"
    redaction.remember(["redis://:abc@h"])  # too short to mask in free text: it would mask words
    assert scrub("abcdef") == "abcdef" and scrub("redis://:abc@h") == "redis://***@h"


ALLOWED_WRITERS = {
    "emq_kit/redaction.py": "the one place output files are written",
    "emq_kit/server.py": "a throwaway server's own config and log, never shown",
    "emq_kit/ports/bundle.py": "the contract's scripts and table (emq scripts --out): no URL in them",
    "emq_kit/selftest/mutation.py": "mutated copies of the scripts",
    "emq_kit/outputs.py": "writable_path's probe opens a file for appending and writes nothing",
    "emq_kit/interrupts.py": "a byte on the pipe to its own watcher thread, no output",
    "emq_kit/inputs.py": "reads only: os.open(O_RDONLY | O_NONBLOCK), so a FIFO put in a file's place is not waited on",
}


def _writes(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """Where a module writes a file or a stream past ``redaction``: ``.write_text`` /
    ``.write_bytes`` on anything but ``redaction``, ``open`` in a mode that writes,
    ``os.write``/``os.fdopen``, and the streams under ``sys.stdout``/``sys.stderr``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in ("__stdout__", "__stderr__"):
            yield node.lineno, f"sys.{node.attr}"
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        owner = f.value.id if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) else None
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
        if name in ("write_text", "write_bytes") and isinstance(f, ast.Attribute) and owner != "redaction":
            yield node.lineno, name
        if owner == "os" and name in ("write", "fdopen", "open"):
            yield node.lineno, f"os.{name}"
        if name == "open":
            modes = [a for a in node.args[1:2]] + [k.value for k in node.keywords if k.arg == "mode"]
            if any(not isinstance(m, ast.Constant) or set(str(m.value)) & set("wax+") for m in modes):
                yield node.lineno, "open for writing"


def test_every_file_the_kit_writes_passes_the_redaction() -> None:
    """SEC-2's one choke point, held in the source: outside ``emq_kit/redaction.py`` (and
    the writers of files that hold no URL, each with its reason) no module of the kit
    opens a file for writing or writes around the scrubbed streams."""
    found = []
    for path in sorted(KIT.rglob("*.py")):
        where = path.relative_to(KIT.parent).as_posix()
        if where not in ALLOWED_WRITERS:
            found += [f"{where}:{line}: {what}" for line, what in _writes(ast.parse(path.read_text()))]
    assert found == []
    # the scan finds what it looks for
    assert [w for _, w in _writes(ast.parse("from pathlib import Path\nPath('x').write_text('y')\n"
                                            "open('x', 'a')\nopen('x')\nimport os\nos.write(1, b'')\n"))] == \
        ["write_text", "open for writing", "os.write"]


# -- traces are data (TR-9, TR-9a, TR-9c, specs/trace.md) ------------------------------------
#
# Replay runs no command and loads no code a trace names; every step's arguments are checked
# against their types, and the file's size and nesting, before anything runs.

def _trace(**target: str) -> dict[str, Any]:
    """A corpus trace that conforms on the built-in scripts (its steps before the
    divergence, none), its header's target replaced by ``target``."""
    data = json.loads((CORPUS / "retry-two-sets.json").read_text())
    return {**data, "divergence": None, "target": target or {"target": "fakeredis", "scripts": "builtin"}}


def _claim(data: dict[str, Any]) -> dict[str, Any]:
    return next(s for s in data["steps"] if s["op"] == "claim")["args"]


@pytest.mark.parametrize("named, flag", [
    ({"target": "driver", "driver": "touch PWNED"}, "--driver 'touch PWNED'"),
    ({"target": "fakeredis", "scripts": "evil"}, "--scripts evil"),
])
def test_replay_runs_no_command_a_trace_names(named: dict[str, str], flag: str, tmp_path: Path) -> None:
    """A trace whose header names a driver (a command) or a script directory (Lua, which
    reaches ``os.execute`` on the embedded fakeredis) is refused by ``emq replay`` and by
    ``pytest --emq`` replaying its traces directory: exit 2 naming it and the flag that
    runs it; the command never ran (it would have made ``PWNED``)."""
    evil = tmp_path / "evil"
    evil.mkdir()
    for script in (KIT.parent / "emq_live" / "lua").glob("*.lua"):  # the scripts, one of them made to run a command
        text = script.read_text()
        (evil / script.name).write_text('os.execute("touch PWNED")\n' + text if script.stem == "enqueue" else text)
    traces = tmp_path / "traces"
    traces.mkdir()
    (traces / "t.json").write_text(json.dumps(_trace(**named)))
    code, out, err = emq("replay", "traces/t.json", cwd=tmp_path)
    assert code == 2 and out == "" and ("runs no command a trace names" in err or "loads no code" in err), err
    assert flag in err and len(err.splitlines()) == 1, err
    (tmp_path / "conftest.py").write_text("")
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--emq", "--emq-profile", "dev",
                           "--emq-seed", "1", "--emq-traces", "traces", "-k", "replay"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    # said as the plugin's own option: --emq-scripts DIR, --emq-driver CMD
    assert done.returncode == 1 and flag.replace("--", "--emq-", 1) in done.stdout, done.stdout + done.stderr
    assert flag not in done.stdout, done.stdout
    assert not (tmp_path / "PWNED").exists()
    # given by the user, it runs: the flag is how
    if "scripts" in named:
        assert emq("replay", "traces/t.json", "--scripts", "evil", cwd=tmp_path)[0] == 0
        assert (tmp_path / "PWNED").exists()


@pytest.mark.parametrize("named, flag", [
    ({"target": "driver", "driver": "touch PWNED"}, "--driver 'touch PWNED'"),
    ({"target": "fakeredis", "scripts": "evil"}, "--scripts evil"),
])
def test_a_server_given_for_a_trace_is_no_code_given(named: dict[str, str], flag: str, valkey: ServerProcess,
                                                     tmp_path: Path) -> None:
    """TR-9: ``--url`` picks the server, never the code. A trace that ran a driver or a
    script directory, replayed with a URL alone, is refused as with nothing given: the
    built-in scripts in their place conformed (exit 0) where the trace's code had failed.
    So is the regression test ``--pytest`` writes, run with ``$EMQ_URL`` alone."""
    traces = tmp_path / "traces"
    traces.mkdir()
    (traces / "t.json").write_text(json.dumps(_trace(**named)))
    with valkey.client() as r:
        before = {k: r.dump(k) for k in r.scan_iter()}
    code, out, err = emq("replay", "traces/t.json", "--url", valkey.url, "--pytest", "test_again.py", cwd=tmp_path)
    assert code == 2 and ("loads no code" in err or "runs no command" in err), (code, err)
    assert flag in err and len(err.splitlines()) == 1, err
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:emq", "-q",
                           "test_again.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "EMQ_URL": valkey.url})
    assert done.returncode == 1 and flag in done.stdout, done.stdout + done.stderr
    with valkey.client() as r:
        assert {k: r.dump(k) for k in r.scan_iter()} == before
    assert not (tmp_path / "PWNED").exists()


def _raw_enqueue(at: int, key: bytes, i: int = 4) -> dict[str, Any]:
    """A raw step (an ``enqueue`` sent past the client, as the machine's raw calls are)
    whose ``KEYS[at + 1]`` is ``key``: the contract refuses it (CC-1), so the step
    records ``EMQARG`` on both sides, as a machine-made one would."""
    keys = [f"emq:{{raw}}:{k}".encode() for k in (*spec.LOCATIONS, "metrics:completed", "metrics:failed")]
    keys = [*keys, b"emq:{raw}:job:JOB00000000077"]
    keys[at] = key
    wire = [{"b64": base64.b64encode(v).decode()} for v in keys]
    argv = [{"b64": base64.b64encode(v).decode()} for v in (b"JOB00000000077", b"p")]
    return {"i": i, "queue": "", "op": "raw", "args": {"op": "enqueue", "keys": wire, "argv": argv,
                                                       "spoil": "foreign-key: edited"},
            "model": "EMQARG", "target": "EMQARG"}


def _diverged(data: dict[str, Any], **changes: Any) -> None:
    """``data`` with its corpus trace's divergence (version 1: rows as latin-1 text) back,
    ``changes`` made to it."""
    data["divergence"] = {**json.loads((CORPUS / "retry-two-sets.json").read_text())["divergence"], **changes}


def _rows_b64(data: dict[str, Any]) -> None:
    """Rows as version 3 writes them under a version 1 header."""
    _diverged(data)
    data["divergence"]["model_snapshot"]["rows"]["JOB00000000001"]["attempts"] = {"b64": "MQ=="}


def _rows_text(data: dict[str, Any]) -> None:
    """Rows as version 1 wrote them under a version 3 header."""
    _diverged(data)
    data["version"] = 3


def _bullmq(**args: Any) -> Callable[[dict[str, Any]], None]:
    """A bullmq-layout trace of one ``add`` step, ``args`` over the machine's own."""
    add = {"job_id": "1", "now": 1_000_000, "delay": 0, "priority": 0, "lifo": False, **args}
    return lambda d: d.update(layout="bullmq", steps=[{"i": 1, "queue": "{q}", "op": "add", "args": add}])


SURROGATE = "\ud800"  # valid JSON as an escape, and no UTF-8 text: no trace the kit writes holds one

EDITS: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "a str lease": (lambda d: _claim(d).update(lease_ms="x"), "steps/1/args/lease_ms: EMQARG lease_ms must be an integer"),
    "a huge lease": (lambda d: _claim(d).update(lease_ms=10**400), "steps/1/args/lease_ms: EMQARG lease_ms must be in"),
    "a negative lease": (lambda d: _claim(d).update(lease_ms=-5), "steps/1/args/lease_ms: EMQARG lease_ms must be in"),
    "a missing lease": (lambda d: _claim(d).pop("lease_ms"), "steps/1/args: claim needs lease_ms"),
    "two spoiled": (lambda d: _claim(d).update(lease_ms=0, now=-1), "(lease_ms is the step's one spoiled argument)"),
    "no steps": (lambda d: d.update(steps=[]), "steps: no steps"),
    "bad base64": (lambda d: d["steps"][0]["args"].update(payload={"b64": "!!"}), "steps/0/args/payload: not a value"),
    "a bad batch": (lambda d: d["steps"].append({"i": 4, "queue": "alpha", "op": "complete_many", "args": {
        "jobs": [["JOB00000000001", 0]]}}), "steps/3/args/jobs: EMQARG token must be in"),
    "a raw key of no queue": (lambda d: d["steps"].append(_raw_enqueue(0, b"other-app:key")),
                              "steps/3/args/keys/0: b'other-app:key' is no key of a queue a run sends"),
    "a raw key of a user's queue": (lambda d: d["steps"].append(_raw_enqueue(6, b"emq:{theirs}:job:JOB00000000077")),
                                    "steps/3/args/keys/6: b'emq:{theirs}:job:JOB00000000077' is no key of a queue"),
    "version 3 over text rows": (_rows_text,
                                 "divergence/model_snapshot/rows/JOB00000000001/attempts: a version 3 trace writes "
                                 'a row value as {"b64": ...}, got \'1\''),
    "version 1 over b64 rows": (_rows_b64, "divergence/model_snapshot/rows/JOB00000000001/attempts: a version 1 trace "
                                           "writes a row value as latin-1 text, got {'b64': 'MQ=='}"),
    "a bullmq now past its adapter's": (_bullmq(now=2**40 + 1),
                                        "steps/0/args/now: 1099511627777 is no now the bullmq layout sends"),
    "a bullmq delay of another type": (_bullmq(delay="x"), "steps/0/args/delay: 'x' is no delay the bullmq layout"),
    "a bullmq lifo of another type": (_bullmq(lifo="yes"), "steps/0/args/lifo: 'yes' is no lifo the bullmq layout"),
    "a bullmq retention of another type": (
        lambda d: d.update(layout="bullmq", steps=[{"i": 1, "queue": "{q}", "op": "retention",
                                                    "args": {"completed": "x", "failed": 0}}]),
        "steps/0/args/completed: 'x' is no completed the bullmq layout sends"),
    "a lone surrogate in a queue name": (
        lambda d: d["steps"].append({"i": 4, "queue": "", "op": "queue", "args": {"name": "a" + SURROGATE}}),
        "steps/3/args/name: 'a\\ud800' holds a lone surrogate, which UTF-8 cannot encode: a trace is UTF-8 text"),
    "a lone surrogate in a stray key": (
        lambda d: d["steps"].append({"i": 4, "queue": "alpha", "op": "stray_key",
                                     "args": {"key": "x" + SURROGATE, "kind": "string"}}),
        "steps/3/args/key: 'x\\ud800' holds a lone surrogate"),
    "a lone surrogate in the evidence": (lambda d: _diverged(d, evidence=[SURROGATE]),
                                         "divergence/evidence/0: '\\ud800' holds a lone surrogate"),
    "a lone surrogate in the server": (lambda d: d["target"].update(server=SURROGATE),
                                       "target/server: '\\ud800' holds a lone surrogate"),
    "a lone surrogate in a key": (lambda d: d["target"].update({SURROGATE: "x"}),
                                  "target: the key '\\ud800' holds a lone surrogate"),
    "a divergence of no kind": (lambda d: _diverged(d, kind="x"),
                                "divergence/kind: 'x' is not one of ['answer', 'snapshot', 'invariant']"),
    "a divergence's evidence of another type": (lambda d: _diverged(d, evidence=5),
                                                "divergence/evidence: 5 is not of type 'array'"),
}


@pytest.mark.parametrize("where", ["fakeredis", "valkey", "driver"])
def test_an_edited_trace_is_refused_before_anything_runs(where: str, tmp_path: Path, request: Any,
                                                         monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Every edit above, a file nested too deep or too large, and a name that is no
    regular file (a FIFO, a link to /dev/zero, a directory), is exit 2 naming the
    JSON path (no ``emq bug``), on each target, before the target is touched: no key
    on the server, and the driver — a command that would make a file — never started.
    Through ``cli.main`` (what the console script runs) in this process, in ``tmp_path``:
    the driver would start there."""
    monkeypatch.chdir(tmp_path)
    flags = {"fakeredis": [], "valkey": ["--url", request.getfixturevalue("empty").url],
             "driver": ["--driver", "touch STARTED"]}[where]
    for name, (edit, words) in EDITS.items():
        data = _trace()
        edit(data)
        (tmp_path / f"{name}.json").write_text(json.dumps(data))
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (tmp_path / "digits.json").write_text(json.dumps(_trace()).replace('"seed": ', '"seed": ' + "1" * 5_000, 1))
    with open(tmp_path / "large.json", "wb") as f:
        f.truncate(validate.MAX_BYTES + 1)  # sparse: refused by its size, never read
    for kind in unreadable.KINDS:  # a FIFO, /dev/zero, a directory: refused before a byte is read
        unreadable.make(tmp_path / f"{kind}.json", kind)
    cases = {**{name: words for name, (_, words) in EDITS.items()}, "deep": "nested deeper than 32 levels",
             "digits": "(the document): an integer of 5,001 digits, more than a trace holds",
             "large": "more than a trace holds", **unreadable.KINDS}
    for name, words in cases.items():
        code, out, err = run(["replay", f"{name}.json", *flags], capsys)
        assert code == 2 and out == "" and words in err and len(err.splitlines()) == 1, (name, err)
        assert "emq bug" not in err
    assert not (tmp_path / "STARTED").exists()
    if where == "valkey":
        with request.getfixturevalue("empty").client() as r:
            assert r.dbsize() == 0


def test_a_replayed_raw_call_sends_no_key_the_run_does_not_own(server: ServerProcess, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """OWN-1, TR-9a: a raw step is sent past the client, to scripts that may write any key
    they are given (the port under check: here one that sets its KEYS[1] first). A trace
    edited to give it a key of no queue (another application's) or of a queue no run
    sends (a user's) is refused before anything runs, and the user's keys stay as they
    were; the machine's own raw step, on its own name, still replays."""
    blind = tmp_path / "blind"
    shutil.copytree(ROOT / "emq_live" / "lua", blind)
    enqueue = blind / "enqueue.lua"
    enqueue.write_text('redis.call("SET", KEYS[1], "written by a replay")\n' + enqueue.read_text())
    with server.client() as r:
        before = image(r)
        for key in (b"other-app:key", b"emq:{a}:pending"):
            data = {**_trace(), "steps": [_raw_enqueue(0, key, i=1)]}
            (tmp_path / "t.json").write_text(json.dumps(data))
            code, out, err = run(["replay", str(tmp_path / "t.json"), "--url", server.url, "--scripts", str(blind)],
                                 capsys)
            assert code == 2 and out == "" and "is no key of a queue a run sends" in one_line(err), err
            assert_intact(before, image(r), f"a raw step on {key!r}")
        data = {**_trace(), "steps": [_raw_enqueue(0, b"emq:{raw2}:pending", i=1)]}  # the machine's foreign key
        (tmp_path / "t.json").write_text(json.dumps(data))
        code, out, err = run(["replay", str(tmp_path / "t.json"), "--url", server.url, "--scripts", str(blind)], capsys)
        assert code == cli.EXIT_FAIL and "emq:{raw2}:pending" in out, out + err  # its write: on the run's name
        assert_intact(before, image(r), "a raw step on the run's own name")


def test_a_machine_made_hostile_step_still_replays() -> None:
    """The one spoiled argument a hostile call carries is a value of the machine's own
    (``bad_values``): accepted, where the same argument edited to another bad value is
    not."""
    data = _trace()
    _claim(data).update(lease_ms=spec.LIMITS["ms_max"] + 1)  # the machine's "one past the bound"
    validate.check_trace(data)
    _claim(data).update(lease_ms=spec.LIMITS["ms_max"] + 2)
    with pytest.raises(validate.TraceError, match="steps/1/args/lease_ms"):
        validate.check_trace(data)


# -- interrupts (INT-1, INT-2, specs/safety.md) -----------------------------------------------
#
# Ctrl-C as a terminal sends it, to the command's whole process group, once the command has
# said (on stderr) that it is in the state the test is about: exit 130, the seed and what
# the run had, its keys gone, no traceback, no process of its left.


@dataclass
class Stopped:
    """What an interrupted command left: exit code, stdout, stderr (a terminal's), and
    whether every process it had started was gone once it had exited."""

    code: int
    out: str
    err: str
    orphans: list[int]


def _descendants(root: int) -> list[int]:
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError):
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
    found, frontier = [], [root]
    while frontier:
        frontier = [pid for pid, parent in parents.items() if parent in frontier]
        found += frontier
    return found


def _running(root: int, program: str) -> bool:
    """Whether a process of ``root``'s that runs ``program`` is there (``comm``: its
    first 15 bytes)."""
    found = []
    for pid in _descendants(root):
        with contextlib.suppress(OSError):
            found.append(Path(f"/proc/{pid}/comm").read_text().strip())
    return program[:15] in found


def interrupt(argv: list[str], ready: str, cwd: Path, *, kill: bool = False, child: str = "",
              signum: int = signal.SIGINT, until: Callable[[int], bool] | None = None) -> Stopped:
    """``emq ARGV`` with stderr on a terminal (a pty: the live progress line), in a
    process group of its own; once ``ready`` shows on stderr (and a process of its runs
    ``child``, when given, and ``until(its pid)`` holds), ``signum`` to the group (SIGKILL
    to the command alone with ``kill``). Every process it had started then is watched
    through a pidfd, so a pid reused later is never mistaken for one of them."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([str(EMQ), *argv], cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=slave, process_group=0, env={**os.environ, "TMPDIR": str(cwd)},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # a suite run with
    os.close(slave)  # SIGINT ignored (a background job) would pass that on
    seen = b""

    def read(timeout: float) -> bool:
        """What stderr has within ``timeout`` seconds: False once nothing more will come."""
        nonlocal seen
        if not select.select([master], [], [], timeout)[0]:
            return True
        try:
            chunk = os.read(master, 65536)
        except OSError:  # every process holding the terminal has closed it
            chunk = b""
        seen += chunk
        return bool(chunk)

    while ready.encode() not in seen or (child and not _running(proc.pid, child)) or (until and not until(proc.pid)):
        assert read(300 if not (child or until) else 0.01), \
            f"no {ready!r} on stderr: {seen.decode(errors='replace')[-2000:]}"
        assert proc.poll() is None, f"exit {proc.returncode} before {ready!r}: {seen.decode(errors='replace')[-2000:]}"
    watched = []
    for pid in _descendants(proc.pid):
        with contextlib.suppress(ProcessLookupError):
            watched.append((pid, os.pidfd_open(pid)))
    if kill:
        proc.kill()
    else:
        os.killpg(proc.pid, signum)
    sent = time.monotonic()
    while read(0.2) or proc.poll() is None:  # until the command has exited and said all it had
        assert time.monotonic() - sent < 120, f"still running 120 s after the signal: {seen.decode()[-2000:]}"
    out = proc.stdout.read().decode() if proc.stdout else ""
    code = proc.wait()
    os.close(master)
    orphans = [pid for pid, fd in watched if not select.select([fd], [], [], 15)[0]]  # exited: readable
    for _, fd in watched:
        os.close(fd)
    return Stopped(code, out, seen.decode(errors="replace").replace("\r\n", "\n").replace("\r", "\n"), orphans)


def _keys_left(server: ServerProcess) -> list[bytes]:
    """Every key on ``server`` (an empty one before the command: OWN-5's every ending)."""
    with server.client() as r:
        return list(r.scan_iter())


def _clean_ending(stopped: Stopped, command: str) -> None:
    assert stopped.code == 130, stopped.err
    assert "Traceback" not in stopped.out + stopped.err and "emq bug" not in stopped.err, stopped.err
    assert f"emq {command}: interrupted" in stopped.err, stopped.err
    assert stopped.orphans == []


CHECKS = {  # target -> (flags, what a run of its prints once it searches)
    "fakeredis": [],
    "valkey": ["--url", "{url}"],
    "valkey, server clock": ["--url", "{url}", "--clock", "server"],
    "driver": ["--url", "{url}", "--driver", f"{EMQ} driver --live"],
}


def test_a_ctrl_c_noted_after_the_last_stopping_point_ends_the_run_with_its_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    """INT-1: a Ctrl-C that lands after the run's last example, too late for the grace (a
    short minimizing, the reproducing), still ends the run as an interrupt, its seed and
    the command to run it again said: never a verdict printed, then a bare exit 130."""
    import emq_kit
    from emq_kit.check import run as run_module

    searched = run_module.run_check

    def then_ctrl_c(*args: Any, **kwargs: Any) -> Any:
        report = searched(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGINT)  # noted by stopping()'s handler, raised at a stopping point
        return report

    monkeypatch.setattr(run_module, "run_check", then_ctrl_c)
    said: list[str] = []
    with pytest.raises(interrupts.Interrupted), interrupts.stopping():
        emq_kit.check(profile="dev", seed=1, examples=3, steps=5, say=said.append)
    assert any(line.startswith("interrupted; seed 1 (run it again: emq check --seed 1") for line in said), said


def test_a_ctrl_c_raised_in_the_runs_cleanup_ends_it_with_its_seed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """INT-1: a Ctrl-C raised where it stands while the run closes its target (no stopping
    point within a second: the keys deleted on a loaded machine; or a second Ctrl-C)
    still ends the run as an interrupt with its seed, the command to run it again and its
    steps so far, not a bare ``interrupted``."""
    import emq_kit
    from emq_kit.check.live import LiveTarget

    closed = LiveTarget.close

    def close_then_ctrl_c(self: LiveTarget) -> None:
        closed(self)
        raise KeyboardInterrupt

    monkeypatch.setattr(LiveTarget, "close", close_then_ctrl_c)
    said: list[str] = []
    with pytest.raises(KeyboardInterrupt) as raised, interrupts.stopping():
        emq_kit.check(profile="dev", seed=1, examples=3, steps=5, traces=str(tmp_path), say=said.append)
    assert isinstance(raised.value, interrupts.Interrupted) and raised.value.said, repr(raised.value)
    assert any(line.startswith("interrupted; seed 1 (run it again: emq check --seed 1") for line in said), said
    [trace] = tmp_path.glob("seed1-interrupted-*.json")  # the last example's steps, kept
    assert any(line.startswith(f"the steps so far: {trace}") for line in said) and Trace.load(trace).steps, said


@pytest.mark.parametrize("phase, target", [
    *[("searching", target) for target in CHECKS],
    ("shrinking", "fakeredis"), ("shrinking", "valkey"), ("shrinking", "driver"),
    ("minimizing", "fakeredis"), ("minimizing", "valkey"),
])
def test_ctrl_c_stops_check_with_its_seed_and_trace(phase: str, target: str, empty: ServerProcess,
                                                    tmp_path: Path) -> None:
    """INT-1: Ctrl-C while ``emq check`` searches, shrinks or minimizes, on each target:
    exit 130, the seed and the command that runs the search again, the steps so far as a
    trace that loads, the run's keys gone, the driver gone, no traceback. (It went on to
    CONFORMS, or ended ``emq bug: SkipTest`` without a seed.)"""
    flags = [f.format(url=empty.url) for f in CHECKS[target]]
    seed = "5"
    if phase != "searching":  # a broken script: a difference to shrink; with no budget to shrink, minimize it at once
        broken = "state-not-written"
        if phase == "minimizing":  # seed 2 meets it at step 321 of 400: a minimizing of seconds, not the sweep's 3 steps
            broken, seed = "extend-non-active", "2"
            flags += ["--steps", "400", "--shrink-steps", "0", "--first"]
        scripts = broken_dir(variant(broken), tmp_path)
        flags += ["--scripts", str(scripts)] if target != "driver" else []
        if target == "driver":
            flags[-1] += f" --scripts {scripts}"
    stopped = interrupt(["check", "--seed", seed, "--traces", "traces", *flags], f"  {phase} ", tmp_path)
    _clean_ending(stopped, "check")
    assert f"emq check: interrupted; seed {seed} (run it again: emq check --seed {seed} --profile ci" in stopped.err
    [trace] = (tmp_path / "traces").glob(f"seed{seed}-interrupted-*.json")
    assert f"traces/{trace.name}" in stopped.err
    assert Trace.load(trace).steps
    assert _keys_left(empty) == []
    if phase == "minimizing":  # the steps kept are the difference being minimized: it replays as one
        code, out, err = emq("replay", str(trace), *flags[flags.index("--scripts"):][:2], cwd=tmp_path)
        assert code == 1 and "<- diverges" in out, out + err


def test_ctrl_c_while_the_driver_hangs_ends_the_run_at_once(empty: ServerProcess, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """INT-1, DP-14: Ctrl-C while the driver owes a reply it will not give: exit 130 at
    once, the driver killed. (The run's end sent the hung driver ``shutdown`` and waited
    a whole ``--timeout`` more for its answer: here 300 s.)"""
    mark = tmp_path / "hanging"
    monkeypatch.setenv("FAULTY_MARK", str(mark))
    stopped = interrupt(["check", "--seed", "1", "--profile", "dev", "--url", empty.url, "--driver",
                         faulty("hang", "claim"), "--timeout", "300"], "", tmp_path, until=lambda pid: mark.exists())
    _clean_ending(stopped, "check")
    assert _keys_left(empty) == []


@pytest.mark.parametrize("workers", [2, pytest.param(100, marks=pytest.mark.slow)])
def test_ctrl_c_stops_soak_at_any_worker_count(workers: int, empty: ServerProcess, tmp_path: Path) -> None:
    """INT-2: Ctrl-C once a soak's processes run (``--workers 100`` printed a worker's
    traceback; 300 left the first Ctrl-C lost, the coordinator waiting on a lock a worker
    had died holding): exit 130, the seed, every worker gone, no traceback."""
    stopped = interrupt(["soak", "--url", empty.url, "--workers", str(workers), "--jobs", "100000", "--seconds", "300",
                      "--seed", "4"], f"emq soak: {workers} workers", tmp_path)
    _clean_ending(stopped, "soak")
    assert _keys_left(empty) == []
    assert f"interrupted; seed 4 (run it again: emq soak --url {empty.url} --seed 4 --workers {workers}" in stopped.err


@pytest.mark.parametrize("where", ["fakeredis", "valkey"])
def test_ctrl_c_stops_selftest_at_its_mutant(where: str, empty: ServerProcess, tmp_path: Path) -> None:
    """INT-2: Ctrl-C while a mutant is judged: exit 130, which mutant and the seed, the
    child judging it gone, no traceback."""
    url = ["--url", empty.url] if where == "valkey" else []
    stopped = interrupt(["selftest", *url, "--budget", "60"], "  mutant 2 of ", tmp_path)
    _clean_ending(stopped, "selftest")
    assert _keys_left(empty) == []
    assert "emq selftest: interrupted at mutant " in stopped.err and "; seed 0 (run it again: emq selftest" in stopped.err


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_stops_selftest_on_a_local_cluster(signum: int, empty: ServerProcess, tmp_path: Path) -> None:
    """INT-2, OWN-5: Ctrl-C (or SIGTERM to the group) once a worker of ``--cluster
    local:2`` judges a mutant under its claim: exit 130, one line naming the command that
    runs it again, ``--cluster local:2`` in it, no process of its left, and the server
    as it was. (Its workers died of the terminal's Ctrl-C mid-task, or were killed by
    the cluster's close: 16 to 34 keys were left, ``emq:{alpha-*}:*``, their records and
    leases, and the ``{emq}:version`` they wrote; the rerun lacked ``--cluster``.)"""
    pytest.importorskip("distributed")

    def judging(command: int) -> bool:
        """A worker's claim is on the server (the command's own, made while it picks
        the mutants, is not enough: its workers are still to start)."""
        with empty.client() as r:
            records = [r.get(k) for k in r.scan_iter(match=RUN + "*") if not k.endswith(b":live")]
        return any(json.loads(doc)["pid"] != command for doc in records if doc is not None)

    stopped = interrupt(["selftest", "--url", empty.url, "--budget", "60", "--cluster", "local:2"], "", tmp_path,
                        signum=signum, until=judging)
    _clean_ending(stopped, "selftest")
    assert _keys_left(empty) == []  # no emq:*, no {emq}:run:*, no {emq}:version the workers wrote (OWN-5)
    *before, line = stopped.err.strip().splitlines()
    assert line == (f"emq selftest: interrupted; seed 0 (run it again: emq selftest --seed 0 --budget 60 "
                    f"--url {empty.url} --cluster local:2)"), stopped.err
    # SIGTERM kills the workers: a nanny restarts one, which may take the killed one's task
    # again and first remove its dead run (OWN-6), saying so; nothing else is said
    assert all(s.startswith("emq selftest: removed the leftovers of ") for s in before) and \
        (signum == signal.SIGTERM or not before), stopped.err


def test_ctrl_c_stops_a_campaign_with_the_command_that_runs_it_again(empty: ServerProcess, tmp_path: Path) -> None:
    """INT-2: Ctrl-C once a worker of ``--cluster local:1`` runs a campaign's check under
    its claim: exit 130, one line with the runs done and the command that runs the same
    campaign again (every option that chose what ran and where), nothing left on the
    server. (It said only ``interrupted``.)"""
    pytest.importorskip("distributed")

    def running(command: int) -> bool:
        with empty.client() as r:
            records = [r.get(k) for k in r.scan_iter(match=RUN + "*") if not k.endswith(b":live")]
        return any(json.loads(doc)["pid"] != command for doc in records if doc is not None)

    out = tmp_path / "o"
    stopped = interrupt(["campaign", "--target", f"v={empty.url}", "--seeds", "1,2", "--profile", "thorough",
                         "--cluster", "local:1", "--out", str(out)], "", tmp_path, until=running)
    _clean_ending(stopped, "campaign")
    assert _keys_left(empty) == []
    line = stopped.err.strip().splitlines()[-1]
    assert line == (f"emq campaign: interrupted after 0 of 2 runs (run it again: emq campaign --target v={empty.url} "
                    f"--seeds 1,2 --profile thorough --cluster local:1 --out {out})"), stopped.err


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_a_local_cluster_starts_its_workers_is_an_interrupt(signum: int, empty: ServerProcess,
                                                                           tmp_path: Path) -> None:
    """INT-2: Ctrl-C (or SIGTERM to the group) once ``--cluster local:2`` has spawned a
    worker, before the worker loaded its preload: exit 130 and the one line naming the
    command that runs it again, no process of its left, the server as it was. (The
    signal killed the worker in its imports, and Dask's ``RuntimeError: Nanny failed to
    start`` ended the command as ``emq bug``, exit 2; cut half-way, the start left a
    cluster Dask's exit hook failed on.) The dying worker's own traceback may show."""
    pytest.importorskip("distributed")

    def spawned(command: int) -> bool:
        """A worker process is being started (``multiprocessing``'s spawn)."""
        for pid in _descendants(command):
            with contextlib.suppress(OSError):
                if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    return True
        return False

    stopped = interrupt(["selftest", "--url", empty.url, "--budget", "60", "--cluster", "local:2"], "", tmp_path,
                        signum=signum, until=spawned)
    assert stopped.code == 130 and "emq bug" not in stopped.err, stopped.err
    assert stopped.err.strip().splitlines()[-1] == (f"emq selftest: interrupted; seed 0 (run it again: emq selftest "
                                                    f"--seed 0 --budget 60 --url {empty.url} --cluster local:2)")
    assert stopped.orphans == []
    assert _keys_left(empty) == []


def test_ctrl_c_stops_bench_inside_the_servers_own_tools(empty: ServerProcess, tmp_path: Path) -> None:
    """INT-1: Ctrl-C while ``emq bench`` waits on ``valkey-benchmark`` (the terminal sends
    it to the tool too, which dies of it): exit 130, ``interrupted``, never the tool's
    empty output taken for a wrong answer (exit 1), the run's keys gone."""
    stopped = interrupt(["bench", "--url", empty.url, "--repeat", "3", "--jobs", "1000"], "round trips", tmp_path,
                        child="valkey-benchmark")
    _clean_ending(stopped, "bench")
    assert "valkey-benchmark:" not in stopped.err
    assert _keys_left(empty) == []


@pytest.mark.parametrize("argv, ready", [
    (["selftest", "--budget", "60"], "  mutant 1 of "),
    (["selftest", "--url", "{url}", "--budget", "60"], "  mutant 1 of "),
    (["soak", "--url", "{url}", "--workers", "4", "--jobs", "100000", "--seconds", "300"], "emq soak: 4 workers"),
    (["check", "--url", "{url}", "--driver", f"{EMQ} driver --live"], "  searching "),
])
def test_a_killed_command_leaves_no_process_of_its_own(argv: list[str], ready: str, empty: ServerProcess,
                                                       tmp_path: Path) -> None:
    """INT-2: SIGKILL of the command itself (nothing of its own runs after it): every
    process it had started ends with it (a selftest's child worked on for 25 s)."""
    stopped = interrupt([a.format(url=empty.url) for a in argv], ready, tmp_path, kill=True)
    assert stopped.code == -signal.SIGKILL and stopped.orphans == []


VERDICT = re.compile(r"^emq \w+: (CONFORMS|DIFFERS|INCONCLUSIVE)", re.M)
"""A command's verdict line (``emq_kit.report.verdicts.headline``)."""


@pytest.mark.parametrize("argv, ready", [
    (["selftest", "--budget", "60"], "  mutant 2 of "),
    (["selftest", "--url", "{url}", "--budget", "60"], "  mutant 2 of "),
    (["soak", "--url", "{url}", "--workers", "4", "--jobs", "100000", "--seconds", "300", "--seed", "4"],
     "emq soak: 4 workers"),
])
def test_sigterm_to_the_group_ends_a_forking_command_as_ctrl_c(argv: list[str], ready: str, empty: ServerProcess,
                                                              tmp_path: Path) -> None:
    """INT-1, INT-2: SIGTERM to the whole process group (a CI job's time limit) kills a
    soak's workers and a selftest's judge at once, before their parent stops them: the
    parent still ends as interrupted, with its seed, never a verdict, its keys gone. (A
    selftest ended ``emq bug: the check process died``, exit 2; a soak hung for good, its
    stop event's ``set`` waiting for a worker killed asleep in its ``wait``.)"""
    stopped = interrupt([a.format(url=empty.url) for a in argv], ready, tmp_path, signum=signal.SIGTERM)
    _clean_ending(stopped, argv[0])
    assert not VERDICT.search(stopped.out), stopped.out
    assert "; seed " in stopped.err and "(run it again: emq " in stopped.err, stopped.err
    assert _keys_left(empty) == []


LATE = """
import functools, importlib, os, signal, sys
from emq_kit import cli
where, _, name = sys.argv[1].rpartition(".")
when, *sent = sys.argv[2].split()
owner = importlib.import_module(where)
done = getattr(owner, name)

def send():
    for signame in sent:
        if signame == "SIGINT":  # a Ctrl-C at the terminal
            os.killpg(0, signal.SIGINT)
        else:  # what timeout, a CI job's limit or docker stop send the command
            os.kill(os.getpid(), getattr(signal, signame))

@functools.wraps(done)
def then_signalled(*args, **kwargs):
    if when == "before":
        send()
    result = done(*args, **kwargs)
    if when == "after":
        send()
    return result

setattr(owner, name, then_signalled)
sys.exit(cli.main(sys.argv[3:]))
"""
"""``python -c LATE FUNCTION 'WHEN SIGNAL...' ARGV...``: ``emq ARGV`` with the signals
sent the moment ``FUNCTION`` (``module.name``) is called (WHEN ``before``) or returns
(``after``): SIGINT to its process group, any other to the command."""

@pytest.mark.parametrize("after, argv, said", [
    ("emq_kit.api._run", ["check", "--url", "{url}", "--seed", "5", "--profile", "dev", "--examples", "3"],
     "emq check: interrupted; seed 5 (run it again: emq check --seed 5 --profile dev"),
    ("emq_kit.trace.replay.replay", ["replay", "{trace}", "--url", "{url}"], "emq replay: interrupted"),
    ("emq_kit.soak.history.check_history", ["soak", "--url", "{url}", "--jobs", "20", "--workers", "2", "--seed", "4"],
     "emq soak: interrupted; seed 4 (run it again: emq soak --url"),
    ("emq_kit.selftest.mutation.judge", ["selftest", "--url", "{url}", "--budget", "30", "--only",
                                         "drop-precondition|enqueue|"],
     "emq selftest: interrupted at mutant 1 of 1 (drop-precondition|enqueue|"),
])
def test_a_ctrl_c_after_the_last_stopping_point_ends_a_command_as_interrupted(
        after: str, argv: list[str], said: str, empty: ServerProcess, tmp_path: Path) -> None:
    """INT-1, INT-2: a Ctrl-C that lands after a command's last stopping point and before
    its verdict (a check's cleanup, a replay's last step, a soak's linearizability check,
    a selftest's last mutant), inside the grace: the command says what INT-1 promises it
    says when interrupted and exits 130, never a verdict printed first (each printed its
    verdict, then a bare ``interrupted``), its keys gone."""
    trace = tmp_path / "conforming.json"
    trace.write_text(json.dumps(_trace()))
    proc = subprocess.run([sys.executable, "-c", LATE, after, "after SIGINT",
                           *[a.format(url=empty.url, trace=trace) for a in argv]],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300, process_group=0,
                          env={**os.environ, "TMPDIR": str(tmp_path)})
    assert proc.returncode == 130, proc.stdout + proc.stderr
    assert said in proc.stderr, proc.stderr
    assert not VERDICT.search(proc.stdout), proc.stdout
    assert "Traceback" not in proc.stderr and "emq bug" not in proc.stderr, proc.stderr
    assert _keys_left(empty) == []


@pytest.mark.parametrize("sent", ["SIGTERM SIGTERM", "SIGINT SIGINT", "SIGTERM SIGINT"])
def test_a_second_interrupt_during_the_key_deletion_waits_for_it(sent: str, empty: ServerProcess,
                                                                 tmp_path: Path) -> None:
    """INT-1, OWN-5: two interrupts (SIGTERM is taken as Ctrl-C) sent as the run's claim
    starts deleting its keys: the second waits until they are deleted, then the command
    ends, exit 130, no key of the run left (two SIGTERMs raised inside the deletion: its
    keys were left for ``emq clean``)."""
    argv = ["check", "--url", empty.url, "--seed", "5", "--profile", "dev", "--examples", "3"]
    proc = subprocess.run([sys.executable, "-c", LATE, "emq_kit.claim._delete", f"before {sent}", *argv],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300, process_group=0,
                          env={**os.environ, "TMPDIR": str(tmp_path)})
    assert proc.returncode == 130, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and "emq bug" not in proc.stderr, proc.stderr
    assert not VERDICT.search(proc.stdout), proc.stdout
    assert _keys_left(empty) == []


@pytest.mark.parametrize("sent", ["SIGINT", "SIGINT SIGINT", "SIGTERM SIGTERM"])
@pytest.mark.parametrize("argv", [
    ["check", "--url", "{url}", "--seed", "5", "--profile", "dev", "--examples", "3"],
    ["replay", "{trace}", "--url", "{url}"],
])
def test_an_interrupt_after_the_verdict_leaves_its_exit_code_and_report_whole(
        sent: str, argv: list[str], empty: ServerProcess, tmp_path: Path) -> None:
    """INT-3: a Ctrl-C (or two, or SIGTERMs) as the report is being written, the verdict
    printed: the verdict stands, the report is written whole and the command exits with
    the code it says, the interrupt said on stderr (it ended with a bare ``interrupted``,
    exit 130, the report saying exit 0, or a second one raised inside its writing)."""
    trace, report = tmp_path / "conforming.json", tmp_path / "report.json"
    trace.write_text(json.dumps(_trace()))
    proc = subprocess.run([sys.executable, "-c", LATE, "emq_kit.cli.common.write_text", f"before {sent}",
                           *[a.format(url=empty.url, trace=trace) for a in argv], "--report", str(report)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300, process_group=0,
                          env={**os.environ, "TMPDIR": str(tmp_path)})
    assert "Traceback" not in proc.stderr and "emq bug" not in proc.stderr, proc.stderr
    document = json.loads(report.read_text())
    assert proc.returncode == document["exit"] == 0, proc.stdout + proc.stderr
    assert VERDICT.search(proc.stdout), proc.stdout
    assert f"emq {argv[0]}: interrupted after its verdict" in proc.stderr, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["conforming.json", "report.json"]
    assert _keys_left(empty) == []


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the lost one, on purpose
def test_a_ctrl_c_inside_a_gc_callback_is_raised_at_the_next_stopping_point(ctrl_c: None) -> None:
    """Why INT-1 notes a Ctrl-C: raised where it lands, inside a gc callback (Hypothesis
    keeps one), it is printed as "Exception ignored" and lost; noted, the next stopping
    point raises it."""
    armed: list[bool] = []

    def callback(phase: str, info: dict[str, Any]) -> None:
        if phase == "start" and armed:
            armed.clear()
            signal.raise_signal(signal.SIGINT)

    gc.callbacks.append(callback)
    try:
        armed.append(True)
        gc.collect()  # the default handler: raised inside the callback, swallowed there
        assert not armed
        with pytest.raises(interrupts.Interrupted):
            with interrupts.stopping():
                armed.append(True)
                gc.collect()
                assert not armed
                interrupts.check()
    finally:
        gc.callbacks.remove(callback)


def test_a_run_blocked_past_the_grace_has_the_interrupt_raised_where_it_stands(ctrl_c: None) -> None:
    """A run that reaches no stopping point (a call that blocks: here a read nobody
    answers) has the noted Ctrl-C raised where it stands once ``GRACE`` has passed."""
    main = threading.main_thread().ident
    assert main is not None
    never, _ = os.pipe()
    try:
        with pytest.raises(interrupts.Interrupted):
            with interrupts.stopping():
                threading.Thread(target=signal.pthread_kill, args=(main, signal.SIGINT)).start()
                os.read(never, 1)
    finally:
        os.close(never)

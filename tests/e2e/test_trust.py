"""The kit's own trust: bad input is one line and exit 2, never a traceback;
a mutant is killed only by a counterexample; an exception in the kit's own code is an
``emq bug``, never the target's crash; secrets stay out of what is printed and written.
Servers: fakeredis, and the session's Valkey 8 and Redis 7."""

from __future__ import annotations

import json
import math
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from emq_kit import cli
from emq_kit.check.pools import POOL, QUEUES
from emq_kit.check.profiles import PROFILES
from emq_kit.check.run import run_check
from emq_kit.check.target import open_target
from emq_kit.errors import KitBug
from emq_kit.selftest.mutation import summary
from emq_kit.server import ServerProcess
from emq_live import acl
from emq_live.client import Queue
from emq_model import keyspace, spec
from tests import unreadable
from tests.broken import broken_dir, variant

PROGRESS = tuple(f"emq check: {phase}" for phase in ("sweeping", "searching", "shrinking", "checking", "minimizing",
                                                     "reproducing"))
EMQ = Path(sys.executable).with_name("emq")  # the console script, as a user runs it


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``emq ARGV`` in this process: its exit code (argparse's too), stdout, stderr."""
    try:
        code = cli.main(argv)
    except SystemExit as exc:  # argparse: usage block, exit 2
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def one_line(err: str) -> str:
    """The one line of ``err`` besides progress lines (a slow run prints one every 10 s)."""
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith(PROGRESS)]
    assert len(lines) == 1, err
    return lines[0]


@pytest.fixture(scope="module")
def not_redis() -> Iterator[str]:
    """A TCP server that answers every connection with an HTTP error page."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    stop = threading.Event()

    def serve() -> None:
        sock.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                continue
            with conn:
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield f"redis://127.0.0.1:{sock.getsockname()[1]}"
    stop.set()
    t.join()
    sock.close()


def dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"redis://127.0.0.1:{s.getsockname()[1]}"


# -- one line, exit 2 ---------------------------------------------------------------------


@pytest.mark.parametrize("command", ["check", "bench", "soak", "selftest", "clean"])
def test_a_server_that_is_not_redis_is_one_line(command: str, not_redis: str, capsys: Any) -> None:
    code, _, err = run([command, "--url", not_redis], capsys)
    assert code == cli.EXIT_ENV
    line = one_line(err)
    assert not_redis in line and "emq bug" not in line, line


@pytest.mark.parametrize("where", ["not_redis", "dead", "cluster-dead", "cluster-valkey"])
def test_audit_of_a_server_out_of_reach_is_one_line_naming_it(where: str, request: Any, capsys: Any) -> None:
    url = {"not_redis": lambda: request.getfixturevalue("not_redis"), "dead": dead_url,
           "cluster-dead": lambda: dead_url().replace("redis://", "redis+cluster://", 1),
           "cluster-valkey": lambda: request.getfixturevalue("valkey").url.replace("redis://", "redis+cluster://", 1),
           }[where]()
    code, out, err = run(["audit", url], capsys)
    assert code == cli.EXIT_ENV
    line = one_line(err)  # no blank line first: no progress line was begun
    assert err.startswith("emq audit: ") and url in line and "emq bug" not in line
    assert out == ""


def test_the_bullmq_layout_on_a_server_that_is_not_redis_is_one_line(not_redis: str, capsys: Any) -> None:
    code, _, err = run(["check", "--layout", "bullmq", "--url", not_redis], capsys)
    assert code == cli.EXIT_ENV
    line = one_line(err)
    assert not_redis in line and "emq bug" not in line


@pytest.mark.parametrize("where", ["valkey", "redis_server", "dead"])
def test_a_cluster_url_to_a_plain_node_or_a_dead_port_is_one_line(where: str, request: Any, capsys: Any) -> None:
    url = dead_url() if where == "dead" else request.getfixturevalue(where).url
    cluster = url.replace("redis://", "redis+cluster://", 1)
    code, _, err = run(["check", "--url", cluster], capsys)
    assert code == cli.EXIT_ENV
    assert "redis+cluster://" in one_line(err)


@pytest.mark.parametrize("argv", [
    ["check", "--timeout", "-1"], ["check", "--timeout", "0"], ["check", "--timeout", "nan"],
    ["selftest", "--budget", "0"], ["selftest", "--budget", "-3"], ["selftest", "--budget", "nan"],
    ["bench", "--batch", str(spec.LIMITS["limit_max"] + 1)], ["bench", "--batch", "0"],
    ["bench", "--json", "/nonexistent-emq-dir/figures.json"],
    ["selftest", "--json", "/nonexistent-emq-dir/verdicts.json"],
    ["replay", "--pytest", "/nonexistent-emq-dir/test_x.py", "x.json"],
    ["check", "--write-expect", "/nonexistent-emq-dir/expect.toml"],
])
def test_numeric_flags_and_output_files_are_refused_before_any_work(argv: list[str], capsys: Any) -> None:
    code, out, err = run(argv, capsys)
    assert code == cli.EXIT_ENV
    assert out == ""  # nothing ran: no table header, no figures
    # argparse names the flag, as the refusal of the old ``--json FILE`` does
    assert f"argument {argv[1]}" in err or "no directory /nonexistent-emq-dir" in err.splitlines()[-1]


def test_strict_without_expectations_is_refused(capsys: Any) -> None:
    code, out, err = run(["check", "--strict"], capsys)
    assert code == cli.EXIT_ENV and out == ""
    assert "--strict needs --expect" in one_line(err)


@pytest.mark.parametrize("kind", list(unreadable.KINDS))
def test_an_expectations_file_that_is_no_regular_file_is_one_line_before_it_is_read(kind: str, tmp_path: Path,
                                                                                    capsys: Any) -> None:
    expect = unreadable.make(tmp_path / "expect.toml", kind)
    code, out, err = run(["check", "--expect", str(expect), "--traces", str(tmp_path / "traces")], capsys)
    assert code == cli.EXIT_ENV and out == ""
    assert one_line(err) == f"emq check: cannot read expectations {expect}: {unreadable.KINDS[kind]}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["expect.toml"]  # no traces directory: nothing ran


def test_a_writable_output_file_is_accepted(tmp_path: Path) -> None:
    from emq_kit.cli.common import writable_file

    assert writable_file(str(tmp_path / "new.json")) == str(tmp_path / "new.json")
    assert writable_file("-") == "-"


def test_unwritable_traces_are_refused_before_the_search(tmp_path: Path, capsys: Any) -> None:
    """OUT-1: a traces directory that cannot be made is refused before any work, so a
    counterexample found is never lost on it (tests/e2e/test_harm.py has the other outputs)."""
    scripts = broken_dir(variant("state-not-written"), tmp_path)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    code, out, err = run(["check", "--scripts", str(scripts), "--profile", "dev", "--seed", "1",
                          "--traces", str(blocker / "traces")], capsys)
    assert code == cli.EXIT_ENV and out == ""  # nothing ran
    assert "cannot write traces" in one_line(err) and "is not a directory" in err


GOOD_STEP = {"i": 1, "queue": "alpha", "op": "enqueue", "args": {"id": "JOB00000000001", "payload": {"b64": ""}}}


def trace_doc(**change: Any) -> Any:
    doc = {"format": "emq-trace", "version": 2, "kit_version": "0", "spec_version": spec.SPEC_VERSION,
           "wire_version": spec.WIRE_VERSION, "target": {"target": "fakeredis"}, "seed": 1, "clock": "virtual",
           "steps": [GOOD_STEP], "divergence": None}
    doc.update(change)
    return doc


@pytest.mark.parametrize("doc, where", [
    ([], "(the document)"),
    (None, "(the document)"),
    ("a string", "(the document)"),
    (trace_doc(steps={"i": 1}), "steps"),
    (trace_doc(steps=[1, 2]), "steps/0"),
    (trace_doc(target="fakeredis"), "target"),
    (trace_doc(steps=[{**GOOD_STEP, "op": "explode"}]), "steps/0/op"),
    (trace_doc(steps=[{**GOOD_STEP, "args": {"id": "JOB00000000001"}}]), "steps/0/args"),
    (trace_doc(steps=[{**GOOD_STEP, "args": {**GOOD_STEP["args"], "colour": 1}}]), "steps/0/args"),
    (trace_doc(steps=[{**GOOD_STEP, "queue": "gamma"}]), "steps/0/queue"),
])
def test_a_malformed_trace_is_refused_with_its_json_path(doc: Any, where: str, tmp_path: Path, capsys: Any) -> None:
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(doc))
    code, out, err = run(["replay", str(path)], capsys)
    assert code == cli.EXIT_ENV
    assert out == ""
    assert f"{path}: {where}:" in one_line(err)


def test_the_well_formed_trace_of_the_malformed_ones_replays(tmp_path: Path, capsys: Any) -> None:
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(trace_doc()))
    code, out, _ = run(["replay", str(path)], capsys)
    assert code == cli.EXIT_OK, out


# -- no false kills, no blaming the target for our bugs --------------------------------------


def test_selftest_on_an_unreachable_server_kills_nothing(capsys: Any) -> None:
    code, out, err = run(["selftest", "--url", dead_url(), "--only", "enqueue", "--budget", "5"], capsys)
    assert code == cli.EXIT_ENV
    assert out == ""  # not even the table's header: nothing was judged
    assert "cannot open a queue connection" in one_line(err)


def test_selftest_only_matching_nothing_is_exit_2(capsys: Any) -> None:
    code, out, err = run(["selftest", "--only", "no-mutant-has-this-key"], capsys)
    assert code == cli.EXIT_ENV and out == ""
    assert "matches no mutant" in one_line(err)


def test_summary_of_no_kills_has_no_median() -> None:
    s = summary([])
    assert s["mutants"] == 0 and s["median_seconds_to_kill"] is None and s["median_shrunk_steps"] is None


@pytest.mark.parametrize("where", ["fakeredis", "valkey", "redis_server"])
def test_a_type_error_in_our_client_is_a_kit_bug_not_a_crash(where: str, request: Any,
                                                             monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    url = None if where == "fakeredis" else request.getfixturevalue(where).url

    def broken(self: Queue, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("our own mistake")

    monkeypatch.setattr(Queue, "_claim", broken)
    target = open_target(url, observe=False)
    try:
        with pytest.raises(KitBug, match="TypeError: our own mistake"):
            run_check(target, PROFILES["dev"], examples=5, steps=10, seed=3)
    finally:
        target.close()
    argv = ["check", "--profile", "dev", "--examples", "5", "--steps", "10", "--seed", "3"]
    code, out, err = run(argv + ([] if url is None else ["--url", url]), capsys)
    assert code == cli.EXIT_ENV
    assert "DIFFERS" not in out
    line = one_line(err)
    assert "emq bug" in line and "our own mistake" in line and "report" in line


# -- secrets stay out -------------------------------------------------------------------------

PASSWORD = "pw-not-to-be-seen"


@pytest.fixture(scope="module")
def acl_server() -> Iterator[ServerProcess]:
    """A private Valkey with a user ``emq`` of specs/acl.json's rights and a password."""
    with ServerProcess() as server:
        with server.client() as r:
            r.execute_command(*acl.setuser("emq", PASSWORD).split())
            r.set(keyspace.VERSION_KEY, spec.WIRE_VERSION)  # the user may only read the fence
        yield server


@pytest.fixture(scope="module")
def acl_valkey(acl_server: ServerProcess) -> str:
    """``acl_server``'s URL as its user ``emq``, password and all."""
    return acl_server.url.replace("redis://", f"redis://emq:{PASSWORD}@", 1)


def every_key(server: ServerProcess) -> dict[int, list[bytes]]:
    """The keys of every database of ``server`` that holds any."""
    with server.client() as r:
        held = [int(db[2:]) for db in r.info("keyspace")]
    out = {}
    for db in held:
        with server.client(db=db) as r:
            out[db] = sorted(r.keys("*"))
    return out


@pytest.mark.parametrize("tail, says", [
    ("?bogus=1", "unknown query option 'bogus': a redis:// URL takes db, username, password"),
    ("/0?protocol=3", "unknown query option 'protocol'"),
    ("/abc", "the path '/abc' names no database: it is / or /N, N a non-negative integer"),
    ("/-1", "the path '/-1' names no database"),
    ("?db=abc", "?db='abc' names no database"),
    ("?socket_timeout=abc", "Invalid value for 'socket_timeout'"),
    (":notaport", "Port could not be cast to integer value as 'notaport'"),
    ("/99", "the server refused the connection: DB index is out of range"),  # the server's refusal, on connect
])
@pytest.mark.parametrize("command", ["check", "clean", "audit", "soak", "selftest", "bench"])
def test_a_url_the_client_cannot_read_is_one_line_naming_it_once_and_nothing_is_written(
        command: str, tail: str, says: str, acl_server: ServerProcess, acl_valkey: str, capsys: Any) -> None:
    """docs/server.md "Connecting": every command reads a URL in one place before it
    connects; a URL refused there is one line (never an ``emq bug``), the URL in it once and
    its password masked, and the server holds what it held."""
    url = acl_valkey.rsplit(":", 1)[0] + tail if tail.startswith(":") else acl_valkey + tail
    before = every_key(acl_server)
    code, out, err = run([command, "--url", url], capsys)
    assert code == cli.EXIT_ENV and out == ""
    line = one_line(err)
    shown = url.replace(f"emq:{PASSWORD}@", "***@")
    assert line.startswith(f"emq {command}: {shown}") and line.count(shown) == 1 and says in line, line
    assert "emq bug" not in line and PASSWORD not in out + err
    assert every_key(acl_server) == before


def test_a_password_is_in_no_summary_trace_or_pytest_file(acl_valkey: str, tmp_path: Path, capsys: Any,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    scripts = broken_dir(variant("state-not-written"), tmp_path)
    traces = tmp_path / "traces"
    base = ["check", "--url", acl_valkey, "--scripts", str(scripts), "--profile", "dev", "--seed", "1",
            "--traces", str(traces)]
    code, out, err = run(base, capsys)
    assert code == cli.EXIT_FAIL, out + err
    assert PASSWORD not in out + err and "***@" in out
    code, out, err = run([*base, "--json"], capsys)
    assert PASSWORD not in out + err
    (trace,) = sorted(traces.glob("*.json"))[:1]
    assert PASSWORD not in trace.read_text() and "***@" in trace.read_text()
    test_file = tmp_path / "test_regression.py"
    monkeypatch.delenv("EMQ_URL", raising=False)
    code, out, err = run(["replay", str(trace), "--scripts", str(scripts), "--pytest", str(test_file)], capsys)
    assert PASSWORD not in test_file.read_text()
    assert code == cli.EXIT_ENV and "--url or EMQ_URL" in err  # the secret is the user's to give
    code, out, err = run(["replay", str(trace), "--url", acl_valkey, "--scripts", str(scripts)], capsys)
    assert code == cli.EXIT_FAIL and PASSWORD not in out + err
    monkeypatch.setenv("EMQ_URL", acl_valkey)
    code, out, err = run(["replay", str(trace), "--scripts", str(scripts)], capsys)
    assert code == cli.EXIT_FAIL and PASSWORD not in out + err, err


def test_finite_seconds_reject_infinity() -> None:
    from emq_kit.cli.common import bounded

    seconds = bounded("check --timeout")
    assert seconds("2.5") == 2.5
    with pytest.raises(Exception):
        seconds(str(math.inf))


# -- nothing left behind, nothing wiped silently, progress ---------------------------------


MINE = ("mine", "mine-too")  # a user's queue names, given with --queue


@pytest.mark.parametrize("where", ["valkey", "redis_server"])
def test_a_run_on_a_server_leaves_no_queue_keys_and_refuses_to_wipe_a_users(where: str, request: Any,
                                                                            capsys: Any) -> None:
    server = request.getfixturevalue(where)
    argv = ["check", "--url", server.url, "--profile", "dev", "--examples", "3", "--steps", "10", "--seed", "2",
            "--queue", MINE[0], "--queue", MINE[1]]
    with server.client() as r:
        code, out, err = run(argv, capsys)
        assert code == cli.EXIT_OK, out + err
        assert "queues on the server: alpha as 'mine'" in out
        assert not [k for q in MINE for k in r.scan_iter(match=keyspace.pattern(q))]
        r.hset(keyspace.job_key(MINE[1], POOL[0]), "state", "mine")
        r.zadd(keyspace.queue_keys(MINE[1])[0], {"x": 1})
        code, out, err = run(argv, capsys)
        assert code == cli.EXIT_ENV and out == ""
        assert "already holds 2 key(s)" in one_line(err) and "emq:{mine-too}:pending" in err and "--wipe" in err
        assert r.hget(keyspace.job_key(MINE[1], POOL[0]), "state") == b"mine"  # untouched
        code, out, err = run([*argv, "--wipe"], capsys)
        assert code == cli.EXIT_OK, out + err
        assert not [k for q in MINE for k in r.scan_iter(match=keyspace.pattern(q))]


@pytest.mark.parametrize("where", ["valkey", "redis_server"])
def test_a_run_on_a_server_suffixes_its_queue_names_and_never_meets_a_users(where: str, request: Any,
                                                                             capsys: Any) -> None:
    server = request.getfixturevalue(where)
    argv = ["check", "--url", server.url, "--profile", "dev", "--examples", "3", "--steps", "10", "--seed", "2"]
    with server.client() as r:
        for q in QUEUES:  # a user's queues that happen to bear the machine's own names
            r.hset(keyspace.job_key(q, POOL[0]), "state", "mine")
        before = sorted(r.scan_iter(match="emq:*"))
        code, out, err = run(argv, capsys)
        assert code == cli.EXIT_OK, out + err  # no refusal: the run's names are not these
        (line,) = [x for x in out.splitlines() if "queues on the server" in x]
        names = [part.split(" as ")[1].strip("'") for part in line.split(": ", 1)[1].split(", ")]
        assert [n.rsplit("-", 1)[0] for n in names] == list(QUEUES) and names[0].rsplit("-", 1)[1] == \
            names[1].rsplit("-", 1)[1]
        assert sorted(r.scan_iter(match="emq:*")) == before  # the user's keys, and nothing of the run's
        code, out2, _ = run(argv, capsys)
        assert code == cli.EXIT_OK and line not in out2  # another run, another suffix


@pytest.mark.parametrize("argv, why", [
    (["--queue", "only-one"], "give --queue 2 times"),
    (["--queue", "a", "--queue", "a"], "must differ"),
    (["--queue", "a{b", "--queue", "c"], "--queue 'a{b'"),
])
def test_queue_names_are_checked_before_any_work(argv: list[str], why: str, valkey: Any, capsys: Any) -> None:
    code, out, err = run(["check", "--url", valkey.url, *argv], capsys)
    assert code == cli.EXIT_ENV and out == ""
    assert why in one_line(err)


def test_queue_names_need_a_server(capsys: Any) -> None:
    code, out, err = run(["check", "--queue", "a", "--queue", "b"], capsys)
    assert code == cli.EXIT_ENV and out == ""
    assert "--queue names the run's queues on a server" in one_line(err)


def test_a_trace_replays_on_the_names_its_run_used(valkey: Any, tmp_path: Path, capsys: Any) -> None:
    scripts = broken_dir(variant("state-not-written"), tmp_path)
    code, out, _ = run(["check", "--url", valkey.url, "--scripts", str(scripts), "--profile", "dev", "--seed", "1",
                        "--first", "--traces", str(tmp_path / "traces")], capsys)
    assert code == cli.EXIT_FAIL, out
    (path,) = (tmp_path / "traces").glob("*.json")
    names = json.loads(path.read_text())["target"]["queues"]
    assert sorted(names) == sorted(QUEUES) and all(v.startswith(k + "-") for k, v in names.items())
    with valkey.client() as r:
        r.hset(keyspace.job_key(QUEUES[0], POOL[0]), "state", "mine")  # the machine's plain name: a user's
        code, out, _ = run(["replay", str(path), "--url", valkey.url, "--scripts", str(scripts)], capsys)
        assert code == cli.EXIT_FAIL, out  # the counterexample again, on the run's names
        assert r.hget(keyspace.job_key(QUEUES[0], POOL[0]), "state") == b"mine"
        r.delete(keyspace.job_key(QUEUES[0], POOL[0]))


def test_an_interrupted_run_prints_its_seed_and_keeps_its_steps(tmp_path: Path, ctrl_c: None) -> None:
    proc = subprocess.Popen([str(EMQ), "check", "--profile", "thorough", "--seed", "77", "--traces", "traces"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    line = proc.stderr.readline()  # off a terminal: a line at each phase, and every 10 s
    while not (line.startswith("emq check: searching") and " steps 0 " not in line):  # an example made steps
        assert line.startswith(PROGRESS), line
        line = proc.stderr.readline()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == cli.EXIT_INTERRUPTED, err
    assert "Traceback" not in out + err
    assert "interrupted; seed 77" in err
    assert "(run it again: emq check --seed 77 --profile thorough --traces traces)" in err  # every flag it was given
    (trace,) = (tmp_path / "traces").glob("seed77-interrupted-*.json")
    assert str(trace.relative_to(tmp_path)) in err
    done = subprocess.run([str(EMQ), "replay", str(trace)], capture_output=True, text=True, timeout=300)
    assert done.returncode == cli.EXIT_OK, done.stdout + done.stderr


# -- the client example of docs/library.md runs ------------------------------------------------


def test_the_docs_client_example_runs() -> None:
    readme = (Path(__file__).resolve().parents[2] / "docs" / "library.md").read_text("utf-8")
    marker = "<!-- tests/e2e/test_trust.py runs this example -->\n```python\n"
    assert marker in readme
    code = readme.split(marker, 1)[1].split("```", 1)[0]
    exec(compile(code, "docs/library.md", "exec"), {})  # its asserts are the test


@pytest.mark.parametrize("where", ["valkey", "redis_server"])
def test_a_snapshot_reply_of_another_shape_is_a_snapshot_divergence_not_a_kit_bug(
        where: str, request: Any, tmp_path: Path, capsys: Any) -> None:
    """A port's own snapshot.lua (here ours with its rows put in the dead location's
    place) answers in a shape the client cannot read: the target's difference, shown as
    the step's snapshot divergence with what could not be read, never 'emq bug'."""
    from tests.broken import Broken

    url = request.getfixturevalue(where).url
    scripts = broken_dir(Broken("snapshot-rows-misplaced", "snapshot", "reply[#reply + 1] = rows",
                                "reply[#reply + 0] = rows", "the rows overwrite the dead location"), tmp_path)
    code, out, err = run(["check", "--url", url, "--scripts", str(scripts), "--profile", "dev", "--seed", "1",
                          "--traces", str(tmp_path / "traces")], capsys)
    assert code == cli.EXIT_FAIL, out + err
    assert "emq bug" not in out + err
    assert "the target's snapshot cannot be read" in out and " INV-8)" in out  # its signature: cell, rule

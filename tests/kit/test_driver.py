"""The driver protocol (specs/driver-protocol.md): ``emq check --driver`` against the
reference drivers (model, Python client, Node.js port) and against drivers that are wrong
or fail on purpose (tests/drivers/); the codec; the JSON schema against real traffic.

Every check runs the real ``emq`` command in a subprocess, so a traceback of the kit
would show; servers are the session's throwaway Valkey."""

from __future__ import annotations

import contextlib
import json
import shlex
from pathlib import Path

import jsonschema
import pytest

from emq_kit.check.lanes import CELLS as LANE_CELLS
from emq_kit.ports import protocol
from emq_kit.ports.driver_client import DriverProcess
from emq_live.scripts import ScriptSet
from emq_model import spec
from emq_model.lanes import LaneClaimed
from tests.kit.processes import DRIVERS, EMQ, NODE, PY, check, emq, faulty, verdict

# -- the codec --------------------------------------------------------------------------


def test_bytes_travel_as_base64_and_back() -> None:
    value = {"payload": b"\x00\xff\xfe", "error": "ü", "ids": ["JOB0KHTOWnGLuC"], "n": 7, "none": None}
    wire = json.loads(json.dumps(protocol.encode(value)))
    assert wire["payload"] == {"b64": "AP/+"}
    assert wire["error"] == "ü"  # text stays text: the driver encodes it as UTF-8
    assert protocol.decode(wire) == value


def test_lane_claims_travel_with_their_group_and_dropped_orphans() -> None:
    job = LaneClaimed("JOB0KHTOWnGLuC", b"\x00p", 3, "a.b-c_9")
    for op, answer in (("lane_claim", job), ("lane_claim", None), ("lane_wclaim", [job, job._replace(token=4)]),
                       ("lane_wclaim", [])):
        wire = json.loads(json.dumps(protocol.encode_answer(op, answer, ("JOB0KHTOWnGLuD",))))
        assert protocol.decode_answer(op, wire) == (answer, ("JOB0KHTOWnGLuD",))
    assert protocol.decode_answer("lane_limit", "ok") == ("ok", ())


def test_bad_base64_is_a_protocol_error() -> None:
    with pytest.raises(protocol.ProtocolError, match="bad base64"):
        protocol.decode({"b64": "not base64!"})


@pytest.mark.parametrize("op, ok", [
    ("claim", "ok"),
    ("claim", {"job": {"id": "JOB0KHTOWnGLuC", "payload": "p", "token": 1}, "dropped": []}),
    ("promote", "3"),
    ("counts", [1, 2, 3, 4]),
    ("job", {"payload": "not bytes"}),
    ("enqueue", 1),
    ("lane_claim", {"job": {"id": "JOB0KHTOWnGLuC", "payload": {"b64": ""}, "token": 1}, "dropped": []}),
    ("lane_claim", {"job": {"id": "JOB0KHTOWnGLuC", "payload": {"b64": ""}, "token": 1, "group": 7}, "dropped": []}),
    ("lane_wclaim", {"job": None, "dropped": []}),
    ("lane_wclaim", {"jobs": {}, "dropped": []}),
    ("lane_pause", None),
])
def test_a_result_of_the_wrong_shape_is_refused(op: str, ok: object) -> None:
    with pytest.raises(protocol.ProtocolError, match=f"^{op} answered"):
        protocol.decode_answer(op, ok)


# -- the schema -------------------------------------------------------------------------


def schema() -> dict:
    return json.loads(spec.text("schemas/driver.json"))


def test_schema_names_every_op_and_argument_of_the_table() -> None:
    defs = schema()["$defs"]
    assert set(defs["args"]) == set(protocol.REQUIRED_OPS + protocol.LANE_OPS + protocol.SERVERLESS_OPS
                                    + (protocol.BATCH,))
    assert set(defs["results"]) == set(defs["args"])
    for op, d in {**spec.OPS, **spec.LANE_OPS}.items():
        want = [a["name"] for a in d["args"]] + (["now"] if d["clock"] else [])
        assert list(defs["args"][op]["properties"]) == want, op


def test_every_message_of_a_run_fits_the_schema(tmp_path: Path) -> None:
    log = tmp_path / "wire.jsonl"
    done = check(f"{PY} {DRIVERS / 'recording.py'} {log}", "--profile", "dev", "--examples", "10")
    assert done.returncode == 0, done.stdout + done.stderr
    s = schema()
    message = jsonschema.Draft202012Validator(s)
    result = {op: jsonschema.Draft202012Validator({"$defs": s["$defs"], "$ref": f"#/$defs/results/{op}"})
              for op in s["$defs"]["results"]}
    lines = log.read_text("utf-8").splitlines()
    assert len(lines) > 100
    ops = set()
    for request, reply in zip(lines[0::2], lines[1::2]):
        request, reply = json.loads(request), json.loads(reply)
        message.validate(request)
        message.validate(reply)
        assert reply["id"] == request["id"]
        if "ok" in reply:
            result[request["op"]].validate(reply["ok"])
        ops.add(request["op"])
        ops.update(call["op"] for call in request.get("args", {}).get("calls", []))  # a window's batch (DP-20)
    assert {"init", "reset", "claim", "snapshot", "shutdown", "lane_claim", "lane_wclaim"} <= ops


# -- reference drivers conform ----------------------------------------------------------


def test_the_model_driver_conforms() -> None:
    done = check(f"{shlex.quote(str(EMQ))} driver --model", "--profile", "dev")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "INCONCLUSIVE (no-divergence)" in done.stdout and "driver" in done.stdout


def test_a_deep_run_through_a_driver_says_once_it_reads_whole() -> None:
    """DEPTH-3: a driver's snapshot is its port's whole one; a deep run says so once,
    however many examples ask, and goes on."""
    done = check(f"{shlex.quote(str(EMQ))} driver --model", "--profile", "dev", "--examples", "3", "--steps", "5",
                 "--depth", "30")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr.count("read whole: a driver answers its queue's whole snapshot") == 1, done.stderr


def test_the_python_driver_conforms_on_valkey(valkey) -> None:
    done = check(f"{shlex.quote(str(EMQ))} driver --live", "--url", valkey.url, "--profile", "dev")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "INCONCLUSIVE (no-divergence)" in done.stdout and "valkey" in done.stdout


def test_emq_scripts_writes_the_scripts_as_the_python_client_loads_them(node_scripts: Path) -> None:
    for name, script in ScriptSet().scripts.items():
        assert (node_scripts / f"{name}.lua").read_bytes() == script.source.encode("utf-8"), name
    assert (node_scripts / "transitions.json").read_text("utf-8") == spec.text("transitions.json")


def test_the_node_port_conforms_on_valkey(valkey, node_scripts: Path) -> None:
    done = check(f"node {NODE / 'driver.js'} --scripts {node_scripts}", "--url", valkey.url, "--profile", "ci")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "CONFORMS" in done.stdout and "emq-node" in done.stdout
    cells = len(spec.cells()) + len(LANE_CELLS)  # its lane ops are checked like the core
    assert f"cells {cells}/{cells}" in done.stdout


@pytest.mark.parametrize("which", ["model", "python", "node"])
def test_a_shipped_driver_exits_0_after_shutdown_with_its_input_still_open(which: str, valkey,
                                                                           node_scripts: Path) -> None:
    """DP-18: ``shutdown`` is answered, then the driver exits 0 of itself; the end of its
    stdin is not what ends it (the kit closes it only after, and a driver that lingered
    would cost every run a ``--timeout``)."""
    argv = {"model": [str(EMQ), "driver", "--model"], "python": [str(EMQ), "driver", "--live"],
            "node": ["node", str(NODE / "driver.js"), "--scripts", str(node_scripts)]}[which]
    driver = DriverProcess(argv, timeout=30)
    try:
        driver.request("init", {"protocol": 2, "url": None if which == "model" else valkey.url, "queues": ["dp18"],
                                "clock": "virtual"})
        assert driver.request("shutdown", {}) is None
        assert driver.proc.wait(timeout=30) == 0  # its stdin still open: we have not closed it
    finally:
        driver.kill()


# -- wrong and failing drivers are judged, at the step -----------------------------------


def test_a_sloppy_complete_is_rejected_with_a_readable_counterexample(valkey) -> None:
    d = verdict(check(f"{PY} {DRIVERS / 'sloppy_complete.py'}", "--url", valkey.url, "--profile", "ci", "--steps", "20",
                      "--first", "--json"))  # its first difference: a search for more cost most of a minute
    assert d["shrunk_steps"][-1]["op"] == "complete", d
    # a stale token answered ok, or a late ack that left the id in pending
    assert (d["signature"]["rule"], d["kind"]) in {("T-complete", "answer"), ("INV-8", "snapshot")}, d


@pytest.mark.parametrize("mode, op, kind, words", [
    ("exit", "claim", "DriverExited", "exited with code 3 before answering"),
    ("hang", "claim", "DriverTimeout", "within 2 s; driver killed"),
    ("garbage", "enqueue", "DriverGarbage", "'this is not JSON"),
    ("shape", "claim", "ProtocolError", 'claim answered "sure"'),
    # a child of the driver held its output open: the run waited as long as it lived, and
    # named the driver's exit a timeout
    ("orphan", "claim", "DriverExited", "exited with code 5 before answering"),
    ("nested", "claim", "DriverGarbage", "'{\"id\": "),  # was emq bug: RecursionError, exit 2
    ("nan", "claim", "DriverGarbage", '"ok": NaN}'),  # was taken, and written bare into the trace
])
def test_a_failing_driver_is_reported_at_the_step(mode: str, op: str, kind: str, words: str, valkey) -> None:
    d = verdict(check(faulty(mode, op), "--url", valkey.url, "--profile", "dev", "--examples", "5", "--steps", "10",
                      "--timeout", "2", "--json"))
    if mode == "orphan":  # its child is killed with it (the driver's process group)
        assert not _running(f"faulty.py {mode} {op}"), "a process of the driver outlived the run"
    assert d["kind"] == "answer" and d["signature"]["rule"] == spec.rule(op), d
    assert d["evidence"][1].startswith(f"target answered raised {kind}") and words in d["evidence"][1], d
    if mode == "exit":
        assert "stderr: faulty: exiting at claim on purpose" in d["evidence"][1]
    last = d["shrunk_steps"][d["step"] - 1]
    assert last["op"] == op and kind in json.dumps(last["target"]), d  # named at its step


def _running(words: str) -> bool:
    """Whether a process whose command line holds ``words`` runs."""
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            if words.encode() in cmdline.read_bytes().replace(b"\0", b" "):
                return True
    return False


@pytest.mark.parametrize("mode", ["exit", "garbage"])
def test_a_serverless_driver_failing_at_a_steps_snapshot_differs_there(mode: str,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """DP-17: a serverless driver answers the step, then dies (or answers garbage) at the
    snapshot the kit asks next: the step's snapshot divergence, listed with its seed and
    trace. (It ended the run as the environment's, exit 2,
    one line, no seed: the kit asks a serverless port its snapshot outside the step.)"""
    monkeypatch.setenv("FAULTY_SERVERLESS", "1")
    d = verdict(check(f"{faulty(mode, 'snapshot')} 3", "--profile", "dev", "--examples", "5", "--json"))
    assert d["kind"] == "snapshot" and "the target's snapshot cannot be read: raised " in d["evidence"][0], d


def test_a_driver_breaking_the_batch_on_every_batch_differs_at_the_first(valkey) -> None:
    """DP-21, DP-17: a batch answered one reply short is garbage, the driver's death,
    listed as met. (It was a plain crash, replayed call by call, where no batch is sent
    and the driver is right: INCONCLUSIVE, "not deterministic", the breach unnamed.)"""
    done = check(faulty("short", "batch"), "--url", valkey.url, "--profile", "dev", "--examples", "5")
    assert done.returncode == 1 and "DIFFERS" in done.stdout and "INCONCLUSIVE" not in done.stdout, done.stdout
    assert "raised DriverGarbage" in done.stdout and "replies; driver killed" in done.stdout, done.stdout


def test_a_drivers_own_words_reach_the_terminal_inert_and_bounded(valkey) -> None:
    """DP-16: what a driver says is shown as text: an escape sequence (clear the screen,
    set the clipboard: OSC 52), a carriage return, a lone surrogate and a megabyte of it
    were printed as they came (a lone surrogate ended the run as ``emq bug``), and a
    driver's name so in the header."""
    said = check(faulty("words", "claim"), "--url", valkey.url, "--profile", "dev", "--examples", "5")
    named = check(faulty("name", "init"), "--url", valkey.url, "--profile", "dev", "--examples", "2")
    assert (said.returncode, named.returncode) == (1, 0), said.stderr + named.stderr
    shown = said.stdout + said.stderr + named.stdout + named.stderr
    assert not any(c in shown for c in "\x1b\x07\r"), [line for line in shown.splitlines() if "\x1b" in line][:3]
    assert "\\x1b[2J\\x1b]52;c;cHduZWQ=\\x07\\x0dhidden \\ud800 MMM" in said.stdout, said.stdout[:2000]
    assert "more characters)" in said.stdout and len(said.stdout) < 100_000
    assert "\\x1b]0;EVIL\\x07\\x1b[31mport" in named.stdout


def test_a_trace_records_the_driver_and_replays_through_it(valkey, tmp_path: Path) -> None:
    cmd = faulty("exit", "reap")
    d = verdict(check(cmd, "--url", valkey.url, "--profile", "dev", "--steps", "10", "--first", "--json",
                      "--timeout", "7", cwd=tmp_path))
    trace = json.loads((tmp_path / d["trace"]).read_text("utf-8"))
    assert trace["target"]["driver"] == cmd
    assert d["replay"].endswith(f"--driver {shlex.quote(cmd)} --timeout 7"), d["replay"]  # the run's own timeout
    hung = emq("replay", d["trace"], "--driver", faulty("hang", "reap"), "--timeout", "0.5", cwd=tmp_path)
    assert hung.returncode == 1 and "within 0.5 s" in hung.stdout, hung.stdout + hung.stderr
    refused = emq("replay", d["trace"], cwd=tmp_path)  # a trace is data: its driver runs only when given (TR-9)
    assert refused.returncode == 2 and f"--driver {shlex.quote(cmd)}" in refused.stderr, refused.stderr
    handed = tmp_path / "handed.json"  # anyone's file: a command in it with escape sequences is shown inert
    handed.write_text(json.dumps({**trace, "target": {**trace["target"], "driver": "x\x1b]52;c;cHduZWQ=\x07"}}))
    inert = emq("replay", str(handed), cwd=tmp_path)
    assert inert.returncode == 2 and "\x1b" not in inert.stderr and "--driver 'x\\x1b]52" in inert.stderr, inert.stderr
    again = emq("replay", d["trace"], "--driver", cmd, cwd=tmp_path)  # the server comes from the header
    assert again.returncode == 1 and "raised DriverExited" in again.stdout, again.stdout + again.stderr


@pytest.mark.parametrize("cmd, url, words", [
    ("/nonexistent/driver", None, "cannot start /nonexistent/driver"),
    (f"{shlex.quote(str(EMQ))} driver --live", None, "needs a server"),
    (f"{shlex.quote(str(EMQ))} driver --model", "valkey", "has no server"),
    (f"{PY} -c 'import sys; sys.stdin.readline()'", None, "before answering request 1 (init)"),
    ("'unbalanced", None, "cannot split"),
    (faulty("shape", "init"), "valkey", 'init failed: init answered "sure"'),
    (faulty("ops-type", "init"), "valkey", "init failed: init answered"),  # was emq bug: TypeError
    (faulty("bool-protocol", "init"), "valkey", "init failed: the driver speaks protocol True"),
    (faulty("batch0", "init"), "valkey", "init failed: batch_max is 0, expected a positive integer"),
])
def test_a_driver_that_cannot_start_is_one_line_and_exit_2(cmd: str, url: str | None, words: str, request) -> None:
    extra = ["--url", request.getfixturevalue("valkey").url] if url else []
    done = check(cmd, *extra, "--profile", "dev")
    assert done.returncode == 2, done.stdout + done.stderr
    assert words in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_a_driver_lacking_an_op_outside_the_core_is_checked_with_its_cells_not_implemented(valkey) -> None:
    done = check(faulty("lacking", "init"), "--url", valkey.url, "--profile", "dev")
    assert done.returncode == 0 and "cells not implemented (ops not sent: reap; raw calls" in done.stdout, done.stdout + done.stderr

"""The library's front door (emq_kit/__init__.py, emq_kit/api.py,
emq_kit/check/options.py): its docstrings' examples run as written; ``CheckOptions`` is
the one value the command line, the pytest plugin and a task in another process build
(checked when made, pickled across processes, and written back as the rerun line that
``emq check`` parses into the same options); ``import emq_kit`` loads none of the engine,
and ``emq_kit.check`` stays the function."""

from __future__ import annotations

import doctest
import json
import pickle
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import pytest

import emq_kit
from emq_kit import api, cli
from emq_kit.check import options as options_module
from emq_kit.check.options import CheckOptions
from emq_kit.cli.check import options_of
from emq_kit.errors import BadArgument
from emq_kit.server import ServerProcess
from emq_model import spec


@pytest.mark.parametrize("module", [emq_kit, api, options_module], ids=lambda m: m.__name__)
def test_the_docstring_examples_run_as_written(module: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # a check's default traces directory, .emq/traces, is made here if at all
    found = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert found.attempted >= 2 and found.failed == 0


def test_the_readme_library_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text("utf-8")
    marker = "<!-- tests/e2e/test_api.py runs this example -->\n```python\n"
    assert marker in readme
    monkeypatch.chdir(tmp_path)
    exec(compile(readme.split(marker, 1)[1].split("```", 1)[0], "README.md", "exec"), {})  # its asserts are the test


def test_the_public_names() -> None:
    assert set(emq_kit.__all__) >= {"check", "replay", "open_target", "Report", "Difference", "PROFILES", "Profile",
                                    "CheckOptions", "ReplayReport", "KitError"}
    for name in emq_kit.__all__:
        assert getattr(emq_kit, name) is not None, name
    assert emq_kit.Report.__module__ == "emq_kit.check.run" and emq_kit.PROFILES["ci"].gate


def test_import_emq_kit_loads_no_engine_and_check_stays_the_function() -> None:
    code = ("import sys, emq_kit; assert 'hypothesis' not in sys.modules and 'emq_kit.check.machine' not in sys.modules;"
            "import emq_kit.check.run, emq_kit.check.machine;"
            "from emq_kit.check.run import run_check;"
            "assert emq_kit.check is emq_kit.api.check and callable(emq_kit.check);"
            "assert sys.modules['emq_kit.check'].__path__")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("fields, why", [
    ({"examples": 0}, "argument --examples: must be at least 1, got 0"),
    ({"seed": 2**64}, "argument --seed: must be at most"),
    ({"steps": "10"}, "argument --steps: not an integer: '10'"),
    ({"timeout": True}, "argument --timeout: not a number: True"),
    ({"profile": "nope"}, "argument --profile: invalid choice: 'nope' (choose from 'ci', 'dev', 'thorough')"),
    ({"hostile": "some"}, "argument --hostile: invalid choice: 'some'"),
    ({"ops": ("claim", "fly")}, "unknown ops fly; ops are enqueue"),
    ({"ops": "claim"}, "argument --ops: not a sequence of names: 'claim'"),
    ({"clock": "server"}, "--clock server needs a server: give --url"),
    ({"strict": True}, "--strict needs --expect FILE"),
    ({"refence": True}, "--refence sets {emq}:version on a server for the run: it needs --url"),
    ({"queues": ("a", "b")}, "--queue names the run's queues on a server: it needs --url"),
    ({"queues": ("a",), "url": "redis://h:1"}, "the run uses 2 queues: give --queue 2 times (got 1)"),
    ({"wipe": "yes"}, "argument --wipe: not True or False: 'yes'"),
    ({"wipe": True}, "--wipe lets the run delete keys a server already holds: it needs --url"),
    ({"depth": None}, "argument --depth: not an integer: None"),
    ({"shrink_steps": None}, "argument --shrink-steps: not an integer: None"),
    ({"traces": None}, "argument --traces: not a string: None"),
    ({"queues": None}, "argument --queue: not a sequence of names: None"),
    ({"ops": None}, "argument --ops: not a sequence of names: None"),
    ({"ops": 5}, "argument --ops: not a sequence of names: 5"),
    ({"url": "http://x"}, "http://x: the scheme must be one of redis,"),
    ({"url": b"redis://:pw@h"}, "a server URL is a str such as 'redis://host:6379/0', got bytes"),
])
def test_options_are_checked_when_made(fields: dict[str, Any], why: str) -> None:
    with pytest.raises(BadArgument) as refused:
        CheckOptions(**fields)
    assert str(refused.value).startswith(why), str(refused.value)


def test_a_field_that_is_no_option_is_refused_by_name() -> None:
    for call in (lambda: CheckOptions().replace(bogus=1), lambda: emq_kit.check(bogus=1)):
        with pytest.raises(BadArgument, match="^unknown options 'bogus'; they are url, scripts, driver"):
            call()


@pytest.mark.parametrize("given", ["dev", {"profile": "dev"}])
def test_check_takes_options_or_fields_by_name(given: Any) -> None:
    with pytest.raises(BadArgument, match="^options are a CheckOptions"):
        emq_kit.check(given)


BASE_TRACE = {"format": "emq-trace", "version": 1, "kit_version": "0.1.0", "spec_version": spec.SPEC_VERSION,
              "wire_version": spec.WIRE_VERSION, "target": {"target": "fakeredis"}, "seed": 0,
              "clock": "virtual", "divergence": None,
              "steps": [{"i": 1, "queue": "alpha", "op": "enqueue", "args": {"id": "JOB00000000001", "payload": "x"}}]}


@pytest.mark.parametrize("fields, why", [
    ({"clock": "wall"}, "argument --clock: invalid choice: 'wall' (choose from 'virtual', 'server')"),
    ({"clock": 5}, "argument --clock: invalid choice: 5"),
    ({"timeout": -1}, "argument --timeout: must be above 0 seconds, got -1"),
    ({"timeout": "x"}, "argument --timeout: not a number: 'x'"),
    ({"timeout": float("nan")}, "argument --timeout: must be a finite number, got nan"),
    ({"timeout": 3601}, "argument --timeout: must be at most 3,600"),
    ({"wipe": "no"}, "argument --wipe: not True or False: 'no'"),
    ({"url": 5}, "a server URL is a str such as 'redis://host:6379/0', got int"),
    ({"url": Path("x")}, "a server URL is a str such as 'redis://host:6379/0', got PosixPath"),
    ({"url": b"redis://:pw@h"}, "a server URL is a str such as 'redis://host:6379/0', got bytes"),
    ({"url": "http://:pw@x"}, "http://***@x: the scheme must be one of"),
    ({"scripts": 5}, "argument --scripts: not a string: 5"),
    ({"driver": 5}, "argument --driver: not a string: 5"),
    ({"say": 5}, "say is called by the run: a function, got 5"),
    ({"trace": None}, "the trace is a file's path (a str or a Path), got NoneType"),
    ({"trace": BASE_TRACE}, "the trace is a file's path (a str or a Path), got dict"),
    ({"trace": b"t.json"}, "the trace is a file's path (a str or a Path), got bytes"),
])
def test_replay_checks_every_argument_before_it_runs(fields: dict[str, Any], why: str, tmp_path: Path) -> None:
    """``replay``'s arguments, refused with the ranges and words of ``emq replay``'s
    parser (and ``CheckOptions``') before the trace is even read."""
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps(BASE_TRACE), "utf-8")
    with pytest.raises(BadArgument) as refused:
        emq_kit.replay(fields.pop("trace", trace), **fields)
    assert str(refused.value).startswith(why) and "pw" not in str(refused.value), str(refused.value)
    assert emq_kit.replay(trace).conforms  # the same trace, its arguments good


@pytest.mark.parametrize("call", [
    lambda url, tmp: emq_kit.replay(tmp / "t.json", url=url, scripts=5),
    lambda url, tmp: emq_kit.replay(tmp / "t.json", url=url, driver=5),
    lambda url, tmp: emq_kit.check(url=url, depth=None, traces=str(tmp), profile="dev"),
    lambda url, tmp: emq_kit.check(url=url, progress=5, traces=str(tmp), profile="dev"),
], ids=["replay scripts=5", "replay driver=5", "check depth=None", "check progress=5"])
def test_a_refused_argument_sends_the_server_nothing(call: Any, valkey: ServerProcess, tmp_path: Path) -> None:
    """Every argument is checked before anything runs: the server named hears not one
    command (no claim of the run, no script loaded) before the refusal."""
    from tests.livekit import Monitor

    (tmp_path / "t.json").write_text(json.dumps(BASE_TRACE), "utf-8")
    with valkey.client() as r:
        watch = Monitor(valkey.url, r)
        try:
            with pytest.raises(BadArgument):
                call(valkey.url, tmp_path)
            assert watch.lines() == []
        finally:
            watch.close()


EVERY_FLAG = ["--url", "redis://u:secret@h:1/0", "--scripts", "lua", "--timeout", "2.5", "--clock", "server",
              "--examples", "7", "--steps", "9", "--shrink-steps", "0", "--profile", "thorough", "--queue", "a",
              "--queue", "b", "--traces", "tr", "--first", "--ops", "claim,extend", "--skip-ops", "remove",
              "--hostile", "only", "--expect", "x.toml", "--strict", "--refence"]


@pytest.mark.parametrize("argv", [[], EVERY_FLAG, ["--layout", "bullmq", "--url", "redis://h:1"]],
                         ids=["defaults", "every flag", "bullmq"])
def test_the_rerun_line_parses_back_into_the_same_options(argv: list[str]) -> None:
    """What the command line builds, written as the rerun line, is parsed by ``emq check``
    into the same options (with the seed), and the value pickles."""
    options = options_of(cli.parser().parse_args(["check", *argv]))
    assert pickle.loads(pickle.dumps(options)) == options and hash(options) == hash(pickle.loads(pickle.dumps(options)))
    line = options.command(seed=41)
    again = options_of(cli.parser().parse_args(_split(line)[1:]))
    secretless = options.replace(url=None if options.url is None else options.url.replace("u:secret", "***"))
    assert again == secretless.replace(seed=41)


def _split(line: str) -> list[str]:
    import shlex

    return shlex.split(line)


def _task(pickled: bytes) -> dict[str, Any]:
    """A campaign's task: options in (as a scheduler ships them), the versioned report out."""
    import datetime as dt

    from emq_kit.report.document import check_document

    options = pickle.loads(pickled)
    started = dt.datetime.now(dt.timezone.utc)
    report = emq_kit.check(options)
    return check_document(report, exit=report.exit_code, started=started, finished=dt.datetime.now(dt.timezone.utc),
                          rerun=report.rerun)


def test_a_check_runs_as_a_task_in_another_process(valkey: ServerProcess, tmp_path: Path) -> None:
    options = CheckOptions(url=valkey.url, profile="dev", seed=3, examples=5, steps=10, traces=str(tmp_path / "t"))
    with valkey.client() as r:
        before = sorted(r.scan_iter(match="*"))
    with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
        document = pool.submit(_task, pickle.dumps(options)).result(timeout=600)
    from emq_kit.report.document import validate

    validate(document)
    assert (document["verdict"], document["detail"], document["exit"], document["seed"]) == ("inconclusive", "no-divergence", 0, 3)
    assert document["check"]["rerun"] == options.command(3)
    with valkey.client() as r:  # OWN-1: the task's run left nothing
        assert sorted(r.scan_iter(match="*")) == before


def test_a_library_check_says_what_the_kit_did_and_raises_what_stopped_it(tmp_path: Path) -> None:
    said: list[str] = []
    with pytest.raises(emq_kit.KitError) as stopped:
        emq_kit.check(url="redis://127.0.0.1:1", profile="dev", traces=str(tmp_path), say=said.append)
    assert "127.0.0.1:1" in str(stopped.value) and stopped.value.exit_code == 2
    report = emq_kit.check(profile="dev", seed=2, examples=3, steps=5, first=True, traces=str(tmp_path),
                           say=said.append)
    assert report.rerun == "emq check --seed 2 --profile dev --examples 3 --steps 5 --traces " + str(tmp_path) + \
        " --first" and said == []


def test_a_check_keeps_nothing_of_its_run_once_it_returns(tmp_path: Path) -> None:
    """A process that runs check after check (the pytest plugin, a campaign's worker)
    holds no run past its report: its steps, its differences and their frames are freed
    when the report is. (A machine class made per run was kept by Hypothesis, and each
    run with it.)"""
    import gc
    import weakref

    from emq_kit.check.tally import Run

    runs: list[weakref.ref[Run]] = []

    def progress(run: Run) -> None:
        if not runs:
            runs.append(weakref.ref(run))

    report = emq_kit.check(profile="dev", seed=3, examples=5, steps=20, traces=str(tmp_path), progress=progress,
                           say=lambda line: None)
    assert report.examples == 5 and runs
    del report
    gc.collect()
    assert runs[0]() is None, gc.get_referrers(runs[0]())

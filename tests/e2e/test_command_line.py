"""The ``emq`` command line: a command loads its own module, not every command's
(``emq_kit.cli``), and the parser it parses with is the whole one's for that command."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

from emq_kit import cli

LOADED = """
import json, sys
from emq_kit.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as stop:  # --help
    code = stop.code
print(json.dumps([code, sorted(sys.modules)]))
"""
"""Run one command line in a fresh interpreter; print its exit code and every module loaded."""


def _loaded(*argv: str, stdin: str = "") -> tuple[int, set[str]]:
    done = subprocess.run([sys.executable, "-c", LOADED, *argv], capture_output=True, text=True, timeout=120,
                          input=stdin)
    code, modules = json.loads(done.stdout.splitlines()[-1])
    return code, set(modules)


SESSION = [
    {"id": 1, "op": "init", "args": {"protocol": 2, "url": None, "queues": ["alpha"], "clock": "virtual"}},
    {"id": 2, "op": "enqueue", "queue": "alpha", "args": {"id": "JOB00000000001", "payload": {"b64": "cA=="}}},
    {"id": 3, "op": "claim", "queue": "alpha", "args": {"lease_ms": 5, "now": 1}},
    {"id": 4, "op": "complete", "queue": "alpha", "args": {"id": "JOB00000000001", "token": 0}},
    {"id": 5, "op": "snapshot", "queue": "alpha", "args": {}},
    {"id": 6, "op": "reset", "args": {}},
    {"id": 7, "op": "shutdown", "args": {}},
]
"""A model driver's session as a run drives it: init, calls (a refusal among them), a
snapshot, a reset, shutdown."""


def test_a_serverless_driver_starts_without_the_engine_or_an_embedded_server() -> None:
    """``emq driver --model`` (a port's oracle, started once per run) loads its own
    command's module alone: neither the engine (Hypothesis), the embedded server
    (fakeredis) nor the client (redis-py: the model's target is a module of its own,
    emq_kit/check/model_target.py), no other command."""
    code, modules = _loaded("driver", "--model", stdin="".join(json.dumps(r) + "\n" for r in SESSION))
    assert code == 0
    assert "emq_kit.check.model_target" in modules  # the session ran: init opened the model
    commands = {m for m in modules if m.startswith("emq_kit.cli.")} - {"emq_kit.cli.common"}
    assert commands == {"emq_kit.cli.driver"}
    assert not {m.split(".")[0] for m in modules} & {"hypothesis", "fakeredis", "lupa", "redis", "hiredis"}
    assert not modules & {"emq_live.client", "emq_kit.check.live"}


def test_a_command_loads_no_other_commands_module() -> None:
    code, modules = _loaded("replay", "--help")
    assert code == 0
    assert "emq_kit.cli.replay" in modules
    assert not modules & {f"emq_kit.cli.{m}" for m in cli.COMMANDS if m != "replay"}


@pytest.mark.parametrize("argv", [("check", "--examples", "abc"), ("check", "--profile", "nope"), ("check", "--help"),
                                  ("campaign", "--seeds", "x"), ("selftest", "--budget", "x"), ("selftest", "--help"),
                                  ("soak", "--workers", "x"), ("matrix",), ("bench", "--repeat", "x"), ("--version",)])
def test_a_usage_error_or_the_help_of_a_run_loads_no_engine(argv: tuple[str, ...]) -> None:
    """A check's parser names its profiles from emq_kit/check/profiles.py, and a run's
    engine and printers (the mutants' judge, the pages) load once the arguments are good:
    a mistyped option is told without Hypothesis, the client or the embedded server, and
    ``--version`` reads no command at all."""
    code, modules = _loaded(*argv)
    assert code == (0 if argv[-1] in ("--help", "--version") else 2)
    assert not {m.split(".")[0] for m in modules} & {"hypothesis", "fakeredis", "lupa", "redis"}
    assert not modules & {"emq_kit.check.run", "emq_kit.check.machine", "emq_kit.report.html"}
    if argv == ("--version",):
        assert not {m for m in modules if m.startswith("emq_kit.cli.")} - {"emq_kit.cli.common"}


def test_the_whole_help_reads_every_command_and_no_engine() -> None:
    """``emq --help`` lists every command from its module; none of them loads the engine
    (audit and scripts name the client's errors: redis-py is allowed)."""
    code, modules = _loaded("--help")
    assert code == 0 and {f"emq_kit.cli.{m}" for m in cli.COMMANDS} <= modules
    assert not {m.split(".")[0] for m in modules} & {"hypothesis", "fakeredis", "lupa"}
    assert not modules & {"emq_kit.check.run", "emq_kit.check.machine", "emq_kit.bench", "emq_kit.report.html"}


def test_a_trace_that_cannot_be_read_is_told_before_the_machine_loads(tmp_path) -> None:
    """``emq replay`` reads its trace before it loads its printer (and with it the machine
    and the client); reading a trace takes the faults' vocabulary, and Hypothesis with it."""
    (tmp_path / "bad.json").write_text("{}")
    for trace in (str(tmp_path / "missing.json"), str(tmp_path / "bad.json")):
        code, modules = _loaded("replay", trace)
        assert code == 2
        assert not {m.split(".")[0] for m in modules} & {"fakeredis", "lupa", "redis"}
        assert not modules & {"emq_kit.check.run", "emq_kit.check.machine"}


def test_a_check_without_a_page_loads_no_page_module() -> None:
    """The HTML pages' module (and the soak's history it draws from) load for ``--html``
    alone."""
    code, modules = _loaded("check", "--profile", "dev", "--examples", "2", "--steps", "3", "--seed", "1")
    assert code == 0 and "emq_kit.cli.check" in modules
    assert not modules & {"emq_kit.report.html", "emq_kit.soak.history"}


def _subcommands(p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (sub,) = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


@pytest.mark.parametrize("command", list(cli.COMMANDS))
def test_a_commands_own_parser_is_the_whole_ones(command: str) -> None:
    """What ``main`` parses ``emq COMMAND ...`` with (that command's parser alone) is
    the whole command line's for it: the same options, help and defaults."""
    alone, whole = _subcommands(cli.parser(command)), _subcommands(cli.parser())
    assert list(alone) == [command] and list(whole) == list(cli.COMMANDS)
    assert alone[command].format_help() == whole[command].format_help()
    assert _options(alone[command]) == _options(whole[command])


def _options(p: argparse.ArgumentParser) -> list[tuple[object, ...]]:
    return [(a.dest, tuple(a.option_strings), a.default, getattr(a.type, "__qualname__", a.type), a.choices, a.required)
            for a in p._actions]


@pytest.mark.parametrize("argv", [[], ["nosuch"], ["--bogus"]])
def test_a_line_naming_no_command_is_refused_by_the_whole_parser(argv: list[str],
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """A command line whose first word is no command is parsed by the whole parser: one
    line, exit 2, and a word that is no command is told the commands there are."""
    with pytest.raises(SystemExit) as stop:
        cli.main(argv)
    err = capsys.readouterr().err
    assert stop.value.code == cli.EXIT_ENV and len(err.strip().splitlines()) == 1
    assert argv != ["nosuch"] or "'check'" in err and "'scripts'" in err, err


FROZEN = """
import gc, sys
from emq_kit.cli import main
sys.argv = ["emq", *sys.argv[1:]]
called = main(sys.argv[1:])  # called by code that goes on: its objects stay collectable
before = gc.get_freeze_count()
ran = main()  # run as the process itself
print(called, before, ran, gc.get_freeze_count() > 0)
"""


def test_the_process_ends_without_walking_its_objects_and_a_caller_keeps_collecting() -> None:
    """Run as the process, ``main`` leaves the run's objects to the exit (no last walk of
    the collector over them); called by code that goes on, it leaves the collector as it
    was."""
    argv = ["check", "--profile", "dev", "--examples", "2", "--steps", "3", "--seed", "1", "--no-corpus"]
    done = subprocess.run([sys.executable, "-c", FROZEN, *argv], capture_output=True, text=True, timeout=120)
    assert done.stdout.split()[-4:] == ["0", "0", "0", "True"], done.stdout + done.stderr

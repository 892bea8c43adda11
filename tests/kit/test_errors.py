"""One error tree (emq_kit/errors.py): every error class of the kit is defined there, or
is an internal signal of emq_kit/_signals.py; each carries its exit code and how it is
shown, and ``emq`` shows any of them in one place; a driver that cannot start is the
environment's (exit 2), a driver that fails once started is the target's behaviour (a
``TargetFault``, a divergence at its step)."""

from __future__ import annotations

import ast
import inspect
import sys
from pathlib import Path
from typing import Any

import pytest

from emq_kit import cli, errors
from emq_kit.errors import (
    EXIT_ENV,
    EXIT_FAIL,
    DriverError,
    DriverExited,
    DriverUnavailable,
    KitBug,
    KitError,
    TargetFault,
    TargetUnavailable,
)

KIT = Path(__file__).resolve().parents[2] / "emq_kit"

VERDICT_CARRIERS = {
    ("emq_kit/check/step.py", "Divergence"),  # a difference, raised for Hypothesis to shrink
    ("emq_kit/check/step.py", "ModelBroken"),  # the model broke its own invariant: a failed test
    ("emq_kit/pytest_plugin.py", "EmqFailure"),  # a pytest item's failure: its text is the verdict
}
"""Exception classes outside the tree: verdicts carried to a test runner, not endings of
a command."""


def _exception_classes() -> list[tuple[str, str]]:
    """(file, class) for every class in emq_kit whose bases name an exception."""
    names = {name for name, obj in vars(errors).items() if inspect.isclass(obj) and issubclass(obj, BaseException)}
    names |= {"Exception", "BaseException", "ValueError", "RuntimeError", "AssertionError", "KeyboardInterrupt",
              "ConnectionError", "OSError"}
    found = []
    for path in sorted(KIT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.ClassDef):
                bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
                if bases & names or any(b.endswith(("Error", "Exception")) for b in bases):
                    found.append((str(path.relative_to(KIT.parent)), node.name))
    return found


def test_every_error_class_is_in_the_tree_or_a_signal() -> None:
    found = _exception_classes()
    assert ("emq_kit/errors.py", "KitError") in found  # the walk sees the tree
    stray = [c for c in found if c[0] not in ("emq_kit/errors.py", "emq_kit/_signals.py") and c not in VERDICT_CARRIERS]
    assert stray == []


def _kit_errors() -> list[type[KitError]]:
    return [obj for obj in vars(errors).values() if inspect.isclass(obj) and issubclass(obj, KitError)]


def test_each_kit_error_carries_its_exit_code_and_its_line() -> None:
    assert len(_kit_errors()) >= 19  # the walk sees the tree
    for kind in _kit_errors():
        expected = EXIT_FAIL if kind is errors.Wrong else EXIT_ENV
        assert kind.exit_code == expected, kind
    assert errors.Usage("no --url").show("check") == "emq check: no --url"
    assert KitBug(TypeError("x"), where="mutant 1 of 2").show("selftest").startswith(
        "emq selftest: emq bug in mutant 1 of 2: TypeError: x (please report it")


def test_a_driver_that_cannot_start_is_the_environment_one_that_fails_is_the_target() -> None:
    assert issubclass(DriverUnavailable, TargetUnavailable)
    assert issubclass(DriverError, TargetFault) and not issubclass(DriverError, KitError)
    assert issubclass(DriverExited, DriverError)
    assert issubclass(errors.ProtocolError, TargetFault) and not issubclass(errors.ProtocolError, KitError)
    from emq_kit.ports.driver_client import DriverTarget

    with pytest.raises(DriverUnavailable, match="cannot start"):
        DriverTarget("/nonexistent/driver --x")
    with pytest.raises(DriverUnavailable, match="init failed"):
        DriverTarget(f"{sys.executable} -c 'import sys; sys.stdin.readline()'")


def test_what_the_layers_below_raise_is_shown_as_the_kits_class() -> None:
    from emq_live.layouts.bullmq import LayoutUnavailable
    from emq_live.urls import ConnectError

    unreachable = errors.kit_error(ConnectError("cannot reach redis://127.0.0.1:1"))
    assert type(unreachable) is errors.ServerUnreachable and str(unreachable) == "cannot reach redis://127.0.0.1:1"
    assert type(errors.kit_error(LayoutUnavailable("no bullmq"))) is TargetUnavailable
    lost = errors.kit_error(DriverExited("driver exited with code 3"))  # met outside a step
    assert type(lost) is TargetUnavailable and str(lost) == "driver exited with code 3"
    mine = errors.Occupied("held")
    assert errors.kit_error(mine) is mine
    bug = errors.kit_error(TypeError("oops"))
    assert isinstance(bug, KitBug) and bug.cause.args == ("oops",)


@pytest.mark.parametrize("raised, code, line", [
    (errors.Wrong("claim: expected 'ok', got 'stale'"), 1, "emq clean: claim: expected 'ok', got 'stale'"),
    (errors.ServerMissing("valkey-server", "install it"), 2,
     "emq clean: server binary 'valkey-server' not found on PATH. install it"),
    (DriverExited("driver exited with code 3"), 2, "emq clean: driver exited with code 3"),
    (ZeroDivisionError("division by zero"), 2, "emq clean: emq bug: ZeroDivisionError: division by zero"),
])
def test_the_command_line_shows_every_error_in_one_place(raised: Exception, code: int, line: str,
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    from emq_kit.cli import clean

    def fails(args: Any) -> int:
        raise raised

    monkeypatch.setattr(clean, "cmd_clean", fails)
    monkeypatch.delenv("EMQ_DEBUG", raising=False)
    assert cli.main(["clean", "--url", "redis://127.0.0.1:1"]) == code
    out, err = capsys.readouterr()
    assert out == "" and err.splitlines() == [err.splitlines()[0]] and err.startswith(line), err

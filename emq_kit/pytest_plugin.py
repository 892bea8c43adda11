"""The pytest plugin (issue 17, part 1), loaded by the ``pytest11`` entry point: with
``--emq`` a pytest run gains the conformance check as test items, so ``--junitxml``,
``-k`` and a CI's test annotations work with nothing of ours. Without ``--emq`` it adds
options and the ``emq_check`` fixture, and nothing else: no item, no hook that acts.

Items (each runs the real command, ``emq check`` or ``emq replay``, in process):

- ``emq check[TARGET]``: one per target — each ``--emq-driver CMD``, or the built-in
  client on ``--emq-url`` (fakeredis without one). Passes when the check conforms; a
  counterexample's trace is written to ``--emq-traces DIR``.
- ``emq replay[TRACE]``: one per stored trace ``*.json`` in ``--emq-traces`` (per target).
  A stored trace is a counterexample, so its item is a regression test: it passes when
  the target now agrees with the model at every step of the trace, and fails (with the
  step table) while the trace still diverges.

``--emq-expect FILE`` is handed to ``emq check --expect`` (issue 13); a kit whose check
has no ``--expect`` fails the check items with that said.
"""

from __future__ import annotations

import contextlib
import io
import json
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

OPTIONS = ("--emq-url", "--emq-driver", "--emq-profile", "--emq-expect", "--emq-traces", "--emq-seed")


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("emq", "EchoMQ conformance: emq check and the stored traces as test items")
    g.addoption("--emq", action="store_true", help="add the conformance check and trace regressions as items")
    g.addoption("--emq-url", metavar="URL", help="the server (default: embedded fakeredis)")
    g.addoption("--emq-driver", metavar="CMD", action="append", default=[],
                help="check a port through its driver (repeatable: an item per driver)")
    g.addoption("--emq-profile", default="ci", help="the check's profile (default ci)")
    g.addoption("--emq-expect", metavar="FILE", help="the expected-differences file (emq check --expect)")
    g.addoption("--emq-traces", metavar="DIR", default=".emq/traces",
                help="stored traces to replay, and where new counterexamples go (default .emq/traces)")
    from emq_kit.cli.common import bounded, within

    g.addoption("--emq-seed", type=bounded("pytest --emq-seed"),
                help=f"the check's seed (default: random, in the report; {within('pytest --emq-seed')})")


class EmqFailure(Exception):
    """A command's verdict other than conforms: its printout is the failure."""


def run(argv: list[str]) -> tuple[int, dict[str, Any] | None, str]:
    """Run ``emq ARGV --report TMP`` in process: the exit code, the report (None when the
    command could not run) and everything it printed."""
    from emq_kit import cli

    with tempfile.TemporaryDirectory(prefix="emq-pytest-") as tmp:
        report = Path(tmp) / "report.json"
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
            try:
                code = cli.main([*argv, "--report", str(report)])
            except SystemExit as exc:  # argparse refused an option (a bad --emq-profile): exit 2, said above
                code = exc.code if isinstance(exc.code, int) else 2
        if code == cli.EXIT_INTERRUPTED:  # Ctrl-C: the session ends, as pytest ends on it (INT-1)
            raise KeyboardInterrupt(printed.getvalue().strip())
        document = json.loads(report.read_text("utf-8")) if report.exists() else None
    return code, document, printed.getvalue()


def check_argv(*, url: str | None = None, driver: str | None = None, scripts: str | None = None,
               profile: str = "ci", seed: int | None = None, examples: int | None = None,
               steps: int | None = None, traces: str | None = None, expect: str | None = None) -> list[str]:
    """The ``emq check`` command line for these options."""
    argv = ["check", "--profile", profile]
    for flag, value in (("--url", url), ("--driver", driver), ("--scripts", scripts), ("--seed", seed),
                        ("--examples", examples), ("--steps", steps), ("--traces", traces), ("--expect", expect)):
        if value is not None:
            argv += [flag, str(value)]
    return argv


def _has_expect() -> bool:
    from emq_kit import cli

    sub = next(a for a in cli.parser()._actions if a.dest == "command")
    return "--expect" in sub.choices["check"]._option_string_actions  # type: ignore[attr-defined]


class EmqItem(pytest.Item):
    """One command run as a test: passes on exit 0."""

    def __init__(self, *, argv: list[str], **kw: Any) -> None:
        super().__init__(**kw)
        self.argv = argv

    def runtest(self) -> None:
        if "--expect" in self.argv and not _has_expect():
            raise EmqFailure("--emq-expect needs emq check --expect (issue 13), which this kit does not have")
        code, document, printed = run(self.argv)
        if document is not None:
            self.user_properties.append(("emq_verdict", document["verdict"]))
        if code != 0:
            raise EmqFailure(f"emq {' '.join(self.argv)}: exit {code}\n{printed}")

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        """The failure as pytest shows it and JUnit XML keeps it, scrubbed (SEC-1)."""
        from emq_kit.redaction import scrub

        if isinstance(excinfo.value, EmqFailure):
            return scrub(str(excinfo.value))
        return scrub(str(super().repr_failure(excinfo)))

    def reportinfo(self) -> tuple[Path, None, str]:
        return self.path, None, self.name


def _targets(config: pytest.Config) -> list[tuple[str, str | None]]:
    """(label, driver) per target: each driver, or the built-in client."""
    from emq_kit.redaction import remember, scrub

    drivers = config.getoption("emq_driver")
    url = config.getoption("emq_url")
    remember([url, *drivers])
    if not drivers:
        return [(scrub(url) if url else "fakeredis", None)]
    return [(scrub(d), d) for d in drivers]


def _item(session: pytest.Session, name: str, argv: list[str]) -> EmqItem:
    # the node id "emq::NAME": JUnit XML's classname is then "emq"
    return EmqItem.from_parent(session, name=name, nodeid=f"emq::{name}", argv=argv)


@pytest.hookimpl(tryfirst=True)  # before -k and -m deselect
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.getoption("emq"):
        return
    url, traces = config.getoption("emq_url"), config.getoption("emq_traces")
    stored = sorted(Path(traces).glob("*.json")) if Path(traces).is_dir() else []
    for label, driver in _targets(config):
        argv = check_argv(url=url, driver=driver, profile=config.getoption("emq_profile"),
                          seed=config.getoption("emq_seed"), traces=traces, expect=config.getoption("emq_expect"))
        items.append(_item(session, f"emq check[{label}]", argv))
        for trace in stored:
            argv = ["replay", str(trace)]
            argv += [a for flag, v in (("--url", url), ("--driver", driver)) if v for a in (flag, v)]
            name = f"emq replay[{trace.name}]" if len(_targets(config)) == 1 else f"emq replay[{trace.name}-{label}]"
            items.append(_item(session, name, argv))


@pytest.fixture
def emq_check(tmp_path: Path) -> Iterator[Callable[..., dict[str, Any]]]:
    """``emq_check(url=…, driver=…, scripts=…, profile=…, seed=…, examples=…, steps=…)``:
    run ``emq check`` and return its report (specs/schemas/report.json); traces go to the
    test's tmp_path. Raises ``EmqFailure`` when the check could not run (exit 2)."""

    def check(**options: Any) -> dict[str, Any]:
        code, document, printed = run(check_argv(traces=str(tmp_path / "traces"), **options))
        if document is None:
            raise EmqFailure(f"emq check could not run (exit {code}):\n{printed}")
        return document

    yield check

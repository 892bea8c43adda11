"""The pytest plugin, loaded by the ``pytest11`` entry point: with ``--emq`` a pytest run
gains the conformance check as test items, so ``--junitxml``, ``-k`` and a CI's test
annotations work with nothing of ours. Without ``--emq`` it adds options and the
``emq_check`` fixture, and nothing else: no item, no hook that acts.

Items (each a call of the library, ``emq_kit.check`` or ``emq_kit.replay``, in process;
the text of a failing one is what ``emq check`` or ``emq replay`` would print):

- ``emq check[TARGET]``: one per target — each ``--emq-driver CMD``, or the built-in
  client on ``--emq-url`` (fakeredis without one). Passes when the check conforms; a
  counterexample's trace is written to ``--emq-traces DIR``.
- ``emq replay[TRACE]``: one per stored trace ``*.json`` in ``--emq-traces`` (per target).
  A stored trace is a counterexample, so its item is a regression test: it passes when
  the target now agrees with the model at every step of the trace, and fails (with the
  step table) while the trace still diverges.

``--emq-expect FILE`` is the check's expectations (``emq check --expect``).
"""

from __future__ import annotations

import datetime as dt
import shlex
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from emq_kit.bounds import bounded, within

Outcome = tuple[int, "dict[str, Any] | None", str]
"""What an item's call gives: its exit code as the command's, its versioned report
(specs/schemas/report.json; None when it could not run) and its text."""


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
    g.addoption("--emq-seed", type=bounded("pytest --emq-seed"),
                help=f"the check's seed (default: random, in the report; {within('pytest --emq-seed')})")


class EmqFailure(Exception):
    """A verdict other than conforms: its text is the failure."""


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def run_check(**fields: Any) -> Outcome:
    """``emq_kit.check`` of the options ``fields`` (``CheckOptions``'), as ``emq check
    --report`` gives it: a run that could not happen is its error's exit code and line."""
    from emq_kit.api import check
    from emq_kit.check.options import CheckOptions
    from emq_kit.errors import EXIT_ENV, KitError, kit_error
    from emq_kit.report.document import check_document
    from emq_kit.report.text import format_report

    try:
        options = CheckOptions(**fields)  # a name that is no option: the caller's TypeError
    except KitError as exc:
        return exc.exit_code, None, exc.show("check")
    said: list[str] = []
    started = _now()
    try:
        report = check(options, say=lambda line: said.append(f"emq check: {line}"))
    except Exception as exc:  # noqa: BLE001 - every error, shown as its class says (emq_kit.errors)
        error = kit_error(exc)
        return error.exit_code, None, "\n".join([*said, error.show("check")])
    document = check_document(report, exit=report.exit_code, started=started, finished=_now(), rerun=report.rerun)
    text = [*said, format_report(report)]
    if report.trace_error is not None:  # the report stands; the run's own ending is the environment's
        return EXIT_ENV, document, "\n".join([*text, f"emq check: {report.trace_error}"])
    return report.exit_code, document, "\n".join(text)


def run_replay(trace: Path, **given: Any) -> Outcome:
    """``emq_kit.replay`` of ``trace`` on the target ``given`` names, as ``emq replay
    --report`` gives it."""
    from emq_kit.api import replay
    from emq_kit.errors import kit_error
    from emq_kit.report.document import replay_document
    from emq_kit.report.text import format_replay

    said: list[str] = []
    started = _now()
    try:
        replayed = replay(trace, say=lambda line: said.append(f"emq replay: {line}"), **given)
    except Exception as exc:  # noqa: BLE001 - every error, shown as its class says (emq_kit.errors)
        error = kit_error(exc)
        return error.exit_code, None, "\n".join([*said, error.show("replay")])
    document = replay_document(str(trace), replayed.result, replayed.target, exit=replayed.exit_code,
                               started=started, finished=_now(), seed=replayed.seed)
    return replayed.exit_code, document, "\n".join([*said, format_replay(replayed)])


class EmqItem(pytest.Item):
    """One check or replay as a test: passes on exit 0."""

    def __init__(self, *, command: str, call: Callable[[], Outcome], **kw: Any) -> None:
        super().__init__(**kw)
        self.command, self.call = command, call

    def runtest(self) -> None:
        code, document, text = self.call()
        if document is not None:
            self.user_properties.append(("emq_verdict", document["verdict"]))
        if code != 0:
            raise EmqFailure(f"{self.command}: exit {code}\n{text}")

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


def _shown(command: list[str], given: dict[str, Any]) -> str:
    """The command line ``given`` (its options) amounts to, for the item's failure."""
    return shlex.join([*command, *(a for k, v in given.items() if v is not None
                                   for a in (f"--{k.replace('_', '-')}", str(v)))])


def _item(session: pytest.Session, name: str, command: str, call: Callable[[], Outcome]) -> EmqItem:
    # the node id "emq::NAME": JUnit XML's classname is then "emq"
    return EmqItem.from_parent(session, name=name, nodeid=f"emq::{name}", command=command, call=call)


@pytest.hookimpl(tryfirst=True)  # before -k and -m deselect
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.getoption("emq"):
        return
    url, traces = config.getoption("emq_url"), config.getoption("emq_traces")
    stored = sorted(Path(traces).glob("*.json")) if Path(traces).is_dir() else []
    targets = _targets(config)
    for label, driver in targets:
        checked = {"profile": config.getoption("emq_profile"), "url": url, "driver": driver,
                   "seed": config.getoption("emq_seed"), "traces": traces, "expect": config.getoption("emq_expect")}
        items.append(_item(session, f"emq check[{label}]", _shown(["emq", "check"], checked),
                           lambda checked=checked: run_check(**{k: v for k, v in checked.items() if v is not None})))
        for trace in stored:
            on = {"url": url, "driver": driver}
            name = f"emq replay[{trace.name}]" if len(targets) == 1 else f"emq replay[{trace.name}-{label}]"
            items.append(_item(session, name, _shown(["emq", "replay", str(trace)], on),
                               lambda trace=trace, on=on: run_replay(trace, **on)))


@pytest.fixture
def emq_check(tmp_path: Path) -> Iterator[Callable[..., dict[str, Any]]]:
    """``emq_check(url=…, driver=…, scripts=…, profile=…, seed=…, examples=…, steps=…)``
    (any option of ``emq_kit.CheckOptions``): run the check and return its report
    (specs/schemas/report.json); traces go to the test's tmp_path. Raises ``EmqFailure``
    when the check could not run (exit 2)."""

    def check(**options: Any) -> dict[str, Any]:
        code, document, text = run_check(traces=str(tmp_path / "traces"), **options)
        if document is None:
            raise EmqFailure(f"emq check could not run (exit {code}):\n{text}")
        return document

    yield check

"""The pytest plugin, loaded by the ``pytest11`` entry point: with ``--emq`` a pytest run
gains the conformance check as test items, so ``--junitxml``, ``-k`` and a CI's test
annotations work with nothing of ours. Without ``--emq`` it adds options and the
``emq_check`` fixture, and nothing else: no item, no hook that acts.

Items (each a call of the library, ``emq_kit.check`` or ``emq_kit.replay``, in process;
the text of a failing one is what ``emq check`` or ``emq replay`` would print):

- ``emq check[TARGET]``: one per target — each ``--emq-driver CMD``, or the built-in
  client on ``--emq-url`` (fakeredis without one); every ``--emq-X`` is ``emq check
  --X``. Its differences are testcases of their own, reported after it
  (``emq::difference::SIGNATURE``: the step table, the seed, signature, class, trace and
  replay command as JUnit properties); it fails itself only for what no difference
  carries. Traces are written to ``--emq-traces DIR``.
- ``emq replay[TRACE]``: one per stored trace ``*.json`` in ``--emq-traces`` (per target).
  A stored trace is a counterexample, so its item is a regression test: it passes when
  the target now agrees with the model at every step of the trace, and fails (with the
  step table) while the trace still diverges.

``--emq-expect FILE`` is the check's expectations (``emq check --expect``).
"""

from __future__ import annotations

import datetime as dt
import re
import shlex
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterator, NamedTuple

import pytest
from pytest import TestReport

from emq_kit.bounds import bounded, within


class Outcome(NamedTuple):
    """What an item's call gives: its exit code as the command's, its versioned report
    (specs/schemas/report.json; None when it could not run), its text, and for a check
    that ran its ``Report`` (every difference, for a testcase each)."""

    code: int
    document: dict[str, Any] | None
    text: str
    report: Any = None


CHOICES = {"clock": ("virtual", "server"), "layout": ("echomq", "bullmq"), "hostile": ("both", "off", "only")}


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("emq", "EchoMQ conformance: emq check and the stored traces as test items")
    g.addoption("--emq", action="store_true", help="add the conformance check and trace regressions as items")
    g.addoption("--emq-url", metavar="URL", help="the server (default: embedded fakeredis)")
    g.addoption("--emq-driver", metavar="CMD", action="append", default=[],
                help="check a port through its driver (repeatable: an item per driver)")
    g.addoption("--emq-scripts", metavar="DIR", help="a script directory with the same calling convention")
    g.addoption("--emq-profile", default="ci", help="the check's profile (default ci)")
    g.addoption("--emq-expect", metavar="FILE", help="the expected-differences file (emq check --expect)")
    g.addoption("--emq-strict", action="store_true", help="with --emq-expect: an expected difference not met fails")
    g.addoption("--emq-traces", metavar="DIR", default=".emq/traces",
                help="stored traces to replay, and where new counterexamples go (default .emq/traces)")
    g.addoption("--emq-seed", type=bounded("pytest --emq-seed"),
                help=f"the check's seed (default: random, in the report; {within('pytest --emq-seed')})")
    for name in ("examples", "steps", "depth", "shrink-steps"):
        g.addoption(f"--emq-{name}", type=bounded(f"check --{name}"), metavar="N",
                    help=f"emq check --{name} ({within(f'check --{name}')})")
    g.addoption("--emq-timeout", type=bounded("check --timeout"), metavar="SECONDS",
                help=f"with --emq-driver: how long one request may take ({within('check --timeout')})")
    for name, choices in CHOICES.items():
        g.addoption(f"--emq-{name}", choices=choices, default=choices[0], help=f"emq check --{name}")
    g.addoption("--emq-ops", metavar="A,B", help="send only these ops (and the core)")
    g.addoption("--emq-skip-ops", metavar="A,B", help="never send these ops; their cells are not implemented")
    g.addoption("--emq-first", action="store_true", help="stop at the first difference")
    g.addoption("--emq-report", metavar="FILE", help="write each check's versioned JSON report (emq check --report)")
    g.addoption("--emq-html", metavar="FILE", help="write each check's HTML page (emq check --html)")
    g.addoption("--emq-summary", metavar="FILE", help="write each check's Markdown summary (emq check --summary)")


class EmqFailure(Exception):
    """A run that did not pass (its exit code, not its verdict: TR-18): its text is the failure."""


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def run_check(*, report: str | None = None, html: str | None = None, summary: str | None = None,
              **fields: Any) -> Outcome:
    """``emq_kit.check`` of the options ``fields`` (``CheckOptions``'), as ``emq check
    --report FILE --html FILE --summary FILE`` gives it (``report``, ``html`` and
    ``summary``: where to write them, probed before the run, OUT-1): a run that could
    not happen is its error's exit code and line."""
    from emq_kit.api import check
    from emq_kit.check.options import CheckOptions
    from emq_kit.errors import EXIT_ENV, KitError, kit_error
    from emq_kit.outputs import distinct, writable_path
    from emq_kit.report.document import check_document
    from emq_kit.report.text import format_report

    try:
        options = CheckOptions(**fields)  # a name that is no option: the caller's TypeError
        report_path = None if report is None else writable_path(report, "the report")
        html_path = None if html is None else writable_path(html, "the HTML page")
        summary_path = None if summary is None else writable_path(summary, "the summary")
        distinct({"report": report, "html": html, "summary": summary}, prefix="emq-")
    except KitError as exc:
        return Outcome(exc.exit_code, None, exc.show("check"))
    said: list[str] = []
    started = _now()
    try:
        result = check(options, say=lambda line: said.append(f"emq check: {line}"))
    except Exception as exc:  # noqa: BLE001 - every error, shown as its class says (emq_kit.errors)
        error = kit_error(exc)
        return Outcome(error.exit_code, None, "\n".join([*said, error.show("check")]))
    document = check_document(result, exit=result.exit_code, started=started, finished=_now(), rerun=result.rerun)
    _write(report_path, html_path, summary_path, document, result)
    text = [*said, format_report(result)]
    if result.trace_error is not None:  # the report stands; the run's own ending is the environment's
        return Outcome(EXIT_ENV, document, "\n".join([*text, f"emq check: {result.trace_error}"]), result)
    return Outcome(result.exit_code, document, "\n".join(text), result)


def _write(report: Path | None, html: Path | None, summary: Path | None, document: dict[str, Any],
           result: Any) -> None:
    """The ``--report``, ``--html`` and ``--summary`` files of a check, as ``emq check``
    writes them."""
    import json

    from emq_kit.redaction import write_text
    from emq_kit.report.html import check_html, write
    from emq_kit.report.markdown import check_summary

    if report is not None:
        write_text(report, json.dumps(document, indent=2) + "\n")
    if html is not None:
        write(html, check_html(result))
    if summary is not None:
        write_text(summary, check_summary(result))


REPLAY_FLAGS = re.compile(r"(?<![\w-])--(url|scripts|driver|timeout|clock)\b")
"""The flags of ``emq replay`` a refusal may name, each an option of this plugin's."""


def as_options(line: str) -> str:
    """``line`` with the ``emq replay`` flags it names as this plugin's options
    (``--scripts DIR``: ``--emq-scripts DIR``): what to give here."""
    return REPLAY_FLAGS.sub(r"--emq-\1", line)


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
        return Outcome(error.exit_code, None, "\n".join([*said, as_options(error.show("replay"))]))
    document = replay_document(str(trace), replayed.result, replayed.target, exit=replayed.exit_code,
                               started=started, finished=_now(), seed=replayed.seed)
    return Outcome(replayed.exit_code, document, "\n".join([*said, format_replay(replayed)]))


class EmqItem(pytest.Item):
    """One check or replay as a test: passes on exit 0. A check's differences are
    testcases of their own (``pytest_runtest_protocol`` reports them after it), so its
    item fails only when the run failed for another reason (exit 2, coverage not
    reached, an expected difference not met under ``--emq-strict``)."""

    def __init__(self, *, command: str, call: Callable[[], Outcome], **kw: Any) -> None:
        super().__init__(**kw)
        self.command, self.call = command, call
        self.outcome: Outcome | None = None
        self.label: str | None = None  # the target's, when there are several: in each difference's node id

    def runtest(self) -> None:
        self.outcome = outcome = self.call()
        if outcome.document is not None:
            self.user_properties += [("emq_verdict", outcome.document["verdict"]),
                                     ("emq_detail", outcome.document["detail"])]
            if outcome.document.get("seed") is not None:
                self.user_properties.append(("emq_seed", str(outcome.document["seed"])))
        if outcome.code != 0 and not _carried(outcome):
            raise EmqFailure(f"{self.command}: exit {outcome.code}\n{outcome.text}")

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        """The failure as pytest shows it and JUnit XML keeps it, scrubbed (SEC-1)."""
        from emq_kit.redaction import scrub

        if isinstance(excinfo.value, EmqFailure):
            return scrub(str(excinfo.value))
        return scrub(str(super().repr_failure(excinfo)))

    def reportinfo(self) -> tuple[Path, None, str]:
        return self.path, None, self.name


def _carried(outcome: Outcome) -> bool:
    """Whether a failed check's exit is its new differences alone, each its own
    testcase: the item of the run itself then passes."""
    r = outcome.report
    return (r is not None and outcome.code == 1 and bool(r.new) and not (r.gate and r.unreached)
            and not (r.strict and r.fixed))


def difference_cases(item: EmqItem) -> list[TestReport]:
    """A testcase per difference of ``item``'s check (lifecycle first, then surface,
    then those that did not reproduce): failed with its step table, or xfailed when
    the expectations file lists it; its seed, signature, class, trace and replay
    command as JUnit properties."""
    from emq_kit.redaction import scrub
    from emq_kit.trace.replay import replay_command

    outcome = item.outcome
    if outcome is None or outcome.report is None:
        return []
    report = outcome.report
    cases = []
    for d in [*report.differences, *report.unreproduced]:
        replay = "" if d.trace is None else replay_command(d.trace, report.target)
        props = [("emq_seed", str(report.seed)), ("emq_signature", str(d.signature)),
                 ("emq_class", d.klass if d.reproduced else "unreproduced"), ("emq_trace", str(d.trace or "")),
                 ("emq_replay", scrub(replay))]
        text = scrub("\n".join([f"{d.signature} ({d.klass}; met {d.met} times; {len(d.shrunk)} steps)",
                                 d.trace_text or "\n".join(d.divergence.lines),
                                 *([f"replay it: {replay}"] if replay else []),
                                 f"run the search again: {report.rerun}"]))
        # JUnit's classname "emq.difference", its name the signature (a node id's [params] end its name)
        nodeid = f"emq::difference::{d.signature}" + (f"[{item.label}]" if item.label else "")
        location = (item.location[0], None, nodeid.removeprefix("emq::"))
        for when in ("setup", "call", "teardown"):
            failed = when == "call" and d.expected is None
            case = TestReport(nodeid, location, {}, "failed" if failed else "passed", text if failed else None,
                              when, user_properties=props if when == "teardown" else [])
            if when == "call" and d.expected is not None:
                case.outcome, case.wasxfail = "skipped", f"expected: {d.expected}"
            cases.append(case)
    return cases


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """After a check's item, its differences' testcases, reported like any test's."""
    yield
    if not isinstance(item, EmqItem):
        return
    cases = difference_cases(item)
    item.session.testscollected += len(cases) // 3  # tests found by the run: the progress counts them
    for n in range(0, len(cases), 3):
        nodeid, location = cases[n].nodeid, cases[n].location
        item.ihook.pytest_runtest_logstart(nodeid=nodeid, location=location)
        for case in cases[n:n + 3]:
            item.ihook.pytest_runtest_logreport(report=case)
        item.ihook.pytest_runtest_logfinish(nodeid=nodeid, location=location)


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
    words = [*command]
    for key, value in given.items():
        flag = f"--{key.replace('_', '-')}"
        if value is True:
            words.append(flag)
        elif value not in (None, False, ()):
            words += [flag, ",".join(value) if isinstance(value, tuple) else str(value)]
    return shlex.join(words)


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
    for n, (label, driver) in enumerate(targets):
        checked = {**_check_options(config), "driver": driver, "corpus": False,  # its traces are items below
                   **{out: _nth(config.getoption(f"emq_{out}"), n, len(targets)) for out in ("report", "html", "summary")}}
        check = _item(session, f"emq check[{label}]", _shown(["emq", "check"], checked),
                      partial(run_check, **{k: v for k, v in checked.items() if v is not None and v != ()}))
        check.label = label if len(targets) > 1 else None
        items.append(check)
        for trace in stored:
            # the code the check item runs, no other: a trace names its own, run only when given (TR-9)
            on = {"url": url, "driver": driver, "scripts": None if driver else config.getoption("emq_scripts")}
            name = f"emq replay[{trace.name}]" if len(targets) == 1 else f"emq replay[{trace.name}-{label}]"
            items.append(_item(session, name, _shown(["emq", "replay", str(trace)], on),
                               partial(run_replay, trace, **on)))


def _check_options(config: pytest.Config) -> dict[str, Any]:
    """The check's options (``CheckOptions``' names) the ``--emq-*`` options give."""
    get = config.getoption
    names = ("url", "scripts", "profile", "seed", "examples", "steps", "depth", "shrink_steps", "timeout", "clock", "layout",
             "hostile", "traces", "expect", "strict", "first")
    return {**{name: get(f"emq_{name}") for name in names},
            **{name: tuple(get(f"emq_{name}").split(",")) if get(f"emq_{name}") else ()
               for name in ("ops", "skip_ops")}}


def _nth(path: str | None, n: int, of: int) -> str | None:
    """The output file of the ``n``th of ``of`` targets: ``path`` for one, ``NAME-n.EXT``
    for several (each check writes its own)."""
    if path is None or of == 1:
        return path
    p = Path(path)
    return str(p.with_name(f"{p.stem}-{n + 1}{p.suffix}"))


class CheckResult(dict[str, Any]):
    """The ``emq_check`` fixture's answer: the check's versioned report (a dict,
    specs/schemas/report.json) whose ``repr`` is the check's printout — the causes and
    each difference's step table — so ``report.assert_passed()``,
    ``report.assert_conforms()`` (or ``assert report.ok, str(report)``) fail with what
    ``emq check`` would print, not a dict."""

    def __init__(self, document: dict[str, Any], text: str) -> None:
        super().__init__(document)
        self.text = text

    @property
    def ok(self) -> bool:
        """The run passed (``emq check`` would exit 0)."""
        return self["exit"] == 0

    def assert_passed(self) -> None:
        """Raise ``AssertionError`` with the printout unless the run passed (exit 0): no
        difference but those the expectations file excuses. A run without a coverage
        gate (``dev``) passes as ``inconclusive``: it found nothing, and earned no
        ``conforms`` (TR-18)."""
        __tracebackhide__ = True
        if not self.ok:
            raise AssertionError(f"emq check: exit {self['exit']}\n{self.text}")

    def assert_conforms(self) -> None:
        """Raise ``AssertionError`` with the printout unless the verdict is ``conforms``:
        a gated profile (``ci``, ``thorough``) reached every cell and found no difference."""
        __tracebackhide__ = True
        if self["verdict"] != "conforms":
            raise AssertionError(f"emq check: {self['verdict']} ({self['detail']}), exit {self['exit']}, "
                                 f"not conforms\n{self.text}")

    def __repr__(self) -> str:
        return self.text


@pytest.fixture
def emq_check(tmp_path: Path) -> Iterator[Callable[..., CheckResult]]:
    """``emq_check(url=…, driver=…, clock=…, timeout=…, ops=…, hostile=…, layout=…,
    expect=…, report=FILE, html=FILE, …)`` (any option of ``emq_kit.CheckOptions``,
    and the ``report`` and ``html`` files of ``emq check``): run the check and return
    its report as a ``CheckResult`` (``.ok``, ``.assert_passed()``, ``.assert_conforms()``, its printout as
    its repr); traces go to the test's tmp_path unless ``traces`` says. Raises
    ``EmqFailure`` when the check could not run (exit 2)."""

    def check(**options: Any) -> CheckResult:
        # a failure's traceback shows no frame of the fixture's: its arguments hold the
        # URL, password and all (SEC-1)
        __tracebackhide__ = True
        options.setdefault("traces", str(tmp_path / "traces"))
        outcome = run_check(**options)
        if outcome.document is None:
            raise EmqFailure(f"emq check could not run (exit {outcome.code}):\n{outcome.text}")
        return CheckResult(outcome.document, outcome.text)

    yield check

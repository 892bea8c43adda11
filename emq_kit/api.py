"""The kit as a library: ``check`` runs one conformance check and returns its
``Report``; ``replay`` re-runs a trace and returns a ``ReplayReport``. Everything a run
opens (its claim on a server, the target, a server clock, a re-fenced version) is
closed however it ends. ``emq check``, ``emq replay``, the pytest plugin and a
campaign's tasks are thin callers of these two.

The modules of a check (Hypothesis, the machine) are imported when a check runs, not
when ``emq_kit`` is: the pytest plugin loads ``emq_kit`` in every pytest session.
"""

from __future__ import annotations

import contextlib
import logging
import random
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, NoReturn

from emq_kit import arguments, interrupts
from emq_kit.errors import EXIT_FAIL, EXIT_OK, BadArgument, raised_as_kit_errors

if TYPE_CHECKING:
    from emq_kit.check.focus import Focus
    from emq_kit.check.options import CheckOptions
    from emq_kit.check.run import Report
    from emq_kit.check.step import Replayed
    from emq_kit.check.tally import Run
    from emq_kit.targets.protocol import Target
    from emq_kit.trace.format import Trace

Say = Callable[[str], None]
"""Where a run says, one line each, what the user should know that is no part of its
report: what it did on its own (a driver offered protocol 1, a server re-fenced), and
an interrupted run's seed and steps so far. By default a warning of the ``emq_kit``
logger (stderr, unless logging is set up otherwise); ``emq`` prints them after
``emq check: ``."""

_log = logging.getLogger("emq_kit")


def check(options: CheckOptions | None = None, /, *, progress: Callable[[Run], None] | None = None,
          say: Say | None = None, **fields: Any) -> Report:
    """Run one conformance check of ``options`` (``CheckOptions``; any of its fields may
    be given here instead, or on top) and return its ``Report``: the verdict, the
    figures, the coverage, every distinct difference with its shrunk steps and its
    trace (written into ``options.traces``), and ``exit_code``. ``progress`` is called
    with the run at every example.

    Every option is checked before anything runs or is written (``BadArgument``); a run
    that cannot happen as asked raises the ``KitError`` that says why (a server out of
    reach, a driver that does not start, keys of a user the run would write: OWN-3). On
    a server the run writes only names of its own and leaves nothing behind, however it
    ends (OWN-1); an interrupted run says its seed and keeps its steps so far as a trace,
    then raises ``Interrupted`` (a ``KeyboardInterrupt``, INT-1).

        >>> import emq_kit
        >>> report = emq_kit.check(profile="dev", seed=1, examples=10, steps=20)
        >>> report.verdict, report.detail, report.exit_code, report.seed
        ('inconclusive', 'no-divergence', 0, 1)
        >>> report.rerun
        'emq check --seed 1 --profile dev --examples 10 --steps 20'
    """
    from emq_kit.check import expect
    from emq_kit.check.options import CheckOptions
    from emq_kit.outputs import writable_dir

    if not isinstance(options, (CheckOptions, type(None))):
        raise BadArgument(f"options are a CheckOptions (or give its fields by name), got {options!r}")
    options = (options if options is not None else CheckOptions()).replace(**fields)
    arguments.callback("progress", progress)
    arguments.callback("say", say)
    say = say or _log.warning
    expected = expect.load(options.expect) if options.expect else {}
    writable_dir(options.traces, "traces")  # a counterexample found is never lost on its trace's path
    seed = random.randrange(2**32) if options.seed is None else options.seed  # known before an interrupt
    ending = _Ending(seed, options, say)  # how an interrupt ends it: said once, its steps so far kept
    try:
        # an error past an interrupt raised where the run stood is the interrupt's (INT-1)
        with raised_as_kit_errors(), _fenced(options, say), interrupts.blamed():
            report = _claimed_run(options, seed, expected, progress, say, ending)
        interrupts.check()  # the run's end, its cleanup done, before its verdict (INT-1)
    except KeyboardInterrupt as exc:
        if getattr(exc, "said", False):
            raise
        # noted at the end, or raised where it stood in the cleanup (the target's close,
        # the run's keys deleted): the run's all the same
        ending()
    return report


@contextlib.contextmanager
def _fenced(options: CheckOptions, say: Say) -> Iterator[None]:
    """With ``refence``: the server runs under the contract's wire version for the run
    (KS-6), and gets its own value back after it."""
    if not options.refence:
        yield
        return
    from emq_kit.check.fence import refenced
    from emq_live.urls import redact
    from emq_model import spec

    assert options.url is not None  # CheckOptions: --refence needs --url
    with refenced(options.url) as held:
        if held is not None:
            was = held.decode("utf-8", "replace")
            say(f"{{emq}}:version is {was!r} on {redact(options.url)}: {spec.WIRE_VERSION!r} for the run, "
                f"{was!r} again after it")
        yield


def _claimed_run(options: CheckOptions, seed: int, expected: dict[Any, str], progress: Callable[[Run], None] | None,
                 say: Say, ending: _Ending) -> Report:
    """The run inside its claim on a server (the run's names, nothing left after it)."""
    from emq_kit.claim import claimed
    from emq_kit.layouts import layout

    chosen = layout(options.layout)
    with claimed(options.url, chosen.logical(), command="emq check", wipe=options.wipe,
                 given=options.given_names(), apart=chosen.queues) as names:
        return _run(options, chosen, names, seed, expected, progress, say, ending)


def _run(options: CheckOptions, chosen: Any, names: Any, seed: int, expected: dict[Any, str],
         progress: Callable[[Run], None] | None, say: Say, ending: _Ending) -> Report:
    """The run on the target: its report, the expectations applied and the traces
    written (a trace that cannot be written is the report's ``trace_error``: the
    counterexample is not lost). The target and the clock are closed however it ends;
    ``ending`` gets how to keep the steps so far, for an interrupt raised after that."""
    import redis

    from emq_kit.check.clock import ServerClock
    from emq_kit.check.corpus import corpus_phase, replay_corpus
    from emq_kit.check.profiles import PROFILES
    from emq_kit.check.run import run_check
    from emq_kit.claim import LOST
    from emq_kit.errors import DriverError, DriverUnavailable, FencedElsewhere, TargetUnavailable
    from emq_kit.trace.replay import write_trace
    from emq_live.scripts import OrderLost
    from emq_live.urls import redact
    from emq_model import spec

    try:
        target = chosen.open_target(options.url, options.scripts, options.driver, clock=options.clock,
                                    timeout=options.timeout, partial=True, names=names)
    except FencedElsewhere as exc:  # a dead end for our scripts unless the run re-fences
        raise FencedElsewhere(f"{exc}; --refence runs under {spec.WIRE_VERSION!r} and puts the old value back "
                              "after") from None
    for note in target.notes:  # what the kit did on its own at start (DP-9)
        say(note)
    seen: list[Run] = []  # the run as last seen: what an interrupted run has so far
    ending.keep.append(lambda: _keep_interrupted(seen[0].current if seen else [], target, options, seed, say))

    def watch(run: Run) -> None:
        seen[:] = [run]
        if progress is not None:
            progress(run)

    clock: ServerClock | None = None
    try:
        focus = focus_of(options, target)
        if options.clock == "server":
            assert options.url is not None  # CheckOptions refuses --clock server without --url
            clock = ServerClock.for_url(options.url)
        known, seconds = ([], 0.0) if not options.corpus else replay_corpus(
            Path(options.traces), target, chosen.replay, layout=chosen.name, clock_mode=options.clock, clock=clock)
        for k in known:
            k.expected = expected.get(k.now) if k.now is not None else None
        report = run_check(target, PROFILES[options.profile], examples=options.examples, steps=options.steps,
                           seed=seed, progress=watch, clock=clock, layout=chosen, focus=focus,
                           shrink_steps=options.shrink_steps)
        report.rerun, report.strict, report.corpus = options.command(seed), options.strict, known
        if known:  # the corpus ran first: its phase first
            report.phases = {"corpus": corpus_phase(known, seconds), **report.phases}
        if options.expect:
            from emq_kit.check import expect

            expect.apply(report, expected, options.expect)
        if report.differences or report.unreproduced:
            try:
                write_trace(report, Path(options.traces))
            except OSError as exc:  # the report is still shown: the counterexample is not lost
                report.trace_error = f"cannot write the trace into {options.traces}: {exc}"
        interrupts.check()  # the run's end is a stopping point: a Ctrl-C noted since is the run's (INT-1)
    except KeyboardInterrupt:  # said and kept before the cleanup, which may take a while
        ending()
    except OrderLost as exc:  # the server is there: ``close`` below removes what the run wrote
        raise TargetUnavailable(f"{exc} ({redact(options.url or '')}); run again") from None
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
        raise TargetUnavailable(f"lost the server {redact(options.url or '')}: {exc}; {LOST}") from None
    except (DriverError, DriverUnavailable) as exc:  # outside a step: starting it again, or a serverless snapshot
        raise TargetUnavailable(f"driver {options.driver}: {exc}") from None
    finally:
        target.close()
        if clock is not None:
            clock.close()
    return report


class _Ending:
    """How a run ends on an interrupt (INT-1): its seed said, once however many reach
    here (a second Ctrl-C raised during the first's ending), its steps so far kept (each
    of ``keep`` once), then ``Interrupted`` as said."""

    def __init__(self, seed: int, options: CheckOptions, say: Say) -> None:
        self.seed, self.options, self.say = seed, options, say
        self.keep: list[Callable[[], None]] = []
        self.said = False

    def __call__(self) -> NoReturn:
        if not self.said:
            self.said = True
            _said_interrupted(self.seed, self.options, self.say)
        while self.keep:
            self.keep.pop()()
        raise interrupts.Interrupted(said=True) from None


def _said_interrupted(seed: int, options: CheckOptions, say: Say) -> None:
    """The run ends on the interrupt (what follows, and the cleanup, is its): say its seed
    and the command that runs it again (INT-1)."""
    interrupts.handled()
    say(f"interrupted; seed {seed} (run it again: {options.command(seed)})")


def _keep_interrupted(steps: list[Any], target: Target, options: CheckOptions, seed: int, say: Say) -> None:
    """Write the steps the interrupted example had made as a trace, and say where."""
    from emq_kit.trace.replay import replay_command, write_interrupted

    if not steps:
        return
    try:
        path = write_interrupted(steps, target, Path(options.traces), seed=seed, profile=options.profile,
                                 clock=options.clock)
        line = f"the steps so far: {path} ({replay_command(path, target.describe())})"
    except Exception as exc:  # noqa: BLE001 - a full disk, or a server gone since: the interrupt still ends the run
        line = f"cannot write the steps so far into {options.traces}: {exc}"
    say(line)


def focus_of(options: CheckOptions, target: Any) -> Focus:
    """What the machine generates: the ops the target offers (a driver's ``init``
    list, with the faults when the kit injects them itself), narrowed by ``ops`` and
    ``skip_ops``; the arguments it declared absent; ``hostile``; ``first``; ``depth``. A run that
    would lack the core ops is ``BadArgument``."""
    from emq_kit.check.focus import Focus
    from emq_kit.check.options import CORE, EVERY_OP, KITSIDE

    can = target.capabilities
    ops: set[str] | None = None
    if can.offered is not None:
        ops = set(can.offered) | (KITSIDE if can.key_faults else set())
    if options.ops:
        ops = (ops if ops is not None else set(EVERY_OP)) & (set(options.ops) | set(CORE))
    if options.skip_ops:
        ops = (ops if ops is not None else set(EVERY_OP)) - set(options.skip_ops)
    if ops is not None:
        lacking = [op for op in CORE if op not in ops]
        if lacking:
            raise BadArgument(f"the run would lack the core ops {', '.join(lacking)}: the kit cannot check "
                              f"without {', '.join(CORE)}")
    return Focus(ops=None if ops is None else frozenset(ops), absent=dict(can.absent_args),
                 hostile=options.hostile, report=not options.first, depth=options.depth)


@dataclass
class ReplayReport:
    """A replay: the trace (its path as given, and how many steps it holds), the target
    it ran on (its description) and the clock, and the ``Replayed`` result, step by
    step. ``conforms`` when the target agreed with the model at every step."""

    trace: str
    steps: int
    target: dict[str, Any]
    clock: str
    result: Replayed
    seed: int | None = None  # the seed of the run that wrote the trace

    @property
    def conforms(self) -> bool:
        return self.result.conforms

    @property
    def detail(self) -> str:
        """``emq replay``'s word (specs/verdicts.json): ``conforms`` or ``diverges``."""
        return "conforms" if self.conforms else "diverges"

    @property
    def exit_code(self) -> int:
        """What ``emq replay`` exits with: 0 the target agrees at every step, 1 not."""
        return EXIT_OK if self.conforms else EXIT_FAIL


def load_trace(path: str | Path) -> Trace:
    """The trace in the file ``path``, checked before anything runs (TR-9a; a file that
    is not one is ``BadArgument`` naming it)."""
    from emq_kit.trace.format import Trace

    path = arguments.path("the trace", path)
    try:
        return Trace.load(path)
    except (OSError, ValueError, KeyError) as exc:
        raise BadArgument(f"cannot read trace {path}: {exc}") from None


def replay(trace: str | Path, *, url: str | None = None, scripts: str | None = None, driver: str | None = None,
           clock: str | None = None, timeout: float | None = None, wipe: bool = False,
           say: Say | None = None) -> ReplayReport:
    """Re-run the trace in the file ``trace`` step by step on a fresh model and a
    target: the trace's server and clock unless ``url`` or ``clock`` say otherwise; the
    driver (each request within ``timeout`` seconds, as ``check``'s) or scripts only
    when given here, never those the trace names (TR-9: such a trace is ``BadArgument`` naming the option that runs them). On a server the steps'
    queues go under names of the replay's own, and nothing is left after it (TR-1a,
    OWN-1). Every argument is checked before anything runs or is written, as ``emq
    replay``'s parser and ``CheckOptions`` check theirs (``BadArgument``).

        >>> import emq_kit, json, pathlib, tempfile
        >>> from emq_model import spec
        >>> trace = pathlib.Path(tempfile.mkdtemp(), "two-steps.json")
        >>> _ = trace.write_text(json.dumps({
        ...     "format": "emq-trace", "version": 1, "kit_version": "0.1.0", "spec_version": spec.SPEC_VERSION,
        ...     "wire_version": spec.WIRE_VERSION, "target": {"target": "fakeredis"}, "seed": 0, "clock": "virtual",
        ...     "divergence": None, "steps": [
        ...         {"i": 1, "queue": "alpha", "op": "enqueue", "args": {"id": "JOB00000000001", "payload": "x"}},
        ...         {"i": 2, "queue": "alpha", "op": "claim", "args": {"lease_ms": 1000, "now": 1}}]}))
        >>> replayed = emq_kit.replay(trace)
        >>> replayed.conforms, replayed.steps, replayed.clock, replayed.exit_code
        (True, 2, 'virtual', 0)
    """
    from emq_kit.check.clock import ServerClock
    from emq_kit.check.options import CLOCKS
    from emq_kit.claim import claimed
    from emq_kit.layouts import of_trace
    from emq_kit.trace.replay import source_of, target_for

    arguments.url(url)  # each as ``emq replay``'s parser and ``CheckOptions`` check it, before anything runs
    arguments.text("--scripts", scripts)
    arguments.text("--driver", driver)
    arguments.choice("--clock", clock, CLOCKS, optional=True)
    arguments.number("replay --timeout", timeout)
    arguments.switch("--wipe", wipe)
    arguments.callback("say", say)
    loaded = load_trace(trace)
    say = say or _log.warning
    chosen = of_trace(loaded.header)
    if chosen.name == "echomq":  # the trace's driver, scripts, server and clock, each unless an option says otherwise
        where = source_of(loaded.header, url=url, scripts=scripts, driver=driver)[0]
    else:  # a layout's target is its own: the trace's server unless ``url`` says otherwise
        where = url or loaded.header.get("target", {}).get("target")
    quiet = logging.getLogger("emq_live")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # dropped orphans are the trace's business
    try:
        with raised_as_kit_errors(), claimed(where, chosen.logical(), command="emq replay", wipe=wipe,
                                             apart=chosen.queues) as names:
            on: ServerClock | None = None
            if chosen.name == "echomq":
                target, on = target_for(loaded.header, url=url, scripts=scripts, driver=driver, clock=clock,
                                        timeout=timeout, names=names)
            else:
                target = chosen.open_target(where, scripts, driver,
                                            clock=clock or loaded.header.get("clock") or "virtual", names=names)
            for note in target.notes:  # what the kit did on its own at start (DP-9)
                say(note)
            try:
                result = chosen.replay(loaded.steps, target, on)
                described = target.describe()
            finally:
                target.close()
                if on is not None:
                    on.close()
    finally:
        quiet.setLevel(level)
    interrupts.check()  # the replay's end, its cleanup done, before its verdict (INT-1)
    return ReplayReport(trace=str(trace), steps=len(loaded.steps), target=described,
                        clock=getattr(on, "mode", "virtual"), result=result, seed=loaded.header.get("seed"))

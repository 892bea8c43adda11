"""``emq check``: its arguments, its progress line, and the report printed as text or
JSON (the run itself is ``emq_kit.check.run.run_check``)."""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path
from typing import Any

import redis

from emq_kit import interrupts
from emq_kit.check import expect
from emq_kit.check.clock import ServerClock
from emq_kit.check.fence import refenced
from emq_kit.check.machine import HOSTILE, QUEUES, SHRINK_STEPS, Focus, Step
from emq_kit.check.names import Names, named
from emq_kit.check.reproduce import showed
from emq_kit.check.run import PROFILES, Report, run_check
from emq_kit.claim import LOST
from emq_kit.cli.common import EXIT_FAIL, EXIT_OK, Outputs, Usage, add_outputs, bounded, claimed, within, writable_dir, writable_path
from emq_kit.cli.progress import Progress
from emq_kit.errors import DriverError, DriverUnavailable, FencedElsewhere
from emq_kit.layouts import NAMES, layout
from emq_kit.ports.protocol import KEY_FAULT_OPS
from emq_kit.report.document import check_document
from emq_kit.trace.replay import replay_command, write_interrupted, write_trace
from emq_live.urls import redact
from emq_model import spec

CORE = ("enqueue", "claim", "complete")
"""The queue ops the machine cannot do without (DP-9b's core, less the session)."""


def format_step(step: Step) -> str:
    """One step of a counterexample: the call, then both answers when they differ."""
    same = step.model == step.target and type(step.model) is type(step.target)
    answer = f"-> {step.model!r}" if same else f"-> model {step.model!r} | target {step.target!r}"
    return f"  {step.index:>3}. {step.call()} {answer}"


def format_report(report: Report) -> str:
    """The human summary, with the counterexample when there is one."""
    t = report.target
    lines = [
        f"emq check: {report.verdict.upper()}  target {t.get('target')} ({t.get('server', '?')}), "
        f"scripts {t.get('scripts', '-')}, profile {report.profile}, seed {report.seed}",
        f"  examples {report.examples}   steps {report.steps}   invariant checks {report.checks}",
        f"  cells {report.reached}/{report.total} (op x outcome, {t.get('contract', 'specs/transitions.json')})",
        f"  wall {report.seconds:.2f} s   {report.steps_per_second:,.0f} checked steps/s",
    ]
    if t.get("queues"):
        lines.append("  queues on the server: " + ", ".join(f"{k} as {v!r}" for k, v in t["queues"].items()))
    lines += [f"  {name.replace('_', '-')} phase: " + ", ".join(f"{k} {v}" for k, v in figures.items())
              for name, figures in report.phases.items()]
    if report.not_implemented:
        ops = sorted({op for op, _ in report.not_implemented if not report.focus.allows(op)})
        why = [f"ops not sent: {', '.join(ops)}"] if ops else []
        if not report.focus.allows("spoil_key"):
            why.append("no key faults: EMQTYPE")
        lines.append(f"  {len(report.not_implemented)} cells not implemented ({'; '.join(why)})")
    if report.out_of_focus:
        lines.append(f"  {len(report.out_of_focus)} cells left out by --hostile {report.focus.hostile}")
    if report.unreached:
        lines.append("  unreached cells: " + ", ".join(f"{op}/{o}" for op, o in report.unreached))
    if report.verdict == "no-divergence":
        lines.append(f"  no divergence in {report.examples} examples ({report.profile}: not a conformance verdict)")
    for sig, _ in report.fixed:
        lines.append(f"  fixed — remove it from {report.expect_file}: {sig}")
    if report.expect_file and report.differences and not report.new:
        lines.append(f"  all {len(report.differences)} differences are expected ({report.expect_file})")
    if report.differences:
        lines.extend(format_differences(report))
    if report.unreproduced:
        lines.extend(format_unreproduced(report))
    if report.differences or report.unreproduced:
        lines.append("run the search again: " + (report.rerun or rerun_command(report)))
    return "\n".join(lines)


def format_differences(report: Report) -> list[str]:
    """The causes, lifecycle first then surface, each with its differences (numbered as
    the JSON report lists them) and its representative's trace (its shortest): the
    steps, the divergence, the file and the command that replays it."""
    number = {id(d): n for n, d in enumerate(report.differences, 1)}
    lines = ["", f"{_count(len(report.differences), 'distinct difference')} in {_count(len(report.causes), 'cause')} "
             "(lifecycle first, then surface):"]
    klass = None
    for n, cause in enumerate(report.causes, 1):
        if cause.klass != klass:
            klass = cause.klass
            lines += ["", f"{klass.upper()}"]
        ops, shown = cause.ops, len(cause.differences)
        lines.append(f"cause {n}: {cause.title} — {_count(len(ops), 'op')}: {', '.join(ops)}; "
                     f"{_count(shown, 'difference')}")
        for d in cause.differences:
            known = f"  EXPECTED ({d.expected})" if d.expected else ""
            lines.append(f"  [{number[id(d)]}] {d.signature}  ({d.klass}; after {d.seconds:.2f} s; met {d.met} times; "
                         f"{_count(len(d.shrunk), 'step')}){known}" + (f"  trace: {d.trace}" if d.trace is not None else ""))
        d = cause.representative
        lines.append(f"  its shortest trace, [{number[id(d)]}] ({_count(len(d.shrunk), 'step')}):" if d.shrunk
                     else f"  [{number[id(d)]}]:")
        lines.extend("    " + line for line in (d.trace_text or "").splitlines())
        if not d.trace_text:
            lines.extend(format_step(s) for s in d.shrunk)
        if d.trace is not None:
            lines.append(f"    replay it: {replay_command(d.trace, report.target)}")
    return lines


def format_unreproduced(report: Report) -> list[str]:
    """The differences the search met whose steps no replay reproduced: apart, never
    counted as differences, each with what its replays showed."""
    lines = ["", f"DID NOT REPRODUCE (timing-dependent?): {_count(len(report.unreproduced), 'difference')} the "
             "search met that no replay of its steps showed; not counted among the differences"]
    for d in report.unreproduced:
        known = f"  EXPECTED ({d.expected})" if d.expected else ""
        lines.append(f"  {d.signature}  (after {d.seconds:.2f} s; met {d.met} times; {_count(len(d.shrunk), 'step')}; "
                     f"replayed {_count(d.replays, 'time')}: {showed(d.seen)}){known}")
        if d.trace is not None:
            lines.append(f"    trace: {d.trace}  (the steps and answers as the search met them)")
    return lines


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' if n != 1 else ''}"


RERUN_FLAGS = ("layout", "url", "queue", "scripts", "driver", "timeout", "clock", "examples", "steps", "ops", "skip_ops",
               "hostile", "expect", "traces", "shrink_steps")
RERUN_SWITCHES = ("first", "strict", "refence")


def rerun_command(report: Report, args: argparse.Namespace | None = None) -> str:
    """The command that repeats the run exactly: its seed and profile, and every target
    and profile flag it was given (a URL's password redacted: give it again, or set
    EMQ_URL)."""
    return command_of(report.seed, report.profile, args)


def command_of(seed: int, profile: str, args: argparse.Namespace | None = None) -> str:
    """``emq check --seed SEED --profile PROFILE`` with every other flag ``args`` gave."""
    import shlex

    from emq_live.urls import redact

    parts = ["emq", "check", "--seed", str(seed), "--profile", profile]
    defaults = {"layout": "echomq", "clock": "virtual", "hostile": "both", "traces": ".emq/traces",
                "shrink_steps": SHRINK_STEPS}
    for name in RERUN_FLAGS:
        value = getattr(args, name, None) if args is not None else None
        for one in value if isinstance(value, list) else [value]:  # --queue: once per queue
            if one is not None and one != defaults.get(name):
                parts += ["--" + name.replace("_", "-"), redact(str(one)) if name == "url" else str(one)]
    parts += ["--" + name for name in RERUN_SWITCHES if args is not None and getattr(args, name, False)]
    return shlex.join(parts)


def page(report: Report) -> str:
    """The ``--html`` page: the causes with their representative counterexamples, every
    difference and those that did not reproduce; a conforming run's summary otherwise."""
    from emq_kit.report import html

    if report.differences or report.unreproduced:
        return html.check_page(report, format_report(report).splitlines())
    return html.summary_page("emq check", report.verdict, report.ok, format_report(report).splitlines())


def _keep_interrupted(progress: Progress, target: Any, args: argparse.Namespace, seed: int) -> None:
    """Write the steps the interrupted example had made as a trace, and say where."""
    steps = progress.run.current if progress.run is not None else []
    if not steps:
        return
    try:
        path = write_interrupted(steps, target, Path(args.traces), seed=seed, profile=args.profile, clock=args.clock)
    except OSError as exc:
        print(f"emq check: cannot write the steps so far into {args.traces}: {exc}", file=sys.stderr)
        return
    print(f"emq check: the steps so far: {path} ({replay_command(path, target.describe())})", file=sys.stderr)


def given_names(args: argparse.Namespace, layout_name: str) -> dict[str, str] | None:
    """The user's names of the machine's queues on the server (``--queue``, once per
    queue; KS-3 checks them before anything runs), or None: every queue name then
    carries the run's suffix (``emq_kit.check.names``)."""
    if args.queue and (layout_name != "echomq" or args.url is None):
        raise Usage("--queue names the run's queues on a server: it needs --url (and the echomq layout)")
    return named(QUEUES, args.queue) if args.queue else None


def cmd_check(args: argparse.Namespace) -> int:
    """``emq check``; with ``--refence``, under the contract's wire version for the run.
    Every argument and output path is checked before anything is written (OUT-1)."""
    expected = expect.load(args.expect) if args.expect else {}
    if args.clock == "server" and args.url is None:
        raise Usage("--clock server needs a server: give --url")
    if args.strict and not args.expect:
        raise Usage("--strict needs --expect FILE: it fails the run on an expected difference not met")
    if args.write_expect:  # before the run, not after it
        writable_path(args.write_expect, "the expectations")
    writable_dir(args.traces, "traces")  # a counterexample found is never lost on its trace's path
    out = Outputs(args)
    if not args.refence:
        return _check(args, out, expected)
    if args.url is None or args.layout != "echomq":
        raise Usage("--refence sets {emq}:version on a server for the run: it needs --url (and the echomq layout)")
    with refenced(args.url) as held:
        if held is not None:
            print(f"emq check: {{emq}}:version is {held.decode('utf-8', 'replace')!r} on {redact(args.url)}: "
                  f"{spec.WIRE_VERSION!r} for the run, {held.decode('utf-8', 'replace')!r} again after it",
                  file=sys.stderr)
        return _check(args, out, expected)


def _check(args: argparse.Namespace, out: Outputs, expected: dict[Any, str]) -> int:
    profile = PROFILES[args.profile]
    seed = random.randrange(2**32) if args.seed is None else args.seed  # known before an interrupt
    chosen = layout(args.layout)
    given = given_names(args, chosen.name)
    with claimed(args.url, chosen.logical(), command="emq check", wipe=args.wipe, given=given) as names:
        report, unwritten = _search(args, chosen, names, profile, seed, expected)
    if args.write_expect:
        expect.write(args.write_expect, report)
    out.say(format_report(report))
    if args.write_expect:
        out.say(f"wrote {len(report.differences)} differences to {args.write_expect}")
    code = EXIT_OK if report.ok and not (args.strict and report.fixed) else EXIT_FAIL
    rerun = report.rerun or f"emq check --seed {report.seed} --profile {report.profile}"
    out.emit(lambda started, finished: check_document(report, exit=code, started=started, finished=finished,
                                                      rerun=rerun))
    out.page(lambda: page(report))
    if unwritten is not None:
        raise Usage(f"cannot write the trace into {args.traces}: {unwritten}")
    return code


def _search(args: argparse.Namespace, chosen: Any, names: Names | None, profile: Any, seed: int,
            expected: dict[Any, str]) -> tuple[Report, OSError | None]:
    """The run on the target, inside the run's claim on a server: the report, and the
    error writing its trace (the report is printed first: the counterexample is not lost)."""
    try:
        target = chosen.open_target(args.url, args.scripts, args.driver, clock=args.clock, timeout=args.timeout,
                                    partial=True, names=names)
    except FencedElsewhere as exc:  # a dead end for our scripts unless the run re-fences
        raise Usage(f"{exc}; --refence runs under {spec.WIRE_VERSION!r} and puts the old value back after") from None
    for note in getattr(target, "notes", ()):  # what the kit did on its own at start (DP-9)
        print(f"emq check: {note}", file=sys.stderr)
    clock: ServerClock | None = None
    progress = Progress(args.examples or profile.examples)
    unwritten: OSError | None = None
    try:
        focus = focus_of(args, target)
        clock = ServerClock.for_url(args.url) if args.clock == "server" else None
        report = run_check(target, profile, examples=args.examples, steps=args.steps, seed=seed,
                           progress=progress, clock=clock, layout=chosen,
                           focus=focus, shrink_steps=args.shrink_steps)
        report.rerun = rerun_command(report, args)
        if args.expect:
            expect.apply(report, expected, args.expect)
        if report.differences or report.unreproduced:
            try:
                write_trace(report, Path(args.traces))
            except OSError as exc:  # the report is printed first: the counterexample is not lost
                unwritten = exc
    except KeyboardInterrupt:
        interrupts.handled()  # what follows, and the cleanup, is the interrupt's
        progress.end()
        print(f"emq check: interrupted; seed {seed} (run it again: {command_of(seed, args.profile, args)})",
              file=sys.stderr)
        _keep_interrupted(progress, target, args, seed)
        raise interrupts.Interrupted(said=True) from None
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
        raise Usage(f"lost the server {redact(args.url or '')}: {exc}; {LOST}") from None
    except (DriverError, DriverUnavailable) as exc:  # outside a step: starting it again, or a serverless snapshot
        raise Usage(f"driver {args.driver}: {exc}") from None
    finally:
        target.close()
        if clock is not None:
            clock.close()
    progress.end()
    return report, unwritten


KITSIDE = {"forget_row", *KEY_FAULT_OPS}
"""The faults the kit injects itself when it reads a driver's server."""
EVERY_OP = frozenset(spec.OPS) | frozenset(spec.LANE_OPS) | {"queue"} | KITSIDE
"""What ``--ops`` and ``--skip-ops`` may name."""


def _ops(text: str | None) -> set[str]:
    names = {o for o in (text or "").split(",") if o}
    unknown = names - EVERY_OP
    if unknown:
        raise Usage(f"unknown ops {', '.join(sorted(unknown))}; ops are {', '.join([*spec.OPS, *spec.LANE_OPS])}")
    return names


def focus_of(args: argparse.Namespace, target: Any) -> Focus:
    """What the machine generates: the ops the target offers (a driver's ``init``
    list, with the faults when the kit injects them itself), narrowed by ``--ops``
    and ``--skip-ops``; the arguments it declared absent; ``--hostile``; ``--first``."""
    offered = getattr(target, "offered", None)
    ops: set[str] | None = None
    if offered is not None:
        ops = set(offered) | (KITSIDE if getattr(target, "inspector", None) is not None else set())
    only, skip = _ops(args.ops), _ops(args.skip_ops)
    if only:
        ops = (ops if ops is not None else set(EVERY_OP)) & (only | set(CORE))
    if skip:
        ops = (ops if ops is not None else set(EVERY_OP)) - skip
    if ops is not None:
        lacking = [op for op in CORE if op not in ops]
        if lacking:
            raise Usage(f"the run would lack the core ops {', '.join(lacking)}: the kit cannot check "
                        f"without {', '.join(CORE)}")
    return Focus(ops=None if ops is None else frozenset(ops), absent=dict(getattr(target, "absent_args", {}) or {}),
                 hostile=args.hostile, report=not args.first)


def register(sub: Any) -> None:
    """Add ``emq check`` to the command line."""
    c = sub.add_parser("check", help="run the conformance machine: model vs an implementation")
    c.add_argument("--url", help="a server (redis://, valkey://, unix://); default: embedded fakeredis")
    c.add_argument("--scripts", metavar="DIR", help="a script directory with the same calling convention")
    c.add_argument("--driver", metavar="CMD", help="check a port through its driver program "
                   "(specs/driver-protocol.md); CMD is split like a shell would, and run without one")
    c.add_argument("--timeout", type=bounded("check --timeout"), metavar="SECONDS",
                   help="with --driver: how long one request may take, init included (default 10, and 30 "
                   f"for init: a runtime may be starting; {within('check --timeout')})")
    c.add_argument("--clock", choices=["virtual", "server"], default="virtual",
                   help="pass the model's clock on every call (virtual), or none, judging scores "
                   "within the server's TIME window around each call (server; needs --url)")
    c.add_argument("--layout", choices=NAMES, default="echomq",
                   help="the keyspace layout: echomq (the four sets, default) or bullmq (BullMQ's own "
                   "scripts from the pinned bullmq package; needs --url, specs/layouts/bullmq.md)")
    c.add_argument("--examples", type=bounded("check --examples"),
                   help=f"examples per round (default: the profile's; {within('check --examples')})")
    c.add_argument("--steps", type=bounded("check --steps"),
                   help=f"steps per example (default: the profile's; {within('check --steps')})")
    c.add_argument("--seed", type=bounded("check --seed"),
                   help=f"the run's seed (default: random, printed; {within('check --seed')})")
    c.add_argument("--shrink-steps", type=bounded("check --shrink-steps"), default=SHRINK_STEPS, metavar="N",
                   help="checked steps Hypothesis's shrinker may run for each difference before the kit's "
                        f"own minimizing takes the shortest so far (0: none; default {SHRINK_STEPS}; "
                        f"{within('check --shrink-steps')})")
    c.add_argument("--profile", choices=sorted(PROFILES), default="ci")
    c.add_argument("--wipe", action="store_true",
                   help="with --url: allow deleting keys the server already holds under a queue name the run "
                        "writes (the --queue names; refused otherwise)")
    c.add_argument("--refence", action="store_true",
                   help="with --url: a server fenced under another wire version ({emq}:version) runs under "
                   "the contract's for the run and gets its value back after (KS-6; its own port's "
                   "scripts refuse meanwhile)")
    c.add_argument("--queue", action="append", default=[], metavar="NAME",
                   help=f"with --url: the run's queue names on the server, once per queue ({len(QUEUES)} times); "
                   "default: the machine's names with a per-run suffix, printed and kept in the trace")
    add_outputs(c, html="the counterexample (steps, keyspaces, the broken rule), or the summary")
    c.add_argument("--traces", metavar="DIR", default=".emq/traces",
                   help="where counterexample traces are written (default .emq/traces)")
    c.add_argument("--first", action="store_true",
                   help="stop at the first difference (default: report every distinct difference)")
    c.add_argument("--ops", metavar="A,B", help="send only these ops (and the core)")
    c.add_argument("--skip-ops", metavar="A,B", help="never send these ops; their cells are not implemented")
    c.add_argument("--hostile", choices=list(HOSTILE), default="both",
                   help="spoiled arguments, bad ids and bad queue names: mixed in (both), left out (off), "
                   "on every call (only)")
    c.add_argument("--expect", metavar="FILE", help="known differences (TOML, specs/schemas/expect.json): "
                   "the run fails only on differences FILE does not list")
    c.add_argument("--strict", action="store_true", help="with --expect: an expected difference not met fails the run")
    c.add_argument("--write-expect", metavar="FILE", help="write the differences found as an expectations file")
    c.set_defaults(func=cmd_check)

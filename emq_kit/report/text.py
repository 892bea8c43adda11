"""A report as text, the way ``emq check`` and ``emq replay`` print it: the summary of a
check with its causes and differences (their shrunk steps, traces and the commands that
replay them), and a replay's step table with where it parted from the model."""

from __future__ import annotations

from typing import TYPE_CHECKING

from emq_kit.check.options import command_of
from emq_kit.check.reproduce import showed
from emq_kit.report.verdicts import headline
from emq_kit.trace.replay import explain, replay_command, step_table

if TYPE_CHECKING:
    from emq_kit.api import ReplayReport
    from emq_kit.check.run import Difference, Report
    from emq_kit.check.step import Step


def format_step(step: Step) -> str:
    """One step of a counterexample: the call, then both answers when they differ."""
    same = step.model == step.target and type(step.model) is type(step.target)
    answer = f"-> {step.model!r}" if same else f"-> model {step.model!r} | target {step.target!r}"
    return f"  {step.index:>3}. {step.call()} {answer}"


def format_report(report: Report) -> str:
    """The human summary, with the counterexample when there is one."""
    t = report.target
    lines = [
        f"{headline('check', report.detail)}  target {t.get('target')} ({t.get('server', '?')}), "
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
        ops = sorted({op for op, _ in report.not_implemented if not report.focus.allows(op) and op != "raw"})
        why = [f"ops not sent: {', '.join(ops)}"] if ops else []
        if not report.focus.allows("spoil_key"):
            why.append("no key faults: EMQTYPE")
        if any(op == "raw" for op, _ in report.not_implemented):  # only ever for want of the capability
            why.append("raw calls: the target does not declare the raw capability")
        lines.append(f"  {len(report.not_implemented)} cells not implemented ({'; '.join(why)})")
    deep = [c for c in report.out_of_focus if not report.focus.gates(c)]  # DEPTH-2
    if len(report.out_of_focus) > len(deep):
        lines.append(f"  {len(report.out_of_focus) - len(deep)} cells left out by --hostile {report.focus.hostile}")
    if deep:
        lines.append(f"  {len(deep)} cells left out by --depth {report.focus.depth} (a deep queue is never empty): "
                     + ", ".join(f"{op}/{o}" for op, o in deep))
    if report.unreached:
        lines.append("  unreached cells: " + ", ".join(f"{op}/{o}" for op, o in report.unreached))
    if report.detail == "no-divergence":
        lines.append(f"  no divergence in {report.examples} examples ({report.profile}: not a conformance verdict)")
    for sig, _ in report.fixed:
        lines.append(f"  fixed — remove it from {report.expect_file}: {sig}")
    for sig, _ in report.unchecked:
        lines.append(f"  not checked — the run never reached its cell, so it stays in {report.expect_file}: {sig}")
    if report.expect_file and report.differences and not report.new:
        lines.append(f"  all {len(report.differences)} differences are expected ({report.expect_file})")
    lines.extend(format_corpus(report))
    if report.differences:
        lines.extend(format_differences(report))
    if report.unreproduced:
        lines.extend(format_unreproduced(report))
    if report.differences or report.unreproduced:
        lines.append("run the search again: " + (report.rerun or command_of(report.seed, report.profile)))
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


def format_corpus(report: Report) -> list[str]:
    """The known traces replayed before the search (``check/corpus.py``): those that
    still fail first, each with the command that replays it, then those that pass now."""
    if not report.corpus:
        return []
    fails = [k for k in report.corpus if k.verdict == "fails"]
    passes = [k for k in report.corpus if k.verdict == "passes"]
    skipped = [k for k in report.corpus if k.verdict == "skipped"]
    lines = ["", f"KNOWN TRACES, replayed first: {len(fails)} still fail, {len(passes)} pass now"
             + (f", {len(skipped)} not replayed" if skipped else "")]
    for k in fails:
        known = f"  EXPECTED ({k.expected})" if k.expected else ""
        lines.append(f"  still fails: {k.path}  {k.now}{known}")
        lines.append(f"    replay it: {replay_command(k.path, report.target)}")
    lines += [f"  passes now: {k.path}  (was {k.signature})" for k in passes]
    lines += [f"  not replayed: {k.path}  ({k.reason})" for k in skipped]
    return lines


def format_unreproduced(report: Report) -> list[str]:
    """The differences the search met whose steps no replay reproduced: apart, never
    counted as differences, each with what its replays showed."""
    lines = ["", f"DID NOT REPRODUCE (timing-dependent, or a target that is not deterministic: DET-1): "
             f"{_count(len(report.unreproduced), 'difference')} the search met that no replay of its steps showed; "
             "not counted among the differences"]
    for d in report.unreproduced:
        known = f"  EXPECTED ({d.expected})" if d.expected else ""
        lines.append(f"  {d.signature}  (after {d.seconds:.2f} s; met {d.met} times; {_count(len(d.shrunk), 'step')}; "
                     f"replayed {_count(d.replays, 'time')}: {showed(d.seen)}){known}")
        if d.again is not None:
            lines.extend(f"    {line}" for line in two_runs(d))
        if d.trace is not None:
            lines.append(f"    trace: {d.trace}  (the steps and answers as the search met them)")
    return lines


def two_runs(d: Difference) -> list[str]:
    """The two runs of the same draws that disagree (DET-1): the search's, to its
    divergence, and the run Hypothesis made of the same draws, at that step."""
    first = d.first or d.divergence
    step, again = first.step, d.again or []
    there = next((s for s in again if s.index == step.index), None)
    if there is None:
        second = f"it ended after {_count(len(again), 'step')}, before step {step.index}"
    elif there.op != step.op or there.args != step.args:
        second = f"its step {step.index} was {there.call()}: the answers before it led elsewhere"
    else:
        second = f"its step {step.index} answered {there.target!r}"
    return ["not deterministic (DET-1): Hypothesis ran the search's draws again and the target did otherwise",
            f"run 1: step {step.index} {step.call()} answered {step.target!r}", f"run 2: {second}"]


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' if n != 1 else ''}"


def format_replay(replayed: ReplayReport) -> str:
    """What ``emq replay`` prints: the trace and the target it ran on, the step table,
    and where the target parted from the model (or that it agreed at every step)."""
    t = replayed.target
    return "\n".join([
        f"{headline('replay', replayed.detail)}  {replayed.trace} ({replayed.steps} steps) on {t.get('target')} ({t.get('server', '?')}), "
        f"scripts {t.get('scripts', '-')}, {replayed.clock} clock",
        step_table(replayed.result),
        explain(replayed.result),
    ])

"""Replay: re-execute a trace step by step on the model and a target, show where
they part (``record`` writes a counterexample's trace this way).

Replay runs the machine's own ``execute`` for each step (no Hypothesis), so a step is
checked exactly as it was during ``emq check``: answers, whole snapshots, invariants.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Any

from emq_kit import interrupts
from emq_kit.check import faults
from emq_kit.check.clock import Clock, ServerClock
from emq_kit.check.machine import Conformance
from emq_kit.check.names import Names
from emq_kit.check.raw.contract import call_of
from emq_kit.check.reproduce import showed
from emq_kit.check.run import Report
from emq_kit.check.signature import signature
from emq_kit.check.step import SLEEP, Divergence, Replayed, Step
from emq_kit.check.tally import Run
from emq_kit.check.target import open_target
from emq_kit.errors import BadArgument
from emq_kit.ports.protocol import said
from emq_kit.targets.protocol import Target
from emq_kit.trace.format import Trace, divergence_json, header
from emq_live.urls import MASK
from emq_model.invariants import beyond
from emq_model.snapshot import Snapshot, diff


def replay(steps: list[Step], target: Target, clock: Clock | None = None) -> Replayed:
    """Run ``steps`` on a fresh model and on ``target`` (reset first)."""
    machine = Conformance.factory(target, Run(), clock)()
    done: list[Step] = []
    for s in steps:
        interrupts.check()  # a replayed step is a stopping point for Ctrl-C (INT-1)
        try:
            if s.op in faults.ARGS:
                machine.inject(s.queue, s.op, s.args)
            elif s.op == SLEEP:
                machine.sleep(s.args["ms"])
            elif s.op == "queue":
                machine.open_queue(s.args["name"])
            elif s.op == "raw":
                machine.send_raw(call_of(s.args))
            else:
                args = s.args
                if machine.clock.mode == "server":  # its TIME runs: a recorded ``now`` is not sent (TR-2)
                    args = {k: v for k, v in args.items() if k != "now"}
                elif isinstance(args.get("now"), int):
                    machine.now = args["now"]
                machine.execute(s.queue, s.op, args)
        except Divergence as d:
            done.append(Step(s.queue, s.op, d.step.args, d.step.model, d.step.target, index=len(done) + 1, at=d.step.at))
            return _diverged(machine, done, d)
        last = machine.steps[-1]  # its args as run (a clock op's ``now`` stamped by the virtual clock)
        done.append(Step(s.queue, s.op, last.args, last.model, last.target, index=len(done) + 1, at=last.at))
    try:
        machine.read_whole()  # DEPTH-4: a replay ends as an example does
    except Divergence as d:
        return _diverged(machine, done, d)
    return Replayed(done)


def _diverged(machine: Conformance, done: list[Step], d: Divergence) -> Replayed:
    queue = d.step.queue if d.step.queue in machine.models else None
    if queue is None:  # a refused queue name: no keyspace to show
        return Replayed(done, d, len(done))
    mine = machine.models[queue].snapshot()
    try:
        theirs = machine.target.snapshot(queue)
    except Exception:  # noqa: BLE001 - a serverless driver that died has no keyspace left to read
        return Replayed(done, d, len(done), mine)
    if not isinstance(theirs, Snapshot):  # a reply that could not be read (BadReply): nothing to show
        return Replayed(done, d, len(done), mine)
    return Replayed(done, d, len(done), mine, theirs, tuple(beyond(theirs, mine, machine.previous.get(queue))))


def traced(result: Replayed, head: dict[str, Any], names: dict[str, str]) -> Trace:
    """The trace of a replay (``names``: the renaming it ran under, old id -> new)."""
    trace = Trace({**head, "renamed": {new: old for old, new in names.items()}}, result.steps)
    if result.divergence is not None:
        trace.divergence = divergence_json(result.divergence, result.index)
        trace.snapshots = {k: v for k, v in (("model", result.model), ("target", result.target)) if v is not None}
    return trace


def trace_path(directory: Path, trace: Trace) -> Path:
    """The file of ``trace`` in ``directory``: named by its content (``corpus.name``),
    so the same counterexample found again is the same file."""
    from emq_kit.check.corpus import name

    return directory / name(trace)


# -- printing ---------------------------------------------------------------------------


def _short(value: Any, width: int = 40) -> str:
    text = "-" if value is None else value if isinstance(value, str) else repr(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def step_table(result: Replayed) -> str:
    """One line per step: op, args, model answer, target answer; the diverging one marked."""
    lines = [f"{'#':>3}  {'queue':<8} {'op':<13} {'args':<52} {'model':<24} target"]
    for i, s in enumerate(result.steps, 1):
        args = " ".join(f"{k}={_short(v, 24)}" for k, v in s.args.items())
        mark = f"   <- diverges ({signature(result.divergence)})" if i == result.index and result.divergence else ""
        lines.append(f"{i:>3}  {_short(s.queue, 8):<8} {s.op:<13} {_short(args, 52):<52} "
                     f"{_short(s.model, 24):<24} {_short(s.target, 24)}{mark}")
    return "\n".join(lines)


def explain(result: Replayed) -> str:
    """The divergence in plain words: the evidence, the snapshot differences, and what
    the invariants say of the target's keyspace."""
    if result.divergence is None:
        return f"conforms: all {len(result.steps)} steps agree with the model"
    d = result.divergence
    lines = [f"step {result.index} diverges: the {d.kind} ({signature(d)}; {result.klass})"]
    lines += [f"  {line}" for line in d.lines]
    if result.model is not None and result.target is not None:
        differences = diff(result.model, result.target)
        if differences and differences != list(d.lines):  # a snapshot's evidence is this already
            lines.append(f"the keyspace of queue {result.model.queue!r}, target vs model:")
            lines += [f"  {line}" for line in differences]
        elif not differences:
            lines.append(f"the keyspace of queue {result.model.queue!r} is the model's")
        if result.violations:
            lines.append("invariants the target broke (the model's keyspace keeps them):")
            lines += [f"  {v}" for v in result.violations]
    return "\n".join(lines)


def source_of(head: dict[str, Any], *, url: str | None = None, scripts: str | None = None,
              driver: str | None = None) -> tuple[str | None, str | None, str | None]:
    """The (url, scripts, driver) to replay a trace on: the code from the caller, the
    server from the header unless ``url`` says otherwise (a URL written redacted takes its
    secret from ``EMQ_URL``). A trace is data (TR-9): the driver command or script
    directory its header names is never run from it; given no code (a server is no code),
    such a trace is ``BadArgument`` saying what it names and the flag that runs it."""
    named = head.get("target", {})
    # a URL alone would put the built-in scripts in the place of the trace's code: a
    # replay of other code than ran, which conforms on the scripts that did not fail
    if scripts is None and driver is None:
        if named.get("driver"):
            # a trace is anyone's file: what it names is shown inert (DP-16)
            raise BadArgument(f"the trace ran through the driver {named['driver']!r}; replay runs no command a trace "
                              f"names (TR-9): give it yourself to run it, --driver {said(shlex.quote(named['driver']))}")
        if named.get("scripts") not in (None, "builtin"):
            raise BadArgument(f"the trace ran the scripts in {named['scripts']!r}; replay loads no code a trace names "
                              f"(TR-9): give them yourself to load them, "
                              f"--scripts {said(shlex.quote(named['scripts']))}")
    if url is None and driver is not None:
        url = named.get("url")  # the server the trace's driver ran on, if it had one
    elif url is None and not named.get("driver"):
        url = None if named.get("target", "fakeredis") == "fakeredis" else named.get("target")
    if url is not None and MASK in url:  # written redacted: the secret comes from the user
        if not os.environ.get("EMQ_URL"):
            raise BadArgument(f"the trace's server {url} was written without its password: "
                              "give the URL with --url or EMQ_URL")
        url = os.environ["EMQ_URL"]
    return url, scripts, driver


def replay_command(path: Path | str, target: dict[str, Any]) -> str:
    """``emq replay PATH`` with the driver or script directory of the run (``target``, its
    description): the trace names them, but replay runs neither from it (TR-9)."""
    parts = ["emq", "replay", str(path)]
    if target.get("driver"):
        parts += ["--driver", target["driver"]]
        if target.get("timeout") is not None:  # the run's own: a port that needs it replays with it
            parts += ["--timeout", f"{target['timeout']:g}"]
    elif target.get("layout", "echomq") == "echomq" and target.get("scripts") not in (None, "builtin"):
        parts += ["--scripts", target["scripts"]]
    return shlex.join(parts)


def target_for(head: dict[str, Any], *, url: str | None = None, scripts: str | None = None,
               driver: str | None = None, clock: str | None = None, timeout: float | None = None,
               names: Names | None = None) -> tuple[Target, ServerClock | None]:
    """The target a trace names in its header and the clock it ran on (``clock``, the
    header's ``clock`` when None), unless ``url``/``scripts``/``driver`` say otherwise
    (``TargetUnavailable`` when it cannot be had). A driver may be partial: a trace only
    holds the ops it was sent. On a server the steps' queues go under ``names``, the
    replay's own (its claim, emq_kit.claim; TR-1a), never the names the trace's run had.
    A server-clock trace needs a server, the embedded fakeredis included (a serverless
    driver: ``BadArgument``)."""
    url, scripts, driver = source_of(head, url=url, scripts=scripts, driver=driver)
    mode = clock or head.get("clock") or "virtual"
    if mode == "server" and url is None and driver is not None:
        raise BadArgument("the server clock needs a server: give --url")
    target = open_target(url, scripts, driver, clock=mode, timeout=timeout, partial=True, names=names)
    if mode != "server":
        return target, None
    try:  # the embedded fakeredis reads its host's clock (as the ci profile's server-clock phase)
        if url is not None:
            return target, ServerClock.for_url(url)
        assert target.conn is not None  # no URL, no driver: the built-in client on the embedded fakeredis
        return target, ServerClock.over(target.conn.redis)
    except BaseException:
        target.close()
        raise


def write_trace(report: "Report", directory: Path) -> None:
    """Write each difference's trace into ``directory`` — the replay that reproduced it
    (``emq_kit/check/reproduce.py``), so its signature is the listed one — and each
    difference that did not reproduce, as the run met it; keep the paths and printouts
    on the report."""
    for d in [*report.differences, *report.unreproduced]:
        head = header(report.target, seed=report.seed, profile=report.profile,
                      clock=getattr(d.clock, "mode", "virtual"))
        if d.replayed is None and not d.shrunk:  # known before any step (the fence, DP-9d): its evidence is all
            d.trace_text = "\n".join(d.divergence.lines)
            continue
        if d.reproduced and d.replayed is not None:
            trace = traced(d.replayed, head, d.names)
            d.trace_text = step_table(d.replayed) + "\n" + explain(d.replayed)
        else:  # the steps and answers as the run met them: a replay may yet show it
            trace = Trace({**head, "renamed": {}}, d.shrunk, divergence_json(d.divergence, len(d.shrunk)))
            met = Replayed(d.shrunk, d.divergence, len(d.shrunk))
            ended = "the run ended at it, as met: a dead driver or a script the server still runs leaves no replay"
            d.trace_text = (f"replayed {d.replays} times: {showed(d.seen)}\n" + step_table(met) if d.replays
                            else f"{ended}\n{step_table(met)}\n{explain(met)}")
        path = trace_path(directory, trace)
        d.trace = path if path.is_file() else trace.write(path)  # known already: the file stays as it was
    if report.differences:
        report.trace, report.trace_text = report.differences[0].trace, report.differences[0].trace_text


def write_interrupted(steps: list[Step], target: Target, directory: Path, *, seed: int, profile: str,
                      clock: str) -> Path:
    """The steps an interrupted run's last example had made, as a trace without a
    divergence (``seed<seed>-interrupted-<n>.json`` in ``directory``): replayable as is."""
    trace = Trace(header(target.describe(), seed=seed, profile=profile, clock=clock), list(steps))
    n = 1
    while (directory / f"seed{seed}-interrupted-{n}.json").exists():
        n += 1
    return trace.write(directory / f"seed{seed}-interrupted-{n}.json")

"""``emq replay``: re-execute a trace step by step on the model and a target, show where
they part, and write a standalone regression test from it.

Replay runs the machine's own ``execute`` for each step (no Hypothesis), so a step is
checked exactly as it was during ``emq check``: answers, whole snapshots, invariants.
"""

from __future__ import annotations

import argparse
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from emq_model.invariants import Violation, check
from emq_model.snapshot import Snapshot, diff

from .cli import EXIT_FAIL, EXIT_OK, Usage
from .clock import Clock
from .machine import Conformance, Divergence, Run
from .targets import Target
from .trace import Trace, TraceStep, divergence_json, renamed, renaming


@dataclass
class Replayed:
    """A replay's result: every step run (answers filled in), and at the first divergence
    its index (1-based), the divergence, both snapshots and the target's violations."""

    steps: list[TraceStep]
    divergence: Divergence | None = None
    index: int = 0
    model: Snapshot | None = None
    target: Snapshot | None = None
    violations: tuple[Violation, ...] = ()

    @property
    def conforms(self) -> bool:
        return self.divergence is None


def replay(steps: list[TraceStep], target: Target, clock: Clock | None = None) -> Replayed:
    """Run ``steps`` on a fresh model and on ``target`` (reset first)."""
    machine = Conformance.factory(target, Run(), clock)()
    done: list[TraceStep] = []
    for s in steps:
        try:
            if s.op == "forget_row":
                machine.forget(s.queue, s.args["id"])
            elif s.op == "queue":
                machine.open_queue(s.args["name"])
            else:
                if isinstance(s.args.get("now"), int):
                    machine.now = s.args["now"]
                machine.execute(s.queue, s.op, s.args)
        except Divergence as d:
            done.append(TraceStep(s.queue, s.op, s.args, d.step.model, d.step.target))
            return _diverged(machine, done, d)
        last = machine.steps[-1]
        done.append(TraceStep(s.queue, s.op, s.args, last.model, last.target))
    return Replayed(done)


def _diverged(machine: Conformance, done: list[TraceStep], d: Divergence) -> Replayed:
    queue = d.step.queue if d.step.queue in machine.models else None
    if queue is None:  # a refused queue name: no keyspace to show
        return Replayed(done, d, len(done))
    mine = machine.models[queue].snapshot()
    try:
        theirs = machine.target.snapshot(queue)
    except Exception:  # noqa: BLE001 - a serverless driver that died has no keyspace left to read
        return Replayed(done, d, len(done), mine)
    previous = machine.previous.get(queue)
    return Replayed(done, d, len(done), mine, theirs, tuple(check(theirs, previous)))


def record(shrunk: list[TraceStep], target: Target, head: dict[str, Any],
           clock: Clock | None = None) -> tuple[Trace, Replayed]:
    """The trace of a shrunk counterexample: ids renamed to readable stable names when
    the renamed steps still diverge the same way (they should: renaming keeps byte
    order), answers and snapshots taken from a fresh replay on the same target."""
    names = renaming(shrunk)
    result = replay(renamed(shrunk, names), target, clock)
    if result.conforms:  # the target is not deterministic under renaming: keep the originals
        names, result = {}, replay(shrunk, target, clock)
    trace = Trace({**head, "renamed": {new: old for old, new in names.items()}}, result.steps)
    if result.divergence is not None:
        trace.divergence = divergence_json(result.divergence, result.index)
        trace.snapshots = {k: v for k, v in (("model", result.model), ("target", result.target)) if v is not None}
    return trace, result


def trace_path(directory: Path, trace: Trace) -> Path:
    """A new file name in ``directory``: seed, rule and a counter."""
    d = trace.divergence or {}
    stem = f"seed{trace.header.get('seed')}-{d.get('rule', 'conforms')}"
    n = 1
    while (directory / f"{stem}-{n}.json").exists():
        n += 1
    return directory / f"{stem}-{n}.json"


# -- printing ---------------------------------------------------------------------------


def _short(value: Any, width: int = 40) -> str:
    text = "-" if value is None else value if isinstance(value, str) else repr(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def step_table(result: Replayed) -> str:
    """One line per step: op, args, model answer, target answer; the diverging one marked."""
    lines = [f"{'#':>3}  {'queue':<8} {'op':<13} {'args':<52} {'model':<24} target"]
    for i, s in enumerate(result.steps, 1):
        args = " ".join(f"{k}={_short(v, 24)}" for k, v in s.args.items())
        mark = f"   <- diverges ({result.divergence.rule})" if i == result.index and result.divergence else ""
        lines.append(f"{i:>3}  {_short(s.queue, 8):<8} {s.op:<13} {_short(args, 52):<52} "
                     f"{_short(s.model, 24):<24} {_short(s.target, 24)}{mark}")
    return "\n".join(lines)


def explain(result: Replayed) -> str:
    """The divergence in plain words: the evidence, the snapshot differences, and what
    the invariants say of the target's keyspace."""
    if result.divergence is None:
        return f"conforms: all {len(result.steps)} steps agree with the model"
    d = result.divergence
    lines = [f"step {result.index} diverges: the {d.kind} ({d.rule})"]
    lines += [f"  {line}" for line in d.lines]
    if result.model is not None and result.target is not None:
        differences = diff(result.model, result.target)
        if differences:
            lines.append(f"the keyspace of queue {result.model.queue!r}, target vs model:")
            lines += [f"  {line}" for line in differences]
        if result.violations:
            lines.append("invariants broken in the target's keyspace:")
            lines += [f"  {v}" for v in result.violations]
    return "\n".join(lines)


_PYTEST = '''"""Regression test written by `emq replay --pytest` from {source}.

It replays the trace on the model and on the target (the trace's target, or the server
in $EMQ_URL, or the script directory in $EMQ_SCRIPTS) and fails while the target still
diverges: step {step}, {rule}. Keep it as a guard once the fix has landed.
"""

import json
import os

from emq_kit.replay import explain, replay, step_table, target_for
from emq_kit.trace import Trace

TRACE = Trace.from_json(json.loads(r"""
{blob}
"""))


def test_trace_conforms() -> None:
    target = target_for(TRACE.header, url=os.environ.get("EMQ_URL"), scripts=os.environ.get("EMQ_SCRIPTS"))
    try:
        result = replay(TRACE.steps, target)
    finally:
        target.close()
    assert result.conforms, step_table(result) + "\\n" + explain(result)
'''


def pytest_source(trace: Trace, source: str) -> str:
    """A standalone regression test: it fails while the target still diverges."""
    d = trace.divergence or {}
    blob = json.dumps(trace.to_json(), ensure_ascii=True, indent=1)
    return _PYTEST.format(source=source, step=d.get("step"), rule=d.get("rule"), blob=blob)


def target_for(head: dict[str, Any], *, url: str | None = None, scripts: str | None = None,
               driver: str | None = None) -> Target:
    """The target a trace names in its header, unless ``url``/``scripts``/``driver`` say
    otherwise (``Usage`` when it cannot be had)."""
    from .check import _target

    named = head.get("target", {})
    if driver is not None and url is None:
        url = named.get("url")  # the server the trace's driver ran on, if it had one
    if url is None and scripts is None and driver is None:
        driver = named.get("driver")
        url = named.get("url") if driver else (None if named.get("target") == "fakeredis" else named.get("target"))
        scripts = None if driver or named.get("scripts") in (None, "builtin") else named.get("scripts")
    return _target(url, scripts, driver)


def cmd_replay(args: argparse.Namespace) -> int:
    logging.getLogger("emq_live").setLevel(logging.ERROR)  # dropped orphans are the trace's business
    try:
        trace = Trace.load(args.trace)
    except (OSError, ValueError, KeyError) as exc:
        raise Usage(f"cannot read trace {args.trace}: {exc}") from None
    if args.pytest:
        Path(args.pytest).write_text(pytest_source(trace, args.trace), "utf-8")
        print(f"wrote {args.pytest}")
    target = target_for(trace.header, url=args.url, scripts=args.scripts, driver=args.driver)
    try:
        result = replay(trace.steps, target)
        described = target.describe()
    finally:
        target.close()
    print(f"replaying {args.trace} ({len(trace.steps)} steps) on {described.get('target')} "
          f"({described.get('server', '?')}), scripts {described.get('scripts', '-')}")
    print(step_table(result))
    print(explain(result))
    return EXIT_OK if result.conforms else EXIT_FAIL


def register(sub: Any) -> None:
    """Add ``emq replay`` to the command line."""
    r = sub.add_parser("replay", help="re-run a trace on the model and a target, step by step")
    r.add_argument("trace", help="a trace file written by emq check")
    r.add_argument("--url", help="replay on this server (default: the trace's target); with --driver, "
                   "the server the driver uses")
    r.add_argument("--scripts", metavar="DIR", help="replay with these scripts (on fakeredis, or on --url)")
    r.add_argument("--driver", metavar="CMD", help="replay through a port's driver")
    r.add_argument("--pytest", metavar="FILE", help="also write a standalone regression test")
    r.set_defaults(func=cmd_replay)


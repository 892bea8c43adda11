"""The one report every command writes: a versioned JSON document,
``specs/schemas/report.json``. A function per command turns that command's result into
the document; ``validate`` holds a document against the schema."""

from __future__ import annotations

import datetime as dt
import json
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from emq_live.urls import redact
from emq_model import spec

if TYPE_CHECKING:  # the check's modules (Hypothesis) load only where a check is reported
    from emq_kit.check.step import Step


def printable(text: str) -> str:
    """``text`` (an id or key read as UTF-8 with surrogate escapes) as printable UTF-8:
    a byte that is not UTF-8 shows as ``\\xNN``."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


# -- the document -------------------------------------------------------------------------

FORMAT = "emq-report"
VERSION = 3
"""2: a check's ``causes`` and ``unreproduced``, a difference's class by its effect;
3: one verdict vocabulary, the command's own word its ``detail`` (TR-18)."""


def schema() -> dict[str, Any]:
    """``specs/schemas/report.json``, parsed, with each command's detail words and
    their verdicts as ``specs/verdicts.json`` gives them (written there once)."""
    from emq_kit.report.verdicts import DETAILS

    document: dict[str, Any] = json.loads(spec.text("schemas/report.json"))
    document["allOf"] += [
        {"if": {"properties": {"command": {"const": command}}},
         "then": {"anyOf": [{"properties": {"detail": {"const": detail}, "verdict": {"const": row["verdict"]}}}
                            for detail, row in rows.items()]}}
        for command, rows in DETAILS.items()]
    return document


def validate(document: dict[str, Any]) -> None:
    """Raise ``jsonschema.ValidationError`` unless ``document`` is a valid report.
    (jsonschema is a test dependency; the kit itself never needs it.)"""
    import jsonschema

    jsonschema.Draft202012Validator(schema()).validate(document)


def kit_version() -> str:
    """The installed kit's version (``unknown`` when it is not installed as a package)."""
    try:
        return metadata.version("emq")
    except metadata.PackageNotFoundError:
        return "unknown"


def _time(moment: dt.datetime) -> str:
    return moment.astimezone(dt.timezone.utc).isoformat(timespec="milliseconds")


def envelope(command: str, detail: str, exit: int, body: dict[str, Any], *, target: str | None,
             seed: int | None, figures: dict[str, float | None], started: dt.datetime,
             finished: dt.datetime) -> dict[str, Any]:
    """The common envelope around one command's ``body``: its verdict that of its
    ``detail`` word (specs/verdicts.json, TR-18); ``target`` is redacted here."""
    from emq_kit.report.verdicts import verdict

    return {
        "format": FORMAT, "version": VERSION, "command": command, "verdict": verdict(command, detail),
        "detail": detail, "exit": exit,
        "target": None if target is None else redact(target), "seed": seed, "figures": figures,
        "emq": kit_version(), "spec_version": spec.SPEC_VERSION,
        "started": _time(started), "finished": _time(finished), command: body,
    }


def _described(target: dict[str, Any]) -> dict[str, Any]:
    """A target description with any URL in it redacted."""
    return {k: redact(v) if isinstance(v, str) else v for k, v in target.items()}


def _name(target: dict[str, Any]) -> str | None:
    name = target.get("target")
    return name if name is None else str(name)


def difference(divergence: Any, klass: str, index: int, steps: list[Step],
               trace: Path | str | None, target: dict[str, Any] | None = None) -> dict[str, Any]:
    """One divergence as the report lists it: its signature (``emq_kit/check/signature.py``:
    the name check, replay, the trace and the HTML page all give it), its class by effect,
    the shrunk steps, its trace and the command that replays it (with the driver or
    scripts of ``target``, the run's)."""
    from emq_kit.check.signature import signature
    from emq_kit.trace.replay import replay_command

    sig = signature(divergence)
    return {
        "signature": {"cell": sig.cell, "rule": sig.rule}, "class": klass,
        "kind": divergence.kind, "step": index, "evidence": [printable(line) for line in divergence.lines],
        "shrunk_steps": [_step(s, i) for i, s in enumerate(steps, 1)],
        "trace": None if trace is None else str(trace),
        "replay": None if trace is None else replay_command(trace, target or {}),
    }


def _step(step: Step, index: int) -> dict[str, Any]:
    from emq_kit.trace.format import step_json

    return {**step_json(step, index), "text": printable(f"{step.op}({step.queue!r}, "
                                                     + ", ".join(f"{k}={v!r}" for k, v in step.args.items()) + ")")}


def check_document(report: Any, *, exit: int, started: dt.datetime, finished: dt.datetime,
                   rerun: str) -> dict[str, Any]:
    """The report of ``emq check`` from its ``check.Report``; ``rerun`` is the command
    that runs the search again. ``differences`` lists the reproduced ones (lifecycle
    first), ``causes`` groups them (each naming its differences by index, its
    representative among them), ``unreproduced`` the ones no replay showed."""
    differences = [_found(d, report.target) for d in report.differences]
    listed = {id(d): n for n, d in enumerate(report.differences)}
    causes = [{"title": printable(c.title), "class": c.klass, "ops": c.ops,
               "differences": [listed[id(d)] for d in c.differences],
               "representative": listed[id(c.representative)]} for c in getattr(report, "causes", ())]
    unreproduced = [{**_found(d, report.target), "replays": d.replays, "seen": d.seen,
                     **({"again": [_step(s, i) for i, s in enumerate(d.again, 1)]} if d.again is not None else {})}
                    for d in getattr(report, "unreproduced", ())]
    body = {
        "profile": report.profile, "target": _described(report.target), "examples": report.examples,
        "steps": report.steps, "invariant_checks": report.checks,
        "cells": {"reached": report.reached, "total": report.total,
                  "unreached": [f"{op}/{o}" for op, o in report.unreached],
                  "not_implemented": [f"{op}/{o}" for op, o in getattr(report, "not_implemented", ())],
                  "hits": dict(report.hits)},
        "differences": differences, "causes": causes, "unreproduced": unreproduced, "rerun": rerun,
        "corpus": [k.to_json() for k in getattr(report, "corpus", ())],
        "op_mix": dict(getattr(report, "op_mix", {}) or {}), "phases": dict(getattr(report, "phases", {}) or {}),
    }
    figures = {"seconds": round(report.seconds, 3), "steps_per_second": round(report.steps_per_second, 1),
               "examples": report.examples, "steps": report.steps}
    return envelope("check", report.detail, exit, body, target=_name(report.target), seed=report.seed,
                    figures=figures, started=started, finished=finished)


def _found(d: Any, target: dict[str, Any]) -> dict[str, Any]:
    """A difference of a check (``check.run.Difference``) on ``target`` as the report lists it."""
    steps = list(d.shrunk)
    index = next((i for i, s in enumerate(steps, 1) if s.index == d.divergence.step.index), len(steps))
    one = difference(d.divergence, d.klass, index, steps, d.trace, target)
    one["signature"] = {"cell": d.signature.cell, "rule": d.signature.rule}  # the fence's: no step to name it
    one["seconds"], one["count"] = round(d.seconds, 3), max(d.met, 1)
    return one


def replay_document(trace_path: Path | str, result: Any, described: dict[str, Any], *, exit: int,
                    started: dt.datetime, finished: dt.datetime, seed: int | None = None) -> dict[str, Any]:
    """The report of ``emq replay`` from its ``replay.Replayed`` on the ``described``
    target."""
    d = result.divergence
    body = {
        "trace": str(trace_path), "target": _described(described),
        "steps": [_step(s, i) for i, s in enumerate(result.steps, 1)],
        "difference": None if d is None else difference(d, result.klass, result.index, result.steps, trace_path,
                                                        described),
        "violations": [_violation(v) for v in result.violations],
    }
    return envelope("replay", "conforms" if result.conforms else "diverges", exit, body, target=_name(described),
                    seed=seed, figures={"steps": len(result.steps)}, started=started, finished=finished)


def selftest_detail(summary: dict[str, Any]) -> str:
    """``emq selftest``'s word for ``summary`` (specs/verdicts.json): a survivor first,
    then a mutant its budget left unjudged; all killed is ``all-killed`` only when every
    mutant was judged (specs/selftest.md, Verdicts)."""
    if summary["survived"]:
        return "survivors"
    if summary["unjudged"]:
        return "unjudged"
    return "part-killed" if summary["mutants"] < summary.get("of", summary["mutants"]) else "all-killed"


def selftest_document(verdicts: list[Any], summary: dict[str, Any], *, target: str | None, seed: int, exit: int,
                      started: dt.datetime, finished: dt.datetime) -> dict[str, Any]:
    """The report of ``emq selftest`` from its verdicts and ``selftest.summary``."""
    body = {"summary": summary, "mutants": [
        {"key": v.mutant.key, "status": v.status, "seconds": round(v.seconds, 3), "examples": v.examples,
         "shrunk": v.shrunk, "rule": v.rule, "reason": v.reason,
         "shrink_seconds": None if v.shrink_seconds is None else round(v.shrink_seconds, 3)} for v in verdicts]}
    figures = {k: summary[k] for k in ("mutants", "killed", "equivalent", "survived", "unjudged",
                                          "median_seconds_to_kill")}
    return envelope("selftest", selftest_detail(summary), exit, body, target=target or "fakeredis",
                    seed=seed, figures=figures, started=started, finished=finished)


def soak_document(report: Any, history_dir: Path | str | None, *, target: str | None, exit: int,
                  started: dt.datetime, finished: dt.datetime) -> dict[str, Any]:
    """The report of ``emq soak`` from its ``SoakReport``; ``history_dir`` is where its
    history was kept (None if it was not)."""
    from dataclasses import asdict

    from emq_kit.soak import history

    figures = report.figures()
    lin = report.checked.linearizability
    failing = (lin.illegal or lin.unknown or [None])[0]
    partition = None
    if failing is not None:
        ops = sorted(failing.ops, key=lambda o: o.invoke)
        origin = ops[0].invoke if ops else 0
        partition = {"job": printable(str(failing.key)), "verdict": failing.verdict, "reason": printable(failing.reason),
                     "ops": [printable(history.describe(o, origin)) for o in ops],
                     "longest": [printable(history.describe(failing.ops[i], origin)) for i in failing.longest]}
    body = {"figures": figures, "config": asdict(report.config),
            "history": None if history_dir is None else str(history_dir),
            "linearizability": lin.verdict, "failing_partition": partition,
            "problems": [printable(p) for p in figures["problems"]]}
    headline = {k: figures[k] for k in ("jobs", "completed", "dead", "lost", "duplicated", "history", "run_seconds",
                                        "check_seconds")}
    return envelope("soak", report.detail, exit, body, target=target, seed=report.config.seed,
                    figures=headline, started=started, finished=finished)


MEASURED = "measured"
"""``emq bench``'s word for a run that measured (one that did not conform measures nothing)."""


def bench_document(bench: Any, *, target: str | None, exit: int, started: dt.datetime,
                   finished: dt.datetime) -> dict[str, Any]:
    """The report of ``emq bench`` from its ``Bench``: every figure with its ceiling."""
    body = bench.to_json()
    return envelope("bench", MEASURED if exit == 0 else "wrong", exit, body, target=target,
                    seed=bench.params.seed, figures={f.key: f.value for f in bench.figures},
                    started=started, finished=finished)


def _violation(v: Any, queue: str | None = None) -> dict[str, Any]:
    out = {"invariant": v.invariant, "id": None if v.id is None else printable(v.id), "seen": printable(v.seen)}
    return out if queue is None else {"queue": printable(queue), **out}


def audit_document(result: Any, *, target: str, exit: int, started: dt.datetime,
                   finished: dt.datetime) -> dict[str, Any]:
    """The report of ``emq audit`` from its ``AuditResult``."""
    queues = [{**q.to_json(), "queue": printable(q.queue)} for q in result.queues]
    body = {"fence": result.fence, "queues": queues,
            "violations": [_violation(v, q) for q, v in result.violations],
            "total": result.total, "truncated": result.truncated}
    figures = {"queues": len(result.queues), "violations": result.total,
               "jobs": sum(sum(q.counts.values()) for q in result.queues),
               "seconds": round((finished - started).total_seconds(), 3)}
    return envelope("audit", result.detail, exit, body, target=target, seed=None,
                    figures=figures, started=started, finished=finished)

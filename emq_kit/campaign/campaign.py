"""A campaign (specs/campaign.md): the plan's runs handed to a Dask cluster as workers
free up, each run's report and traces written as it ends, the corpus shared (CMP-7),
and the campaign's one report. ``emq campaign`` is a thin caller of ``run_campaign``."""

from __future__ import annotations

import datetime as dt
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, TypedDict

from emq_kit.campaign import cluster as dask_cluster
from emq_kit.campaign.combine import ENVIRONMENT, ERROR, VERDICT, RunRecord, campaign_document, distinct
from emq_kit.campaign.plan import Plan, PlannedRun
from emq_kit.campaign.tasks import RunResult, run_check
from emq_kit.outputs import writable_dir
from emq_kit.redaction import write_text
from emq_live.urls import redact

RETRIES = 2
"""Attempts after the first for a run whose environment failed (CMP-4)."""


@dataclass
class Progress:
    """What the progress line shows: runs done of total, distinct differences so far,
    and the ETA from the mean run time so far (None before the first run ends)."""

    done: int
    total: int
    differences: int
    eta: float | None


class Corpus:
    """The traces found, one directory per target (CMP-7): each run of the target gets
    them as the traces directory its check replays first, and the files its check wrote
    are added (named by their content, TR-16: the same counterexample is one file)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, target: str, name: str) -> Path:
        return self.root / target / name

    def of(self, target: str) -> dict[str, str]:
        """The target's traces now: file name -> text. An entry that is no regular file
        (a FIFO, a device, a directory), is larger than a trace or is not UTF-8 is not
        handed on (specs/trace.md TR-9c): a run's corpus holds files only."""
        from emq_kit.inputs import read_text
        from emq_kit.trace.validate import MAX_BYTES

        where = self.root / target
        texts = {}
        for p in sorted(where.glob("*.json")) if where.is_dir() else []:
            try:
                texts[p.name] = read_text(p, MAX_BYTES, "a trace holds")
            except (OSError, UnicodeDecodeError):
                continue
        return texts

    def keep(self, target: str, traces: dict[str, str]) -> None:
        """Add the files ``traces`` (name -> text) the target's corpus lacks."""
        for name, text in traces.items():
            if not self.path(target, name).exists():
                write_text(self.path(target, name), text)


def plan_json(plan: Plan) -> dict[str, Any]:
    """The plan as the report gives it (URLs redacted)."""
    targets = [{"name": t.name, "url": None if t.url is None else redact(t.url), "driver": t.driver,
                "scripts": t.scripts, "layout": t.layout} for t in plan.targets]
    return {"targets": targets, "seeds": list(plan.seeds), "profiles": list(plan.profiles),
            "clocks": list(plan.clocks), "examples": plan.examples, "steps": plan.steps, "hostile": plan.hostile}


def run_campaign(plan: Plan, spec: dask_cluster.ClusterSpec, out: Path, *, corpus: Path | None = None,
                 retries: int = RETRIES, progress: Callable[[Progress], None] | None = None,
                 connected: Callable[[Any], None] | None = None) -> dict[str, Any]:
    """Run every run of ``plan`` on the cluster ``spec``; write each run's report under
    ``out/runs/`` and its new traces into ``corpus`` (default ``out/corpus``); return the
    campaign's report. ``connected`` is called with the client once the cluster is up
    (its dashboard), ``progress`` after each run. The plan and the outputs are checked
    before the cluster is asked for anything (CMP-1, OUT-1)."""
    runs = plan.runs()
    writable_dir(str(out), "the campaign's directory")
    kept = Corpus(corpus or out / "corpus")
    writable_dir(str(kept.root), "the corpus")
    for t in plan.targets:  # each target's own directories too: a file in one's place ends no run late
        writable_dir(str(out / "runs" / t.name), "the runs' reports")
        writable_dir(str(kept.root / t.name), "the corpus")
    records: dict[str, RunRecord] = {}
    keys: dict[str, str] = {}  # run id -> its task's key, which its start events name
    began, clock = dt.datetime.now(dt.timezone.utc), time.monotonic()
    servers = [t.url for t in plan.targets if t.url is not None]  # what each run claims on (OWN-1)
    with dask_cluster.connected(spec, servers=servers, command="emq campaign") as client:
        if connected is not None:
            connected(client)
        link = dask_cluster.dashboard(client)
        for done in dask_cluster.bag(client, runs, run_check, lambda r: (r, kept.of(r.target)), retries=retries,
                                     name=lambda r: r.id):
            records[done.item.id] = _record(done, kept, out)
            keys[done.item.id] = done.key
            if progress is not None:
                spent = time.monotonic() - clock
                left = len(runs) - len(records)  # the wall time per run so far already counts the workers
                progress(Progress(len(records), len(runs), distinct(records.values()), spent / len(records) * left))
        starts = dask_cluster.attempts(client)
    ordered = []
    for run in runs:
        record = records[run.id]
        record.workers = starts.get(keys[run.id], record.workers)
        ordered.append(record)
    return campaign_document(ordered, plan=plan_json(plan), cluster=spec.text, dashboard=link,
                             corpus=str(kept.root), started=began, finished=dt.datetime.now(dt.timezone.utc))


class _Place(TypedDict):
    """A run's place in the plan, the fields every ``RunRecord`` of it starts with."""

    id: str
    target: str
    profile: str
    clock: str
    seed: int | None


def _record(done: dask_cluster.Done, kept: Corpus, out: Path) -> RunRecord:
    """A run's end as the campaign keeps it: its traces added to the corpus, its report
    (its paths rewritten to the corpus's) written, or its error."""
    run: PlannedRun = done.item
    o = run.options
    base: _Place = {"id": run.id, "target": run.target, "profile": o.profile, "clock": o.clock, "seed": o.seed}
    if done.error is not None:  # every attempt failed for the environment, or its worker was lost each time
        return RunRecord(**base, status=ENVIRONMENT, error=f"{type(done.error).__name__}: {done.error}")
    result: RunResult = done.result
    if result.document is None:
        return RunRecord(**base, status=ERROR, error=result.error)
    from emq_kit.trace.replay import replay_command

    document = result.document
    kept.keep(run.target, result.traces)
    body = document["check"]
    for d in body["differences"] + body["unreproduced"]:  # the worker's paths are gone: the corpus's
        if d["trace"]:
            path = kept.path(run.target, Path(d["trace"]).name)
            d["trace"], d["replay"] = str(path), replay_command(path, body["target"])
    for k in body.get("corpus", []):
        k["trace"] = str(kept.path(run.target, Path(k["trace"]).name))
    report = out / run.file
    write_text(report, json.dumps(document, indent=2) + "\n")
    return RunRecord(**base, status=VERDICT, document=document, report=str(report))

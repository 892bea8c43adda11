"""A campaign's runs combined into its one report (specs/campaign.md CMP-6): every run,
the differences deduplicated by signature across runs with the runs that found each
and the shortest trace, the causes by title, and per target the union of the cells its
runs reached. Pure: documents in, a document out."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any, Iterable

from emq_kit.errors import EXIT_ENV, EXIT_FAIL, EXIT_OK
from emq_kit.report.document import envelope

VERDICT = "verdict"
ENVIRONMENT = "environment"
ERROR = "error"
"""A run's status: it gave a verdict; its environment failed on every attempt (CMP-4);
the kit refused or failed it (its one line). Only the first counts in the results."""


@dataclass
class RunRecord:
    """One run as the campaign saw it end: its place in the plan, how it ended, the
    workers that started it (more than one: retried), its check document and where that
    was written."""

    id: str
    target: str
    profile: str
    clock: str
    seed: int | None
    status: str
    workers: list[str] = field(default_factory=list)
    document: dict[str, Any] | None = None
    report: str | None = None
    error: str | None = None

    def signatures(self) -> list[tuple[str | None, str]]:
        """The signatures of the differences it found, as (cell, rule)."""
        return [(d["signature"]["cell"], d["signature"]["rule"]) for d in _body(self)["differences"]]


def _body(run: RunRecord) -> dict[str, Any]:
    return run.document["check"] if run.document is not None else {"differences": [], "causes": []}


def _sig(d: dict[str, Any]) -> tuple[str | None, str]:
    return d["signature"]["cell"], d["signature"]["rule"]


def differences(runs: list[RunRecord]) -> list[dict[str, Any]]:
    """Every signature found by any run, once: the runs that found it (plan order), its
    class, its cause's title, and the shortest trace among them (the first run's in plan
    order among equals)."""
    found: dict[tuple[str | None, str], dict[str, Any]] = {}
    for run in runs:
        body = _body(run)
        titles = {i: c["title"] for c in body["causes"] for i in c["differences"]}
        for i, d in enumerate(body["differences"]):
            entry = found.setdefault(_sig(d), {"signature": d["signature"], "class": d["class"], "kind": d["kind"],
                                               "cause": titles.get(i), "runs": [], "steps": None, "trace": None,
                                               "replay": None, "evidence": d["evidence"]})
            entry["runs"].append(run.id)
            if entry["steps"] is None or len(d["shrunk_steps"]) < entry["steps"]:
                entry.update(steps=len(d["shrunk_steps"]), trace=d["trace"], replay=d["replay"],
                             evidence=d["evidence"], first=run.id)
    return sorted(found.values(), key=lambda e: (e["class"] != "lifecycle", e["signature"]["cell"] or "",
                                                 e["signature"]["rule"]))


def causes(runs: list[RunRecord]) -> list[dict[str, Any]]:
    """Every cause title found by any run, once, with its class and the runs that found it."""
    found: dict[str, dict[str, Any]] = {}
    for run in runs:
        for c in _body(run)["causes"]:
            entry = found.setdefault(c["title"], {"title": c["title"], "class": c["class"], "ops": [], "runs": []})
            entry["runs"].append(run.id)
            entry["ops"] += [op for op in c["ops"] if op not in entry["ops"]]
    return sorted(found.values(), key=lambda e: (e["class"] != "lifecycle", e["title"]))


def coverage(runs: list[RunRecord]) -> dict[str, dict[str, Any]]:
    """Per target, the union of its runs' coverage: hits summed, a cell reached by any
    run is reached, a cell not implemented by all its runs is not implemented."""
    out: dict[str, dict[str, Any]] = {}
    for run in runs:
        if run.document is None:
            continue
        cells = run.document["check"]["cells"]
        every = set(cells["hits"]) | set(cells["unreached"]) | set(cells["not_implemented"])
        entry = out.setdefault(run.target, {"hits": {}, "cells": set(), "not_implemented": None})
        entry["cells"] |= every
        for cell, n in cells["hits"].items():
            entry["hits"][cell] = entry["hits"].get(cell, 0) + n
        absent = set(cells["not_implemented"])
        entry["not_implemented"] = absent if entry["not_implemented"] is None else entry["not_implemented"] & absent
    return {name: _union(entry) for name, entry in sorted(out.items())}


def _union(entry: dict[str, Any]) -> dict[str, Any]:
    reached = {c for c, n in entry["hits"].items() if n > 0}
    absent = entry["not_implemented"] - reached
    return {"reached": len(reached), "total": len(entry["cells"]), "hits": dict(sorted(entry["hits"].items())),
            "unreached": sorted(entry["cells"] - reached - absent), "not_implemented": sorted(absent)}


def verdict(runs: list[RunRecord]) -> tuple[str, int]:
    """The campaign's verdict and exit code: ``counterexample`` (1) when a run found a
    difference, ``uncovered`` (1) when a run failed its gate without one,
    ``environment`` (2) when a run ended without a verdict, ``no-divergence`` (0) when a
    run met no difference yet did not conform (a dev run: no conformance verdict, TR-18),
    ``conforms`` (0) only when every run conformed."""
    judged = [r.document for r in runs if r.document is not None]
    if any(d["check"]["differences"] or any(k["verdict"] == "fails" and k["expected"] is None
                                            for k in d["check"].get("corpus", [])) for d in judged):
        return "counterexample", EXIT_FAIL
    if any(d["exit"] == EXIT_FAIL for d in judged):
        return "uncovered", EXIT_FAIL
    if any(r.status != VERDICT for r in runs):
        return ENVIRONMENT, EXIT_ENV
    if any(d["verdict"] != "conforms" for d in judged):
        return "no-divergence", EXIT_OK
    return "conforms", EXIT_OK


def run_entry(run: RunRecord) -> dict[str, Any]:
    """A run as the campaign report lists it."""
    doc = run.document
    return {"id": run.id, "target": run.target, "profile": run.profile, "clock": run.clock, "seed": run.seed,
            "status": run.status, "verdict": None if doc is None else doc["verdict"],
            "detail": None if doc is None else doc["detail"],
            "exit": None if doc is None else doc["exit"], "attempts": len(run.workers), "workers": run.workers,
            "seconds": None if doc is None else doc["figures"].get("seconds"), "report": run.report,
            "error": run.error, "signatures": [{"cell": c, "rule": r} for c, r in run.signatures()],
            "replayed": _body(run).get("corpus", [])}


def campaign_document(runs: list[RunRecord], *, plan: dict[str, Any], cluster: str, dashboard: str | None,
                      corpus: str, started: dt.datetime, finished: dt.datetime) -> dict[str, Any]:
    """The campaign's report (specs/schemas/report.json, command ``campaign``); ``runs``
    in plan order."""
    found = differences(runs)
    word, code = verdict(runs)
    retried = sum(len(r.workers) > 1 for r in runs)
    body = {"plan": plan, "cluster": cluster, "dashboard": dashboard, "corpus": corpus,
            "runs": [run_entry(r) for r in runs], "differences": found, "causes": causes(runs),
            "coverage": coverage(runs)}
    figures: dict[str, float | None] = {
        "runs": len(runs), "judged": sum(r.status == VERDICT for r in runs),
        "environment": sum(r.status == ENVIRONMENT for r in runs), "errors": sum(r.status == ERROR for r in runs),
        "retried": retried, "differences": len(found), "seconds": round((finished - started).total_seconds(), 3)}
    return envelope("campaign", word, code, body, target=None, seed=None, figures=figures, started=started,
                    finished=finished)


def distinct(runs: Iterable[RunRecord]) -> int:
    """The distinct signatures found so far (the progress line's differences)."""
    return len({s for r in runs for s in r.signatures()})

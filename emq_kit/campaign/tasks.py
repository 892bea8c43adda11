"""What a campaign's worker runs (specs/campaign.md CMP-3..5, CMP-7): one check of a
planned run, one selftest mutant, and the probe that tells a worker fit to run them.
Each is a plain function of picklable values, importable by name on a worker that has
the kit installed; none of them knows Dask beyond the event it logs at its start.

A run that cannot happen for its environment raises ``TargetUnavailable`` (a message
only, so it pickles), which Dask retries; any other ``KitError`` of the run is returned
as the run's error, never retried (the same input fails the same way again).
"""

from __future__ import annotations

import datetime as dt
import multiprocessing
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from emq_kit.errors import KitError, ServerError, TargetUnavailable
from emq_kit.redaction import write_text

if TYPE_CHECKING:
    from emq_kit.campaign.plan import PlannedRun
    from emq_kit.selftest.mutation import Mutant, MutantVerdict

EVENTS = "emq-campaign"
"""The scheduler's event topic a task logs its start on: ``{"run": id, "worker": address}``
(a run started twice was retried, CMP-4)."""


def started(key: str) -> None:
    """Log the start of the task ``key`` on the scheduler, naming this worker (nothing
    outside a Dask worker)."""
    try:
        from distributed import get_worker

        worker = get_worker()
    except (ImportError, ValueError):  # called in the client's process (a test, a serial run)
        return
    worker.log_event(EVENTS, {"run": key, "worker": worker.address})


@dataclass
class RunResult:
    """What a run's task gives back: its check report (the versioned document), the text
    of each trace it wrote by file name, and each corpus trace it replayed first:
    ``{"trace": name, "reproduced": bool, "signature": {"cell", "rule"} | None}``. A run
    that failed in the kit has ``error`` (its one line) and no document."""

    id: str
    document: dict[str, Any] | None
    traces: dict[str, str] = field(default_factory=dict)
    replayed: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None


def run_check(run: PlannedRun, corpus: dict[str, str]) -> RunResult:
    """One planned run on this worker: first a replay of each corpus trace (``corpus``:
    file name -> trace text, its target's, CMP-7), then its check, both under claims of
    their own (OWN-1). Environment failures raise ``TargetUnavailable`` for Dask to
    retry (CMP-4)."""
    from emq_kit.api import check
    from emq_kit.report.document import check_document

    started(run.id)
    with tempfile.TemporaryDirectory(prefix="emq-run-") as tmp:
        try:
            replayed = [_replayed(name, text, run, Path(tmp)) for name, text in sorted(corpus.items())]
            options = run.options.replace(traces=str(Path(tmp, "traces")))
            begun = dt.datetime.now(dt.timezone.utc)
            report = check(options, say=lambda line: None)
            finished = dt.datetime.now(dt.timezone.utc)
        except (TargetUnavailable, ServerError) as exc:  # the environment's: retried by Dask
            raise TargetUnavailable(f"run {run.id}: {exc}") from None
        except KitError as exc:
            return RunResult(run.id, None, error=exc.show("campaign"))
        document = check_document(report, exit=report.exit_code, started=begun, finished=finished, rerun=report.rerun)
        traces = {Path(d.trace).name: Path(d.trace).read_text("utf-8")
                  for d in [*report.differences, *report.unreproduced] if d.trace is not None}
    return RunResult(run.id, document, traces, replayed)


def _replayed(name: str, text: str, run: PlannedRun, tmp: Path) -> dict[str, Any]:
    """Replay the corpus trace ``name`` on the run's target: whether it still shows its
    difference, and the signature it showed."""
    from emq_kit.api import replay
    from emq_kit.check.signature import signature

    path = write_text(tmp / name, text)
    o = run.options
    try:
        result = replay(path, url=o.url, scripts=o.scripts, driver=o.driver, clock=o.clock, say=lambda line: None)
    except (TargetUnavailable, ServerError):
        raise
    except KitError as exc:  # a trace this target cannot replay (another layout's): said, not fatal
        return {"trace": name, "reproduced": False, "signature": None, "error": exc.show("replay")}
    d = result.result.divergence
    sig = None if d is None else signature(d)
    return {"trace": name, "reproduced": d is not None,
            "signature": None if sig is None else {"cell": sig.cell, "rule": sig.rule}}


def judge_mutant(mutant: Mutant, url: str | None, budget: float, seed: int, wipe: bool = False) -> MutantVerdict:
    """One selftest mutant judged on this worker as ``emq selftest`` judges it, under a
    claim of its own on a server (OWN-1); a server lost meanwhile raises
    ``TargetUnavailable`` for Dask to retry (CMP-4)."""
    from emq_kit.claim import claimed
    from emq_kit.layouts import layout
    from emq_kit.selftest.mutation import ERROR, judge

    started(mutant.key)
    with claimed(url, layout().logical(), command="emq selftest", wipe=wipe) as names:
        verdict = judge(mutant, url, budget, seed, names=names)
    if verdict.status == ERROR:
        raise TargetUnavailable(f"{mutant.key}: {verdict.reason}")
    return verdict


def probe() -> dict[str, Any]:
    """What a worker says of itself before a campaign gives it work (CMP-5): the kit's
    version, and whether it may start a child process (``judge`` forks one)."""
    from emq_kit.report.document import kit_version

    return {"emq": kit_version(), "children": not multiprocessing.current_process().daemon}

"""What a campaign's worker runs (specs/campaign.md CMP-3..5, CMP-7): one check of a
planned run, one selftest mutant, and the probe that tells a worker fit to run them.
Each is a plain function of picklable values, importable by name on a worker that has
the kit installed; none of them knows Dask beyond the event it logs at its start.

A run that cannot happen for its environment raises ``TargetUnavailable`` (a message
only, so it pickles), which Dask retries; any other ``KitError`` of the run is returned
as the run's error, never retried (the same input fails the same way again).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import multiprocessing
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from emq_kit._signals import Stopped
from emq_kit.errors import KitError, ServerError, TargetUnavailable
from emq_kit.redaction import write_text

if TYPE_CHECKING:
    from emq_kit.campaign.plan import PlannedRun
    from emq_kit.selftest.mutation import Mutant, MutantVerdict

EVENTS = "emq-campaign"
"""The scheduler's event topic a task logs its start on: ``{"key": its Dask key,
"worker": address}`` (a task started twice was retried, CMP-4)."""


STOPPED = "stopped by the command that started the worker"
"""What a task told to ``stop`` raises ``Stopped`` with."""


def stop() -> None:
    """Run on each worker of a local cluster (``client.run``) by the command that started
    it, ending early (Ctrl-C, an error of the kit): every task running there stops at its
    next stopping point as an interrupted run stops, its child gone and its claim
    released (INT-2, OWN-5), and raises ``Stopped``; one started later stops at once."""
    from emq_kit import interrupts

    interrupts.stop_every_run()


@contextlib.contextmanager
def _stoppable() -> Iterator[None]:
    """The task's body, ``stop`` honoured: at once, before it claims anything, and at its
    run's stopping points (``Interrupted`` there, ``Stopped`` for Dask)."""
    from emq_kit import interrupts

    try:
        interrupts.check()
        yield
    except interrupts.Interrupted:
        raise Stopped(STOPPED) from None


def started() -> None:
    """Log the start of the task running here on the scheduler, naming this worker
    (nothing outside a Dask worker)."""
    try:
        from distributed import get_worker

        worker = get_worker()
    except (ImportError, ValueError):  # called in the client's process (a test, a serial run)
        return
    worker.log_event(EVENTS, {"key": worker.get_current_task(), "worker": worker.address})


@dataclass
class RunResult:
    """What a run's task gives back: its check report (the versioned document) and the
    text of each trace file its check wrote that the corpus it was given lacked. A run
    that failed in the kit has ``error`` (its one line) and no document."""

    id: str
    document: dict[str, Any] | None
    traces: dict[str, str] = field(default_factory=dict)
    error: str | None = None


def run_check(run: PlannedRun, corpus: dict[str, str]) -> RunResult:
    """One planned run on this worker: its check, with ``corpus`` (file name -> trace
    text, its target's, CMP-7) as the traces directory the check replays before its
    search (emq_kit/check/corpus.py), under a claim of its own (OWN-1). Environment
    failures raise ``TargetUnavailable`` for Dask to retry (CMP-4)."""
    from emq_kit.api import check
    from emq_kit.report.document import check_document

    started()
    with _stoppable(), tempfile.TemporaryDirectory(prefix="emq-run-") as tmp:
        traces = Path(tmp, "traces")
        for name, text in corpus.items():
            write_text(traces / name, text)
        try:
            begun = dt.datetime.now(dt.timezone.utc)
            report = check(run.options.replace(traces=str(traces)), say=lambda line: None)
            finished = dt.datetime.now(dt.timezone.utc)
        except (TargetUnavailable, ServerError) as exc:  # the environment's: retried by Dask
            raise TargetUnavailable(f"run {run.id}: {exc}") from None
        except KitError as exc:
            return RunResult(run.id, None, error=exc.show("campaign"))
        document = check_document(report, exit=report.exit_code, started=begun, finished=finished, rerun=report.rerun)
        found = {p.name: p.read_text("utf-8") for p in sorted(traces.glob("*.json")) if p.name not in corpus}
    return RunResult(run.id, document, found)


def judge_mutant(mutant: Mutant, url: str | None, budget: float, seed: int, wipe: bool = False,
                 layout_name: str | None = None) -> MutantVerdict:
    """One selftest mutant of the layout ``layout_name`` (ours by default; ``bullmq``:
    of the worker's bullmq package's scripts) judged on this worker as ``emq selftest``
    judges it, under a claim of its own on a server (OWN-1); a server lost meanwhile
    raises ``TargetUnavailable`` for Dask to retry (CMP-4)."""
    from emq_kit.claim import claimed
    from emq_kit.layouts import layout
    from emq_kit.selftest import bullmq
    from emq_kit.selftest.mutation import ERROR, judge

    started()
    chosen = layout(layout_name)
    source = bullmq.commands() if chosen.name == "bullmq" else None
    with _stoppable(), claimed(url, chosen.logical(), command="emq selftest", wipe=wipe) as names:
        verdict = judge(mutant, url, budget, seed, source, chosen, names=names)
    if verdict.status == ERROR:
        raise TargetUnavailable(f"{mutant.key}: {verdict.reason}")
    return verdict


def probe() -> dict[str, Any]:
    """What a worker says of itself before a campaign gives it work (CMP-5): the kit's
    version, and whether it may start a child process (``judge`` forks one)."""
    from emq_kit.report.document import kit_version

    return {"emq": kit_version(), "children": not multiprocessing.current_process().daemon}

"""``emq selftest --cluster``: the selftest's mutants as tasks of a Dask cluster
(specs/campaign.md; specs/selftest.md): the same mutants as the serial run, of our
scripts or BullMQ's (``--layout bullmq``), each judged by the same ``judge`` with the
same seed and budget on a worker, under a claim of its own on a server, so the verdicts
are the serial run's."""

from __future__ import annotations

from typing import Callable

from emq_kit.campaign import cluster as dask_cluster
from emq_kit.campaign.tasks import judge_mutant
from emq_kit.claim import claimed
from emq_kit.errors import ServerUnreachable
from emq_kit.layouts import layout
from emq_kit.selftest import bullmq
from emq_kit.selftest.mutation import Mutant, MutantVerdict, chosen_mutants, equivalents, require_verdict, settled

RETRIES = 2
"""Attempts after the first of a mutant whose server failed (its worker lost: the
scheduler reschedules it)."""


def run_selftest_on(spec: dask_cluster.ClusterSpec, url: str | None, budget: float, seed: int,
                    only: str | None = None, *, wipe: bool = False, layout_name: str | None = None,
                    sample: int | None = None,
                    report: Callable[[int, int, MutantVerdict], None] | None = None) -> list[MutantVerdict]:
    """Judge the serial run's mutants of the layout ``layout_name`` (ours:
    ``chosen_mutants``; ``bullmq``: ``bullmq.chosen_mutants``, its server checked by the
    caller) on the cluster ``spec``; the verdicts in the mutants' order (``report`` is
    called with k done of n and each as it ends), settled as serially. A mutant the
    environment left without a verdict on every attempt stops the run, as serially."""
    chosen_layout = layout(layout_name)
    if chosen_layout.name == "bullmq":
        chosen = bullmq.chosen_mutants(seed, sample, only)
        known: dict[str, str] = {}
    else:
        with claimed(url, chosen_layout.logical(), command="emq selftest", wipe=wipe) as names:
            chosen = chosen_mutants(url, only, names, seed=seed, sample=sample)  # the server and --only checked before the cluster is asked
        known = equivalents()
    # Longest first: a mutant shown equivalent survives its whole budget, the longest
    # task of the bag; handed out last it would be the run's tail (CMP-9).
    longest_first = sorted(chosen, key=lambda m: m.key not in known)
    got: dict[str, MutantVerdict] = {}
    with dask_cluster.connected(spec, servers=[url] if url is not None else [], command="emq selftest") as client:
        for done in dask_cluster.bag(client, longest_first, judge_mutant,
                                     lambda m: (m, url, budget, seed, wipe, chosen_layout.name),
                                     retries=RETRIES, name=lambda m: f"mutant-{chosen.index(m)}"):
            mutant: Mutant = done.item
            k = chosen.index(mutant) + 1
            if done.error is not None:
                raise ServerUnreachable(f"mutant {k} of {len(chosen)} ({mutant.key}): {done.error}")
            verdict = require_verdict(done.result, k, len(chosen))
            got[mutant.key] = bullmq.placed(verdict) if chosen_layout.name == "bullmq" else settled(verdict, known)
            if report is not None:
                report(len(got), len(chosen), got[mutant.key])
    return [got[m.key] for m in chosen]

"""The invariants judged by what a step changed agree with the whole check on the
keyspaces the corpus's broken variants write (specs/lifecycle.md INC-1): each corpus
trace replayed on its variant, every pair of the target's consecutive snapshots of a
queue is judged both ways, up to and including the diverging step."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from emq_kit.check.live import LiveTarget
from emq_kit.check.machine import Conformance
from emq_kit.trace.format import Trace
from emq_kit.trace.replay import replay
from emq_model.snapshot import Snapshot
from tests.broken import broken_dir, variant
from tests.model.test_incremental import agrees

CORPUS = sorted(Path(__file__).parents[1].joinpath("corpus").glob("*.json"))


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.stem)
def test_the_step_check_is_the_whole_check_on_a_broken_variant(path: Path, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, list[Snapshot]] = {}
    theirs = Conformance._theirs

    def kept(self: Conformance, queue: str, step: Any, given: Any = None) -> Snapshot:
        snap = theirs(self, queue, step, given)
        seen.setdefault(queue, []).append(snap)
        return snap

    monkeypatch.setattr(Conformance, "_theirs", kept)
    trace = Trace.load(path)
    target = LiveTarget(None, str(broken_dir(variant(trace.header["variant"]), tmp_path)))
    try:
        assert not replay(trace.steps, target).conforms
    finally:
        target.close()
    assert sum(len(snaps) for snaps in seen.values()) > 1
    for snaps in seen.values():
        for before, after in zip(snaps, snaps[1:]):
            agrees(before, after)

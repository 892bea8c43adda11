"""A doubt's whole read and whole check (specs/lifecycle.md INC-4, DEPTH-4), made in one
pass, say exactly what the reference says at every step: each whole read's rows, read
once per distinct content, are the rows read one by one, and each whole check
(``check_whole``) finds what ``check_invariants`` and ``of_ids`` find — on deep runs with
operator faults on Valkey and fakeredis, and on a deep run whose claim swaps a member,
which only a whole read sees: found at the same step, in the same words."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from emq_kit.check import machine
from emq_kit.check.focus import Focus
from emq_kit.check.profiles import PROFILES
from emq_kit.check.run import run_check
from emq_kit.check.target import open_target
from emq_live.client import Queue, _pairs, _text, _texts
from emq_model import spec
from emq_model.invariants import check_invariants, of_ids
from emq_model.snapshot import Snapshot
from tests.live.test_by_change import swapping  # noqa: F401 - the fixture
from tests.livekit import flush_url


def spied(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Every whole read's rows and every whole check of the machine held against the
    reference (asserted equal); how many of each."""
    seen: Counter[str] = Counter()
    answer, whole = Queue.snapshot_answer, machine.check_whole

    def read(self: Queue, reply: Any) -> Snapshot:
        snap = answer(self, reply)
        rows = {_text(i): dict(zip(_texts(f[0::2]), map(bytes, f[1::2]))) for i, f in _pairs(reply[len(spec.LOCATIONS)])}
        assert snap.rows == tuple(sorted((i, tuple(sorted(r.items()))) for i, r in rows.items()))
        seen["reads"] += 1
        return snap

    def checked(snapshot: Snapshot, previous: Snapshot | None = None) -> Any:
        found, carried = whole(snapshot, previous)
        assert Counter(found) == Counter(check_invariants(snapshot, previous))
        assert carried == of_ids(snapshot, snapshot.ids())
        seen["checks"] += 1
        return found, carried

    monkeypatch.setattr(Queue, "snapshot_answer", read)
    monkeypatch.setattr(machine, "check_whole", checked)
    return seen


@pytest.mark.parametrize("where", ["valkey", "fakeredis"])
def test_a_deep_runs_whole_reads_and_checks_are_the_references(where: str, request: Any,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Operator faults and raw calls (doubts) among the steps of a deep run."""
    seen = spied(monkeypatch)
    url = flush_url(request.getfixturevalue("valkey")) if where == "valkey" else None
    target = open_target(url)
    try:
        report = run_check(target, PROFILES["dev"], seed=3, examples=4, steps=50, focus=Focus(report=False, depth=300))
    finally:
        target.close()
    assert report.ok, report.divergence
    doubts = sum(n for op, n in report.op_mix.items() if op in machine.DOUBTS)
    assert doubts and seen["checks"] >= doubts, (seen, report.op_mix)
    assert where == "fakeredis" or seen["reads"] > 4, seen  # fakeredis's machine reads its memory


def test_a_member_only_a_whole_read_sees_is_found_the_same(valkey: Any, swapping: str,  # noqa: F811
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A claim that swaps a member for one no candidate names (every cardinality kept):
    every read by change misses it, the whole read at the example's end (DEPTH-4) finds
    it with the reference's verdict, and so does the replay of its shrunk steps."""
    seen = spied(monkeypatch)
    target = open_target(flush_url(valkey), swapping)
    try:
        report = run_check(target, PROFILES["dev"], seed=1, examples=3, steps=10, focus=Focus(report=False, depth=60))
    finally:
        target.close()
    assert report.divergence is not None and report.divergence.rule == "INV-8", report.divergence
    assert any("should be in pending" in line or "but should not be" in line for line in report.divergence.lines)
    assert report.differences and report.differences[0].reproduced  # the replay reads whole at its end too
    assert seen["reads"] and seen["checks"]

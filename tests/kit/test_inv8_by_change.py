"""INV-8 judged by the two sides' changes (``agree``, specs/lifecycle.md INC-4) says
exactly what the whole comparison says, step by step: on the model against itself, on
random programs at depth, and on selftest mutants of our scripts on fakeredis, whose
first difference and its detail are the same whichever way INV-8 is judged.

The mutants, chosen to keep the test to about a minute on two workers: every tenth of
those that write wrong (``WRONG_WRITES``: a write deleted, misrouted, a state not written,
most of them found by INV-8 on the snapshots) and every 96th of all the others (found by
their answers, after steps judged by change), each run to its first difference (10
examples, the selftest's seed), once with the target's changes given and once without;
every step's INV-8 taken both ways on the way, the run's shrinking included. A mutant whose
script never returns (lane_claim without its ``ZREM``) is a hang both ways: its embedded
bound is made tests/kit/test_hang.py's ``QUICK_CPU`` here, since the run and its
shrinking wait it out at every replay of the hang (10 s each at the default)."""

from __future__ import annotations

from typing import Any

import pytest

from emq_kit.check.focus import Focus
from emq_kit.check.live import LiveTarget
from emq_kit.check.machine import Conformance
from emq_kit.check.model_target import ModelTarget
from emq_kit.check.profiles import PROFILES, Profile
from emq_kit.check.run import run_check
from emq_kit.selftest.mutation import all_mutants, copy_scripts
from emq_live import embedded
from emq_model.change import Change, between, change_from
from emq_model.snapshot import Snapshot
from tests.kit.test_hang import QUICK_CPU

WRONG_WRITES = ("delete-write", "misroute-zadd", "drop-state-write")
MUTANTS = [m for m in all_mutants() if m.operator in WRONG_WRITES][::10] + \
    [m for m in all_mutants() if m.operator not in WRONG_WRITES][::96]

NEVER_RETURNS = {'delete-write|lane_claim|redis.call("ZREM", lane.key, id)|0'}
"""The chosen mutants whose script never returns: the only ones run at the quick bound,
so a slow call on a loaded machine is never taken for a hang in the others."""


class Changed(LiveTarget):
    """fakeredis handing out, with each snapshot, its reference change (INC-3) from the
    one it handed out before, as a target read by change does (``last_change``)."""

    def __init__(self, scripts: str) -> None:
        super().__init__(None, scripts)
        self.handed: dict[str, Snapshot] = {}
        self.made: dict[str, tuple[Snapshot, Change, Snapshot]] = {}

    def reset(self) -> None:
        super().reset()
        self.handed.clear()
        self.made.clear()

    def snapshot(self, name: str) -> Any:
        snap = super().snapshot(name)
        last = self.handed.pop(name, None)
        self.made.pop(name, None)
        if isinstance(snap, Snapshot):
            self.handed[name] = snap
            if last is not None:
                self.made[name] = (last, between(last, snap), snap)
        return snap

    def last_change(self, name: str) -> tuple[Snapshot, Change, Snapshot] | None:
        return self.made.get(name)


def both_ways(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Every ``_same`` judged whole as well (asserted equal); the verdicts by change."""
    by_change: list[bool] = []
    same = Conformance._same

    def spied(self: Conformance, queue: str, step: Any, mine: Snapshot, theirs: Snapshot) -> bool:
        agreed = self._agreed.get(queue)  # the pair the judgement starts from (it keeps the next)
        got = same(self, queue, step, mine, theirs)
        assert got == (mine == theirs), f"INV-8 by change says {got} at {step.call()}"
        if agreed is not None and change_from(self.models[queue].last_change, agreed[0], mine) is not None:
            by_change.append(got)
        return got

    monkeypatch.setattr(Conformance, "_same", spied)
    return by_change


def test_the_model_against_itself_is_judged_by_change(monkeypatch: pytest.MonkeyPatch) -> None:
    """Most steps by change; the invariants judged whole only at a queue's first step of
    an example (INC-4), never later: an operator's fault, a spoiled key's episode
    included, is judged by its change like a call."""
    by_change = both_ways(monkeypatch)
    whole: list[tuple[str, bool]] = []
    stepped: list[str] = []
    judge = Conformance._judge

    def spied(self: Conformance, queue: str, mine: Snapshot) -> Any:
        kept = self._carried.get(queue)
        if kept is None or kept[0] is not self.previous.get(queue):
            whole.append((self.steps[-1].op, queue in self.previous))
        else:
            stepped.append(self.steps[-1].op)
        return judge(self, queue, mine)

    monkeypatch.setattr(Conformance, "_judge", spied)
    target = ModelTarget()
    report = run_check(target, PROFILES["dev"], examples=10, steps=50, seed=3, focus=Focus(depth=40))
    assert report.ok
    assert len(by_change) > report.steps // 2
    assert whole and not [op for op, later in whole if later], whole
    assert {"forget_row", "spoil_key", "mend_key"} <= set(stepped), set(stepped)


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.key)
def test_a_mutant_is_found_the_same_by_change_or_whole(mutant: Any, tmp_path: Any,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    both_ways(monkeypatch)
    if mutant.key in NEVER_RETURNS:  # a hang's verdict is the same at any bound (CC-9)
        monkeypatch.setattr(embedded, "CPU_SECONDS", QUICK_CPU)
    scripts = copy_scripts(tmp_path, mutant.script, mutant.apply)
    profile = Profile("selftest", examples=10, steps=50, gate=False)
    found = []
    for target in (Changed(str(scripts)), LiveTarget(None, str(scripts))):
        try:
            report = run_check(target, profile, seed=0, focus=Focus(report=False), shrink_steps=100)
        except Exception as exc:  # noqa: BLE001 - a script the kit reads through failed: the same both ways
            found.append(type(exc).__name__)
            continue
        finally:
            target.close()
        d = report.divergence
        found.append((report.detail, None if d is None else (d.kind, d.rule, d.lines, [s.call() for s in report.shrunk]),
                      [u.signature for u in report.unreproduced]))
    assert found[0] == found[1]

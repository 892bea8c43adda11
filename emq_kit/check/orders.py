"""The orders the rules draw from, kept step by step (specs/lifecycle.md INC-1): each
location's members sorted, the holders of a token among them (attempts >= 1) sorted,
and the distinct scores sorted, of one queue's model. Each is patched with the ids the
model's changes since named instead of sorting a whole set each draw, so a draw's cost
does not grow with the jobs already queued; each answers exactly what sorting the
model's sets anew would."""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import Counter
from typing import Iterable, cast

from emq_model import spec
from emq_model.model import QueueModel
from emq_model.snapshot import Snapshot


class Orders:
    """The kept orders of ``model``: valid for the model's last snapshot when nothing was
    written since (``QueueModel.settled``), brought up from the snapshot they were made
    for by the model's change to it, else made anew from the model's sets."""

    def __init__(self, model: QueueModel) -> None:
        self.model = model
        self.at: Snapshot | None = None  # the snapshot the orders below are the model's at
        self.members: dict[str, list[str]] = {}
        self.holders: dict[str, list[str]] = {}
        self.counts: dict[str, Counter[int]] = {}  # score -> members holding it
        self.marks: dict[str, list[int]] = {}

    def prepare(self) -> None:
        """Bring the orders up to date now: a deep run's fill makes them (DEPTH-5), so
        the first draw after it patches them rather than sorting the filled queue."""
        self._now()

    def sorted_members(self, loc: str) -> list[str]:
        """``sorted(model.sets[loc])``."""
        return self._now().members[loc]

    def sorted_holders(self, loc: str) -> list[str]:
        """The members of ``loc`` whose row's attempts is not ``0``, sorted."""
        return self._now().holders[loc]

    def sorted_marks(self, loc: str) -> list[int]:
        """``sorted(set(model.sets[loc].values()))``."""
        return self._now().marks[loc]

    def _now(self) -> Orders:
        """These orders, up to date with the model: kept while the model is still in the
        snapshot they were made for, patched by the ids its changes since named when it
        still has them (``QueueModel.changes_since``), else made anew (writes not in a
        snapshot yet, a snapshot built whole, a first draw, a reader too far behind)."""
        settled = self.model.settled
        if settled is not None and settled is self.at:
            return self
        made = None if settled is None or self.at is None else self.model.changes_since(self.at)
        if made is not None:
            whole = {loc for change in made for loc in change.whole}
            for job in set().union(*(change.touched() for change in made)):
                self._place(job, whole)
            for loc in whole:  # a location replaced at once (FLT-4): its orders made anew
                self._made(loc)
        else:
            for loc in spec.LOCATIONS:
                self._made(loc)
        self.at = settled
        return self

    def _made(self, loc: str) -> None:
        """The orders of ``loc`` made anew from the model's set."""
        held = self.model.sets[loc]
        self.members[loc] = sorted(held)
        rows = self.model.rows  # looked up inline: a deep location's first draw meets every member
        self.holders[loc] = [job for job in self.members[loc]
                             if (row := rows.get(job)) is not None and row["attempts"] != b"0"]
        self.counts[loc] = Counter(held.values())
        self.marks[loc] = sorted(self.counts[loc])

    def _holds(self, job: str) -> bool:
        row = self.model.rows.get(job)
        return row is not None and row["attempts"] != b"0"

    def _place(self, job: str, made: Iterable[str] = ()) -> None:
        """``job`` moved from where the snapshot the orders are at holds it (``at``) to
        where the model holds it now, in every order (those of the locations ``made``
        anew apart)."""
        assert self.at is not None  # patched only from the snapshot they were made for
        for loc in spec.LOCATIONS:
            if loc in made:
                continue
            now = self.model.sets[loc].get(job)
            old = cast("int | None", self.at.index[loc].get(job))  # the model's: ints, as norm_score keeps them
            _put(self.members[loc], job, now is not None, old is not None)
            _put(self.holders[loc], job, now is not None and self._holds(job), _has(self.holders[loc], job))
            if now == old:  # the model's scores are ints: an equal score is the same mark
                continue
            counts, marks = self.counts[loc], self.marks[loc]
            if old is not None:
                counts[old] -= 1
                if not counts[old]:
                    del counts[old]
                    del marks[bisect_left(marks, old)]
            if now is not None:
                if not counts[now]:
                    insort(marks, now)
                counts[now] += 1


def _has(order: list[str], job: str) -> bool:
    at = bisect_left(order, job)
    return at < len(order) and order[at] == job


def _put(order: list[str], job: str, now: bool, was: bool) -> None:
    """``job`` in the sorted ``order`` when ``now``, out of it otherwise (``was``: in it)."""
    if now and not was:
        insort(order, job)
    elif was and not now:
        del order[bisect_left(order, job)]


def pick_of_union(big: list[str], small: Iterable[str], pick: int) -> str:
    """The ``pick``-th, modulo their number, of ``sorted(set(big) | set(small))`` (``big``
    sorted, without duplicates; ``small`` few; not both empty), without building it."""
    extra = sorted({job for job in small if not _has(big, job)})
    n = pick % (len(big) + len(extra))
    before = 0
    for i, job in enumerate(extra):
        at = bisect_left(big, job) + i
        if at == n:
            return job
        if at > n:
            break
        before = i + 1
    return big[n - before]

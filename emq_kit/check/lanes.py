"""The machine's lane rules (lifecycle.md §10): lane ops interleaved with the plain ones,
on a small pool of groups, with pauses, limits, weights and orphans; the coverage cells
of the lane ops; and LANE-F checked on the run's own turns.

``LaneRules`` is a mixin of ``Conformance`` (emq_kit/check/machine.py): its rules draw
only when the target has the lane ops (``capabilities.lanes``). A lane claim is kept like a
claim (``Conformance.kept``), so its token is settled, reaped and goes stale with the
rest; a grouped job's complete, retry, reap, promote, reprocess and remove are the plain
rules' own.

LANE-F, as the machine checks it: a *turn* is one lane_claim or lane_wclaim that served a
lane. The turns of a queue form a *stable run* while each turn starts from exactly the
ring the previous turn left (nothing between them moved a lane on or off the ring, or
reordered it). Within a stable run over a ring of k lanes, every k consecutive turns
serve each of those k lanes once (by weight for lane_wclaim: one turn per lane). A turn
that finds no lane, or starts from another ring, starts a new run, and so does a turn
that dropped orphans (a lane that held only orphans left the ring without being served,
T-lane_claim-4).

A grouped job's row deleted by hand (``vandalize`` picks lane members too) leaves an
orphan in its lane that no id-based op finds (its row held its group): an id reused
afterwards (the machine's pool is small) sits in its lane and in another location at
once, INV-1 and INV-9 broken by the operator on both sides alike (``faults.Damage``,
lifecycle.md FLT-3), until the grouped claim that reaches it drops it without serving it
(lifecycle.md §8, T-lane_claim-2). The lane ``dropped`` cells are the machine's like the
rest.
"""

from __future__ import annotations

from typing import Any

from hypothesis.stateful import precondition, rule

from emq_kit.check.draws import Draw
from emq_kit.check.pools import GROUP_MAX
from emq_model import spec
from emq_model.errors import EmqError

GROUPS = ("g", "g", "g", "a.b-c_9", "Z" * GROUP_MAX, "0")
"""A small pool, so lanes fill, empty and meet each other (most calls on "g", so a lane
grows deep enough for a weighted turn to serve several); the longest name the grammar
allows (LANE-2) is one of them."""
ORPHANED = GROUPS[-1]
"""The lane ``lane_orphan`` leaves an orphan in (rarely used by the other rules, so the
orphan is its head)."""
CONFIGS = ("lane_pause", "lane_resume", "lane_limit", "lane_weight")
CLAIMS = ("lane_claim", "lane_wclaim")
RULE_OPS: dict[str, tuple[str, ...]] = {
    "lane_enqueue": ("lane_enqueue",), "lane_claim": CLAIMS, "lane_config": CONFIGS, "lane_backlog": ("lane_enqueue",),
    "lane_orphan": ("lane_enqueue",), "lane_scene": ("lane_enqueue",),
}
"""The ops each lane rule may send (the machine's ``RULE_OPS``): a driver that offers
only some lane ops gets the rules of those, the cells of the others not implemented."""
PREPARES: dict[str, tuple[tuple[str, str], ...]] = {"lane_backlog": (("lane_wclaim", "several"),)}
"""Cells a lane rule makes reachable beyond its own calls' (a directed round aims it at
them, COV-2): a deep weighted lane is what a weighted turn needs to serve several."""
CELLS = spec.lane_cells()
"""The lane cells a run must reach."""
SCENE = tuple(dict.fromkeys(GROUPS))[:3]
"""The lanes of ``lane_scene``, in the order they join the ring."""
ON = (0, 0, 0, 1)  # which of the machine's QUEUES: most steps on the first, as the plain rules
SPOILS = (None,) * 24 + tuple((i % 3, i // 3) for i in range(8))  # one call in four spoiled


class LaneRules:
    """The lane rules of the conformance machine (a mixin: see the module doc). The
    machine names its queues and id pool (``queues``, ``pool``)."""

    queues: tuple[str, ...]
    pool: tuple[str, ...]

    def _lanes_on(self: Any) -> bool:
        return bool(self.target.capabilities.lanes)

    @precondition(lambda self: self._lanes_on())
    @rule(a=Draw("LaneEnqueue", q=ON, job=range(8), payload=(b"", b"p", "ü"), group=GROUPS, spoil=SPOILS).strategy)
    def lane_enqueue(self: Any, a: Any) -> None:
        pool = self.pool
        self.step(self.queues[a.q], "lane_enqueue",
                  {"id": pool[a.job % len(pool)], "payload": a.payload, "group": a.group}, spoil=a.spoil)

    @precondition(lambda self: self._lanes_on())
    @rule(a=Draw("LaneClaim", q=ON, lease=range(1, 13), weighted=(False, True), spoil=SPOILS).strategy)
    def lane_claim(self: Any, a: Any) -> None:
        self._claim_turn(self.queues[a.q], self._offered(CLAIMS[a.weighted], CLAIMS), a.lease, a.spoil)

    def _claim_turn(self: Any, q: str, op: str, lease: int, spoil: Any = None) -> list[Any]:
        """One grouped claim, its jobs kept like a claim's, its turn judged by LANE-F:
        the jobs it served."""
        before = tuple(self.models[q].lanes.ring)
        got = self.step(q, op, {"lease_ms": lease}, spoil=spoil)
        if isinstance(got, EmqError):
            return []
        jobs = got if isinstance(got, list) else [got] if got is not None else []
        self.kept.extend((q, j.id, j.token) for j in jobs)
        self._turn(q, before, jobs[0].group if jobs else None)
        return jobs

    @precondition(lambda self: self._lanes_on() and self.run.focus.allows("forget_row"))
    @rule(a=Draw("LaneOrphan", q=ON, job=range(8), weighted=(False, True), lease=range(1, 13),
                 turns=(True, False)).strategy)
    def lane_orphan(self: Any, a: Any) -> None:
        """An operator deletes the row of the job waiting alone in lane ORPHANED; the
        turns go round the ring until that lane's, which drops the orphan unserved and
        takes the next turn (T-lane_claim-2, the lane ``dropped`` cells): a state the
        one-call rules reach only by a long lucky run. Half the time the orphan is left
        for the turns of later steps: a grouped claim's walk then passes an orphan-only
        lane (a walk that stops there is wrong only when a key past it is spoiled)."""
        q, pool = self.queues[a.q], self.pool
        job = pool[a.job % len(pool)]
        if self.step(q, "lane_enqueue", {"id": job, "payload": b"orphan", "group": ORPHANED}) != "enqueued":
            return
        self.forget(q, job)
        if not a.turns:
            return
        op = self._offered(CLAIMS[a.weighted], CLAIMS)
        for _ in range(len(self.models[q].lanes.ring)):
            if self.stopped or job not in self.models[q].lanes.pending.get(ORPHANED, {}):
                break
            self._claim_turn(q, op, a.lease)

    @precondition(lambda self: self._lanes_on())
    @rule(a=Draw("LaneConfig", q=ON, op=CONFIGS, group=GROUPS, n=(0, 1, 2, 3), w=(1, 2, 3), spoil=SPOILS).strategy)
    def lane_config(self: Any, a: Any) -> None:
        op = self._offered(a.op, CONFIGS)
        value = {"lane_limit": {"n": a.n}, "lane_weight": {"w": a.w}}.get(op, {})
        self.step(self.queues[a.q], op, {"group": a.group, **value}, spoil=a.spoil)

    @precondition(lambda self: self._lanes_on())
    @rule(a=Draw("LaneBacklog", q=ON, n=(2, 3, 4), w=(2, 3)).strategy)
    def lane_backlog(self: Any, a: Any) -> None:
        """A deep, weighted lane: ``n`` jobs onto lane "g", then its weight ``w``, so a
        weighted turn can serve several heads (``lane_wclaim/several``): a state the
        one-call rules reach only by a long lucky run (an id already queued is refused,
        as any enqueue of it would be)."""
        q, pool = self.queues[a.q], self.pool
        for i in range(a.n):
            job = pool[(len(self.steps) + i) % len(pool)]
            self.step(q, "lane_enqueue", {"id": job, "payload": b"lane", "group": "g"})
        if self.run.focus.allows("lane_weight"):
            self.step(q, "lane_weight", {"group": "g", "w": a.w})

    @precondition(lambda self: self._lanes_on())
    @rule(a=Draw("LaneScene", q=ON, lanes=(2, 3), depth=(1, 2, 2), first=range(8), cap=(1, 0, 2),
                 pause=(False, True), weighted=(False, True), turns=(1, 0, 2), lease=range(1, 13),
                 edge=(None, 0, 1, 1, 2, 3, 4, 5), kind=range(5), orphan=(False, False, True),
                 settle=(None, None, None, "complete", "retry", "extend")).strategy)
    def lane_scene(self: Any, a: Any) -> None:
        """Several lanes at once, the first limited (to ``cap``, while none of its jobs is
        active: its headroom is its whole limit) and the last perhaps paused, then a few
        turns of the ring: limits, pauses and the rotation meet within one rule, where
        the one-call rules meet them only by a long lucky run (a seeded selftest run made
        no grouped claim while any lane had a limit). Most scenes end with one more
        grouped claim, a key at the edges of its walk spoiled (``spoil_walk``): a walk
        over several lanes and members is what lane_claim.lua's plan is for. With
        ``orphan`` the rows of the lane at the ring's head are deleted and no turn is
        taken: the walk must pass that orphan-only lane to type the lane the claim will
        serve (a plan that counts an orphan as a job, or stops after one lane, stops
        short of it). With ``settle`` the scene ends instead with a settle of a
        job its turns served, one of the job's lane keys spoiled: a settle types its lane
        keys before its first write (CC-8), or it moves the job and leaves ``gactive``
        wrong."""
        q, pool, focus = self.queues[a.q], self.pool, self.run.focus
        groups = SCENE[:a.lanes]
        # jobs the queue does not hold, so each lane is as deep as drawn
        free = self._free_ids(q) or list(pool)
        for i in range(a.lanes * a.depth):
            job = free[(a.first + i) % len(free)]
            self.step(q, "lane_enqueue", {"id": job, "payload": b"scene", "group": groups[i % a.lanes]})
        mine = self.models[q]
        orphaned = a.orphan and focus.allows("forget_row") and bool(mine.lanes.ring)
        if orphaned:
            head = mine.lanes.ring[0]
            for job in mine.lanes.members(head):
                if mine.rows.get(job, {}).get("group") == head.encode():  # the lane's jobs (FLT-6)
                    self.forget(q, job)
        if a.cap and focus.allows("lane_limit"):
            self.step(q, "lane_limit", {"group": groups[0], "n": a.cap})
        if a.pause and focus.allows("lane_pause"):
            self.step(q, "lane_pause", {"group": groups[-1]})
        if not any(focus.allows(op) for op in CLAIMS):
            return
        op = self._offered(CLAIMS[a.weighted], CLAIMS)
        served = []
        for _ in range(0 if orphaned else a.turns):
            if self.stopped:
                break
            served += self._claim_turn(q, op, a.lease)
        if not self._key_faults_on():
            return
        if a.settle is not None and served and focus.allows(a.settle):
            self.spoil_lane_of(q, a.settle, served[-1].id, served[-1].group, a.kind)
        elif a.edge is not None:
            self.spoil_walk(q, op, a.edge, a.kind)

    def _turn(self: Any, q: str, before: tuple[str, ...], served: str | None) -> None:
        """LANE-F on the queue's stable run of turns (see the module doc)."""
        after = tuple(self.models[q].lanes.ring)
        run = self.turns.setdefault(q, [])
        dropped = bool(self.models[q].last_dropped)  # an orphan-only lane left the ring: not a serve
        if served is None or dropped or (run and run[-1][1] != before) or (run and set(run[0][0]) != set(before)):
            run.clear()
        if served is None or dropped:
            return
        run.append((before, after, served))
        k = len(before)
        last = [g for _, _, g in run[-k:]]
        if len(run) >= k and sorted(last) != sorted(before):
            # the model's ring and answers: a break is the model's (FLT-2), judged once the
            # target's side of the steps before it is (a window's), as step by step
            self.drain()
            raise self.model_broke(self.steps[-1], [f"LANE-F over a stable ring {list(before)}, "
                                                    f"the last {k} turns served {last}"])

"""The faults the machine injects as an operator would by hand, each a trace step like a
call: a row deleted (``forget_row``, leaving its member an orphan), a key overwritten
with a value of another type (``spoil_key``, CC-8) and its content put back
(``mend_key``), a key written under the queue's prefix outside the grammar
(``stray_key``) and deleted again (``drop_key``). ``on_model`` and ``on_target`` run one
on either side; the machine, ``emq replay`` and the report's step table all go through
them."""

from __future__ import annotations

from collections import Counter
from itertools import islice
from typing import Any, Sequence

from hypothesis.stateful import precondition, rule

from emq_kit.check.draws import Draw
from emq_kit.check.lanes import CLAIMS as LANE_CLAIMS
from emq_kit.check.orders import pick_of_union
from emq_model import branded_id, model, spec
from emq_model.errors import TYPE
from emq_model.invariants import Violation
from emq_model.keyspace import KEY_TYPES, prefix
from emq_model.model import QueueModel
from emq_model.snapshot import Snapshot

ARGS: dict[str, tuple[set[str], set[str]]] = {
    "forget_row": ({"id"}, {"id"}),
    "spoil_key": ({"key", "kind"}, {"key", "kind", "id", "group"}),
    "mend_key": ({"key"}, {"key", "id", "group"}),
    "stray_key": ({"key", "kind"}, {"key", "kind"}),
    "drop_key": ({"key"}, {"key"}),
}
"""Each fault's (required, allowed) arguments: for a spoil ``key`` names a key of
transitions.json's ``keys`` (the row of ``id``, the lane of ``group``), ``kind`` the type
written over it; for a stray key ``key`` is the suffix after ``emq:{q}:``, ``kind`` the
type it is written as."""

KINDS = ("string", "list", "set", "hash", "zset", "stream")
"""The types ``spoil_key`` writes, as ``TYPE`` names them."""

KEY_FAULTS = ("spoil_key", "mend_key")
"""The faults about a key's type: a target offers both or neither."""
STRAY_FAULTS = ("stray_key", "drop_key")
"""The faults about a key outside the grammar: a target offers both or neither."""

TEMPTING: dict[str, str] = {
    "job:": "hash", "g::pending": "zset", "g:pending": "zset", "g:a b:pending": "zset",
    "g:" + "g" * (spec.LIMITS["group_max_bytes"] + 1) + ":pending": "zset", "job": "hash", "pending:": "zset",
    "x": "string"}
"""The keys (suffixes after ``emq:{q}:``) the ``stray_keys`` rule writes, each with the
type a classifier one step off would take it for: the grammar's edges, each one step
outside it — the row head with no id (a row's hash), a lane of an empty group, of a head
and tail that overlap, of a byte outside the group alphabet, of a group one byte too
long (a lane's zset); the row head without its colon, a location's name with one; any
other name. A snapshot reports each as stray whatever its type (lifecycle.md §7)."""
STRAY_KEYS = tuple(TEMPTING)
STRAY_KINDS = (None, None, None, *KINDS)
"""A stray key's type as the rule draws it: its tempting one (``None``) three times in
nine, else any (a key of another type is stray to a snapshot one step off too)."""


class Damage:
    """What the operator's faults broke in one queue, on the model and the target alike
    (lifecycle.md FLT-3..5): the invariant violations that are the operator's, never a
    difference and never the model's defect. ``forgotten``: the ids whose row was
    deleted by hand (``forget_row``), while a place still holds them; ``uncounted``:
    per group, how many deleted rows were those of its active jobs (``gactive`` stays
    counting them, LANE-9)."""

    def __init__(self) -> None:
        self.forgotten: set[str] = set()
        self.uncounted: Counter[str] = Counter()

    def note(self, model: QueueModel, op: str, args: dict[str, Any]) -> None:
        """The fault ``op`` is about to run on ``model``: what it will break (read
        through a key the operator spoiled, which ``mend_key`` may bring back)."""
        if op != "forget_row" or not branded_id.is_valid(args.get("id"), "JOB"):
            return
        job = args["id"]
        self.forgotten.add(job)
        row = model.unspoiled(("row", job))
        if row is not None and "group" in row and job in model.unspoiled("active"):
            self.uncounted[row["group"].decode("latin-1")] += 1

    def settle(self, snapshot: Snapshot) -> None:
        """The queue is ``snapshot`` now (no key spoiled): an id no place holds any more
        is no longer damaged (the claim that met its orphan dropped it). Costs what is
        forgotten, not the queue (looked up by member)."""
        if self.forgotten:
            held = snapshot.index.values()  # the four locations and every lane
            self.forgotten = {m for m in self.forgotten if any(m in places for places in held)}

    def excuses(self, v: Violation, snapshot: Snapshot, model: QueueModel) -> bool:
        """Whether the operator broke what ``v`` reports in ``snapshot`` (``model``'s):
        anything while a key is spoiled (FLT-4), a stray key's INV-6 (FLT-5), a hand-
        deleted row's id in INV-1, INV-2 and INV-9 and its group's ``gactive`` in INV-11
        (FLT-3)."""
        if model.spoiled:
            return True
        if v.invariant == "INV-6" and v.id in {prefix(model.queue) + key for key in model.strays}:
            return True
        if v.invariant in ("INV-1", "INV-2", "INV-9") and v.id in self.forgotten:
            return True
        if v.invariant == "INV-11" and v.id is not None and self.uncounted.get(v.id):
            rows = snapshot.row_map()
            active = sum(rows.get(m, {}).get("group") == v.id.encode("latin-1") for m, _ in snapshot.active)
            return dict(snapshot.gactive).get(v.id, 0) - active == self.uncounted[v.id]
        return False


def wrong_kinds(key: str) -> tuple[str, ...]:
    """The types a spoil of ``key`` may write: every type but the grammar's."""
    return tuple(k for k in KINDS if k != KEY_TYPES[key])


def on_model(model: QueueModel, op: str, args: dict[str, Any]) -> None:
    """Run the fault ``op`` on ``model``."""
    if op == "forget_row":
        model.forget_row(args["id"])
    elif op == "spoil_key":
        model.spoil(args["key"], args.get("id"), args.get("group"))
    elif op == "mend_key":
        model.mend(args["key"], args.get("id"), args.get("group"))
    elif op == "stray_key":
        model.write_stray(args["key"])
    else:
        model.drop_stray(args["key"])


def on_target(target: Any, queue: str, op: str, args: dict[str, Any]) -> None:
    """Run the fault ``op`` on ``target``'s ``queue``."""
    if op == "forget_row":
        target.forget_row(queue, args["id"])
    elif op == "spoil_key":
        target.spoil_key(queue, args["key"], args["kind"], args.get("id"), args.get("group"))
    elif op == "mend_key":
        target.mend_key(queue, args["key"], args.get("id"), args.get("group"))
    elif op == "stray_key":
        target.stray_key(queue, args["key"], args["kind"])
    else:
        target.drop_key(queue, args["key"])


# -- the rule that spoils a key ------------------------------------------------------------

SPOIL_KEYS = ("row", "pending", "active", "schedule", "dead", "completed", "failed",
              "lane", "ring", "paused", "glimit", "gactive", "gweight")
"""The keys the ``spoil_key`` rule overwrites, the simplest first."""
LANE_KEYS = ("lane", "ring", "paused", "glimit", "gactive", "gweight")
LANE_TYPED = ("lane", *model.LANE_TYPED)  # what "lanes" stands for (lifecycle.md CC-8)


def _probes(key: str) -> tuple[str, ...]:
    """The ops that may touch ``key`` (transitions.json's ``touches``, with "rows" and a
    grouped claim's walk for a row, "lanes" for a lane key), in table order."""
    out = []
    for op in (*spec.OPS, *spec.LANE_OPS):
        touches = spec.entry(op)["touches"]
        if (key in touches or (key == "row" and ("rows" in touches or op in LANE_CLAIMS))
                or (key in LANE_TYPED and "lanes" in touches)):
            out.append(op)
    return tuple(out)


PROBES: dict[str, tuple[str, ...]] = {key: _probes(key) for key in SPOIL_KEYS}
"""For each key, the calls a spoil of it is tried with."""
PROBED = tuple(op for op in (*spec.OPS, *spec.LANE_OPS) if any(op in ops for ops in PROBES.values()))
"""Every op a spoil is tried with, in table order."""
KEYS_OF: dict[str, tuple[str, ...]] = {
    op: tuple(sorted((k for k in SPOIL_KEYS if op in PROBES[k]), key=lambda k: k not in spec.entry(op)["touches"]))
    for op in PROBED}
"""For each op, the keys it may touch: first those it always touches (its ``touches``
by name), then those only some calls do (the rows and lanes of the jobs it takes)."""
PUMPED = {"promote": "schedule", "reap": "active"}


def walk_edges(mine: QueueModel, weighted: bool) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """The lanes and rows a grouped claim's plan types before its first write
    (``QueueModel.claim_plan``: the ring from its head, each lane and the rows of the
    members a turn would meet, until a lane that serves a job), and those just past its
    end: the next member of the last lane walked, the next lane on the ring and that
    lane's head. A walk one step too short or too long (a mutant of lane_claim.lua's
    ``plan``) answers differently only when one of these is spoiled: a walked one for a
    walk too short, a past one for a walk too long."""
    walked = [key for key in mine.claim_plan(weighted=weighted) if isinstance(key, tuple)]
    lanes = [group for kind, group in walked if kind == "lane"]
    if not lanes:
        return walked, []
    last, typed = lanes[-1], {job for kind, job in walked if kind == "row"}
    past = [("row", job) for job in mine.lanes.members(last) if job not in typed][:1]
    ring = list(mine.lanes.ring)
    after = ring[ring.index(last) + 1:][:1] if last in ring else []
    for group in after:
        past += [("lane", group), *(("row", job) for job in mine.lanes.members(group)[:1])]
    return walked, past


def probe_args(op: str, queue: QueueModel, job: str, group: str) -> dict[str, Any]:
    """Valid arguments of ``op`` about ``job`` and ``group`` (a settle carries the job's
    current token, so only the spoiled key can refuse it)."""
    row = queue.rows.get(job)
    token = int(row["attempts"]) if row is not None and int(row["attempts"]) > 0 else 1
    args: dict[str, dict[str, Any]] = {
        "enqueue": {"id": job, "payload": b"p"}, "schedule": {"id": job, "payload": b"p", "delay_ms": 5},
        "claim": {"lease_ms": 5}, "complete": {"id": job, "token": token},
        "retry": {"id": job, "token": token, "delay_ms": 5, "max_attempts": 3, "error": "e"},
        "extend": {"id": job, "token": token, "lease_ms": 5}, "promote": {"limit": 100},
        "reap": {"limit": 100, "max_attempts": None}, "reprocess": {"id": job}, "remove": {"id": job},
        "browse": {"n": 3}, "counts": {}, "state": {"id": job}, "job": {"id": job},
        "lane_enqueue": {"id": job, "payload": b"p", "group": group}, "lane_claim": {"lease_ms": 5},
        "lane_wclaim": {"lease_ms": 5}, "lane_pause": {"group": group}, "lane_resume": {"group": group},
        "lane_limit": {"group": group, "n": 2}, "lane_weight": {"group": group, "w": 2},
    }
    return args[op]


class KeyFaultRules:
    """CC-8 held on every target that can have a key spoiled (a mixin of ``Conformance``):
    an operator overwrites one key of a queue with another type, one call that may touch
    it runs (refused with ``EMQTYPE`` and changing nothing when it does touch it, as the
    model predicts), and the key's content is put back. While a key is spoiled the
    machine judges by the snapshots alone: the operator broke the invariants, on both
    sides alike (``Damage``, lifecycle.md FLT-4)."""

    queues: tuple[str, ...]
    pool: tuple[str, ...]

    def _key_faults_on(self: Any) -> bool:
        return bool(self.target.capabilities.key_faults) and self.run.focus.allows("spoil_key")

    @precondition(lambda self: self._key_faults_on())
    @rule(a=Draw("SpoilKey", q=(0, 0, 0, 1), op=PROBED, always=(True, False), key=range(len(SPOIL_KEYS)),
                 kind=range(5), pick=range(8)).strategy)
    def spoil_key(self: Any, a: Any) -> None:
        """The call first, then a key it may touch and the job it would take: the row of
        a pending member for a claim, of a due member for a pump (the clock moved onto
        its score), of a lane's head for a grouped claim, a grouped job when the key is a
        lane key (``spoil_walk`` takes the edges of a grouped claim's walk). Half the
        spoils take a key the call always touches (its ``touches`` by name, and the row
        of the member a claim or a pump takes, which is made to exist first: the refusal
        is certain), half any key it may touch. Every choice is the rule's own draw (never the example's state beyond
        the model's), so the shrinker can delete the steps before an episode without
        changing what it does."""
        if self.stopped:  # a known difference ended the example (its key may be left spoiled)
            return
        q = self.queues[a.q]
        mine = self.models[q]
        lanes = self._lanes_on()
        op = self._probe(a.op)
        if op is None:
            return
        touches = spec.entry(op)["touches"]
        always = a.always or (op, TYPE) in self.run.aim  # an aimed refusal must be certain (COV-2)
        keys = [k for k in KEYS_OF[op] if (lanes or k not in LANE_KEYS)
                and (not always or k in touches or (k == "row" and "rows" in touches))] or list(KEYS_OF[op])
        key = keys[a.key % len(keys)]
        if op in PUMPED:
            self._advance(q, PUMPED[op], (0, 0))
        elif op == "claim" and key == "row" and not mine.sets["pending"]:
            self._fill(q)  # a claim types the row of the member it takes: let there be one
        job, group = self._taken(q, op, key, a.pick), self._group_of(mine, a.pick)
        which = {"key": key, **({"id": job} if key == "row" else {}), **({"group": group} if key == "lane" else {})}
        self._episode(q, which, a.kind, op, probe_args(op, mine, job, group))

    def _episode(self: Any, q: str, which: dict[str, str], kind: int, op: str, args: dict[str, Any]) -> None:
        """Spoil the key ``which`` names (with the ``kind``-th type it may take), call
        ``op``, put the key back."""
        kinds = wrong_kinds(which["key"])
        self.inject(q, "spoil_key", {**which, "kind": kinds[kind % len(kinds)]})
        self.step(q, op, args)
        self.inject(q, "mend_key", which)

    def spoil_walk(self: Any, q: str, op: str, edge: int, kind: int) -> None:
        """The grouped claim ``op`` with one lane or row at the edges of its walk spoiled
        (``walk_edges``: an even ``edge`` takes a walked key, from the walk's end back,
        an odd one a key past the walk's end, each side as often): lane_claim.lua's plan must type exactly what
        its turn will touch. A walk one step too short answers a script error (or writes
        before it refuses), one step too long refuses a claim that should serve."""
        walked, past = walk_edges(self.models[q], op == "lane_wclaim")
        # walked keys from the walk's end back (the serving lane and its head first: a
        # walk that stops short misses those), past ones from the end on
        edges = (past if edge % 2 and past else walked[::-1]) or past
        if self.stopped or not edges:
            return
        key, value = edges[(edge // 2) % len(edges)]
        self._episode(q, {"key": key, ("id" if key == "row" else "group"): value}, kind, op, {"lease_ms": 5})

    def _strays_on(self: Any) -> bool:
        return bool(self.target.capabilities.key_faults) and self.run.focus.allows("stray_key")

    @precondition(lambda self: self._strays_on())
    @rule(a=Draw("StrayKeys", q=(0, 0, 0, 1), first=range(len(STRAY_KEYS)), second=range(len(STRAY_KEYS) + 1),
                 kinds=range(len(STRAY_KINDS) ** 2), op=PROBED, pick=range(8)).strategy)
    def stray_keys(self: Any, a: Any) -> None:
        """An operator writes one or two keys just outside the grammar under the queue's
        prefix (``STRAY_KEYS``), one call runs, and the keys are deleted: every snapshot
        between reports exactly those keys as stray (snapshot.lua's SCAN and its
        classification of each key, held at the grammar's edges), and the call answers
        and writes as if they were not there (no script reads a key the grammar does not
        name)."""
        if self.stopped:
            return
        q = self.queues[a.q]
        mine = self.models[q]
        op = self._probe(a.op)
        if op is None:
            return
        keys = list(dict.fromkeys([STRAY_KEYS[a.first], *STRAY_KEYS[a.second:a.second + 1]]))  # two at once, or one
        for n, key in enumerate(keys):
            kind = STRAY_KINDS[(a.kinds // len(STRAY_KINDS) ** n) % len(STRAY_KINDS)]
            self.inject(q, "stray_key", {"key": key, "kind": kind or TEMPTING[key]})
        self.step(q, op, probe_args(op, mine, self._taken(q, op, "row", a.pick), self._group_of(mine, a.pick)))
        for key in keys:
            self.inject(q, "drop_key", {"key": key})

    def _probe(self: Any, drawn: str) -> str | None:
        """The op of ``PROBED`` a draw selects under the run's focus (the next one the
        focus allows, lane ops only on a target with lanes; in a round aimed at
        unreached ``EMQTYPE`` cells, only their ops), or None when none is."""
        lanes = self._lanes_on()
        ops = [op for op in PROBED if self.run.focus.allows(op) and (lanes or op not in spec.LANE_OPS)]
        aimed = [op for op in ops if (op, TYPE) in self.run.aim]  # COV-2: a directed round's spoils
        ops = aimed or ops
        if not ops:
            return None
        return drawn if drawn in ops else ops[PROBED.index(drawn) % len(ops)]

    def _free_ids(self: Any, q: str) -> list[str]:
        """The jobs of the pool that ``q`` does not hold, in pool order."""
        held = self.models[q].ids()
        return [j for j in self.pool if j not in held]

    def _free(self: Any, q: str) -> str | None:
        """A job of the pool that ``q`` does not hold, if one is left."""
        return next(iter(self._free_ids(q)), None)

    def _fill(self: Any, q: str) -> None:
        """Enqueue a job of the pool that exists nowhere (if one is left)."""
        job = self._free(q)
        if job is not None:
            self.step(q, "enqueue", {"id": job, "payload": b"p"})

    def spoil_lane_of(self: Any, q: str, op: str, job: str, group: str, kind: int) -> None:
        """The settle ``op`` of the grouped ``job`` with one of its lane keys spoiled (the
        ``kind``-th of ``LANE_TYPED``): refused with ``EMQTYPE``, nothing moved, as the
        model predicts."""
        key = LANE_TYPED[kind % len(LANE_TYPED)]
        which = {"key": key, **({"group": group} if key == "lane" else {})}
        self._episode(q, which, kind, op, probe_args(op, self.models[q], job, group))

    def _pick_of(self: Any, q: str, locs: Sequence[str], more: set[str], pick: int) -> str | None:
        """The ``pick``-th, modulo their number, of the members of ``q``'s ``locs`` (at
        least one) and the ids ``more``, sorted (None when there is none), without sorting
        them: the largest location's kept order and the others merged into it
        (``pick_of_union``)."""
        mine = self.models[q]
        big = max(locs, key=lambda loc: len(mine.sets[loc]))
        order = self._orders(q).sorted_members(big)
        small = more.union(*(mine.sets[loc] for loc in locs if loc != big)).difference(mine.sets[big])
        return pick_of_union(order, small, pick) if order or small else None

    def _taken(self: Any, q: str, op: str, key: str, pick: int) -> str:
        """The job ``op`` would take or is about (``pick``: which one, 0 the first): for
        an op about one id, one it would act on (a live attempt for a settle, a dead job
        for reprocess), grouped when the spoiled key is a lane key (only a grouped job's
        call types its lane). Picked without listing a deep location."""
        mine = self.models[q]
        ids: Sequence[str]
        if op == "claim" or op in PUMPED:
            entries = mine.ordered("pending" if op == "claim" else PUMPED[op])
            ids = [job for job, _ in islice(entries, pick + 1)]  # all ``ids[pick % len(ids)]`` reads
        elif op in LANE_CLAIMS:
            ids = [mine.lanes.head(g) for g in mine.lanes.ring if mine.lanes.pending.get(g)]
        else:
            acted = {"complete": ("active", "pending"), "retry": ("active", "pending"), "extend": ("active",),
                     "reprocess": ("dead",)}.get(op, ())
            lanes = {m for lane in mine.lanes.pending.values() for m in lane}
            laned = lanes if "pending" in acted else set()
            grouped = sorted(i for i, row in mine.rows.items() if "group" in row) if key in LANE_KEYS else []
            # a lane key is typed only by a call about a grouped job: one it would act on
            # first (a grouped job waiting in its lane counts as pending), else any
            ids = [i for i in grouped if i in laned or any(i in mine.sets[loc] for loc in acted)] or grouped
            if not ids:  # one it would act on, else any id it holds (a row, a member, a lane's)
                return ((acted and self._pick_of(q, acted, laned, pick))
                        or self._pick_of(q, spec.LOCATIONS, {*mine.rows, *lanes}, pick)
                        or self.pool[pick % len(self.pool)])
        ids = ids or list(self.pool)
        if op == "claim" or op in PUMPED or op in LANE_CLAIMS:
            # the call types the rows of the members it takes, the first of them always:
            # that one six times in eight, a later one (the call must not type it) else
            return ids[pick % len(ids)] if pick >= 6 else ids[0]
        return ids[pick % len(ids)]

    @staticmethod
    def _group_of(mine: QueueModel, pick: int) -> str:
        groups = [*mine.lanes.ring, *sorted(set(mine.lanes.pending) - set(mine.lanes.ring))] or ["g"]
        return groups[pick % len(groups)]

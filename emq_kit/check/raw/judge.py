"""Judging raw calls on a server: ``RawJudge(conn).send(call)`` sends one call with
``EVALSHA`` through the connection's ``ScriptSet`` (the scripts under test) and judges
it: a refused call must answer the verdict's code and leave every key byte for byte as
it was (DUMP and PTTL; on the embedded fakeredis, its memory); an accepted one must
answer what the model answers and leave the model's snapshot, and no other key changed.
A clock call without ``now`` runs the model at a clock inside the server's ``TIME``
window (``clock.ServerClock``, as ``--clock server``). ``prepare(judge, op)`` puts a job
where the op would change it; ``sweep(judge)`` runs every call once, deterministically.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import redis

from emq_kit.check import memory
from emq_kit.check.clock import ServerClock, _same
from emq_kit.check.hang import hang_of
from emq_kit.check.live import named
from emq_kit.check.raw.contract import OPS, QUEUE, Decoded, RawCall, raw, shape, verdict
from emq_kit.check.raw.variants import FULL, KINDS, NEEDS, _held, base, calls
from emq_kit.errors import ScriptHang
from emq_live.client import Connection, Queue
from emq_live.scripts import ScriptSet
from emq_model import errors, keyspace, spec
from emq_model.model import QueueModel
from emq_model.snapshot import Snapshot, diff

# -- judging ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Finding:
    """A raw call the scripts did not answer as the contract says."""

    call: RawCall
    what: str  # answer, keyspace or snapshot
    lines: tuple[str, ...]
    hang: ScriptHang | None = None  # the call did not return (CC-9)

    def __str__(self) -> str:
        lines = (line if len(line) <= 300 else line[:300] + "..." for line in self.lines)
        return f"{self.what} diverges: {self.call}\n  " + "\n  ".join(lines)


Fingerprint = dict[bytes, Any]


def _outcome(fn: Callable[[], Any]) -> Any:
    """A call's answer, its refusal, or whatever else it raised (never equal to an answer)."""
    try:
        return fn()
    except errors.EmqError as refused:
        return refused
    except Exception as exc:  # noqa: BLE001 - a broken script's error reply is a finding
        return exc


class RawJudge:
    """Sends raw calls over ``conn`` (a live target's connection: its client, and its
    ``ScriptSet``, the scripts under test) and judges them against the contract and the
    model of each queue (``models``: the caller's, such as a machine's, or its own).
    ``match`` limits the fingerprint (every key of the database by default: the sweep's
    database is its own). With ``names`` (a run on a server: ``emq_kit.check.names``)
    every call's keys go under the run's names, and the fingerprint is every key the
    run owns (specs/ownership.md OWN-2): calls and judgement speak logical names. The
    target's snapshot is read with our snapshot.lua, the observer, never with the
    scripts under test. Not for a cluster client (one SCAN).

    With a ``reader`` (the machine's target on a server, DEPTH-6) a call is judged by
    what the server names written during it, never by every key's DUMP: a refused call
    may write no key, an accepted one none outside its queue; in a run that reads by
    change its queue's snapshot is read so, with the ids the decoded call and its answer
    name as candidates. Where the reader cannot say (no tracking), whole as above."""

    def __init__(self, conn: Connection, *, match: str | None = None,
                 models: dict[str, QueueModel] | None = None, names: Any = None, reader: Any = None,
                 by_change: bool = False, same: Callable[[str, Snapshot, Snapshot], bool] | None = None) -> None:
        self.client, self.scripts, self.match, self.names = conn.redis, conn.scripts, match, names
        # DEPTH-6: the target whose ``mark`` and ``written`` name the keys a call wrote; in a
        # run that reads by change (``by_change``) its ``snapshot`` is read so too, and the
        # two snapshots are held equal by ``same`` (the machine's INV-8 by change, INC-4)
        self.reader, self.by_change = reader, by_change
        self.same = same if same is not None and by_change else _equal
        self.observer = Connection(conn.redis, ScriptSet.own())
        self.server = conn.server  # the embedded fakeredis: fingerprints read from its memory
        self.models: dict[str, QueueModel] = models if models is not None else {}
        self.clock = ServerClock.over(conn.redis)  # the server's TIME in ms (CLK-1)

    def model(self, queue: str) -> QueueModel:
        """The model of ``queue`` (a new, empty one the first time)."""
        if queue not in self.models:
            self.models[queue] = QueueModel(queue)
        return self.models[queue]

    def fingerprint(self) -> Fingerprint:
        """Every key (under ``match``) with its DUMP and PTTL, in one pipeline; on the
        embedded fakeredis, every key's content and expiry read from its memory."""
        if self.server is not None and self.match is None and self.names is None:
            return memory.fingerprint(self.server)
        keys = self._keys()
        pipe = self.client.pipeline(transaction=False)
        for key in keys:
            pipe.dump(key)
            pipe.pttl(key)
        flat = pipe.execute()
        return {key: (flat[2 * i], flat[2 * i + 1]) for i, key in enumerate(keys)}

    def reset(self) -> None:
        """Delete every key the fingerprint sees and forget every model: a fresh start
        (each Hypothesis example starts here, so a failure replays)."""
        keys = self._keys()
        for i in range(0, len(keys), 1000):
            self.client.delete(*keys[i : i + 1000])
        self.models.clear()

    def _scope(self) -> list[str] | None:
        """The key prefixes the fingerprint sees: the run's names, or ``match`` when it is
        one prefix (None when it is not)."""
        if self.names is not None:  # the empty name too, which no check lets through (OWN-2)
            return ["emq:{" + name + "}:" for name in self.names.queues.values()]
        if self.match is not None and self.match.endswith("*") and not any(c in self.match[:-1] for c in "*?[\\"):
            return [self.match[:-1]]
        return None

    def _mark(self) -> bool:
        """Whether this call is judged by change (DEPTH-6): the reader notes from now on
        every key of the fingerprint's scope the server names written."""
        heads = self._scope() if self.reader is not None else None
        return heads is not None and bool(self.reader.mark(heads))

    def _written(self) -> set[bytes] | None:
        """The keys of the fingerprint's scope named written since ``_mark``; None: a flush."""
        got = self.reader.written()
        if got is None:
            return None
        if self.names is not None:
            return {k for k in got if self.names.owns(k)}
        head = str(self.match)[:-1].encode()  # the one prefix ``_scope`` found
        return {k for k in got if k.startswith(head)}

    def _keys(self) -> list[bytes]:
        """The keys the fingerprint sees: the run's own, or those ``match`` names."""
        if self.names is not None:
            return list(self.names.scan(self.client))
        return list(self.client.scan_iter(match=self.match, count=1000))

    def _server(self, queue: str) -> str:
        return queue if self.names is None else str(self.names.server(queue))

    def _told(self, queue: str, snap: Any) -> Any:
        return snap if self.names is None else self.names.told(queue, snap)

    def _run(self, call: RawCall) -> Any:
        """The call's reply; past the target's bound a ``ScriptHang`` once its script was
        stopped (CC-9), as any call of the target's."""
        keys = list(call.keys) if self.names is None else [self.names.key(k) for k in call.keys]
        bounded = getattr(self.reader, "bounded", None)
        with bounded(f"the raw call of {call.op}") if bounded is not None else contextlib.nullcontext():
            try:
                return self.scripts.run(self.client, call.op, keys, list(call.argv))
            except redis.exceptions.ResponseError as exc:
                hung = hang_of(exc)  # the embedded fakeredis's own bound
                if hung is not None:
                    raise hung from None
                raise

    def send(self, call: RawCall) -> Finding | None:
        """Send ``call`` and judge it; the finding, or ``None`` when it did what the
        contract says."""
        marked = self._mark()  # DEPTH-6: judged by the keys named written from here on
        before = None if marked else self.fingerprint()
        try:
            finding = self._judge(call, before)
        except BaseException:
            if marked:  # no word to the server: it may still be running the call (CC-9)
                self.reader.abandon()
            raise
        if marked and finding is not None and finding.hang is not None:
            self.reader.abandon()  # a script SCRIPT KILL cannot stop leaves the server busy
        elif marked:
            self.reader.written()  # ends a mark no verdict read (an answer found wrong)
        return finding

    def _judge(self, call: RawCall, before: Fingerprint | None) -> Finding | None:
        decoded = verdict(call.op, call.keys, call.argv)
        if isinstance(decoded, errors.EmqError):
            got = _outcome(lambda: self._run(call))
            if not (isinstance(got, errors.EmqError) and got.code == decoded.code):
                return Finding(call, "answer", (f"the contract refuses with {decoded.code} ({decoded.detail})",
                                                f"the script answered {got!r}"), _hang(got))
            return self._unchanged(call, before)
        return self._accepted(call, decoded, before)

    def _accepted(self, call: RawCall, decoded: Decoded, before: Fingerprint | None) -> Finding | None:
        model = self.model(decoded.queue)
        queue = Queue(self.observer, self._server(decoded.queue))
        parse = _parser(queue, call.op)
        answered: list[Any] = []

        def observed() -> Any:
            if self.by_change and before is None:  # the candidates: what the decoded call and its answer name
                self.reader.candidates(decoded.queue, (*named(decoded.args), *named(answered[-1]), *queue.last_dropped))
                return self.reader.snapshot(decoded.queue)
            return self._told(decoded.queue, queue.snapshot())

        def run_model(m: QueueModel, args: dict[str, Any]) -> Any:
            return _outcome(lambda: getattr(m, call.op)(**args))

        def run_target(_args: dict[str, Any], meanwhile: Any = None) -> Any:
            answered.append(_outcome(lambda: parse(self._run(call))))
            return answered[-1]

        if shape(call.op).clock and "now" not in decoded.args:
            mine, theirs = self.clock.call(call.op, model, decoded.args, run_model, run_target, observed)
            lo, hi, now = self.clock.window or (0, 0, 0)
            where = f" (server clock: TIME window [{lo}, {hi}], the model at {now})"
        else:
            mine, theirs, where = run_model(model, decoded.args), run_target(decoded.args), ""
        if not _same(mine, theirs):
            return Finding(call, "answer", (f"the model answered {mine!r}{where}", f"the script answered {theirs!r}"),
                           _hang(theirs))
        if call.op in ("claim", "claim_many") and model.last_dropped != queue.last_dropped:
            return Finding(call, "answer", (f"the model dropped {model.last_dropped}",
                                            f"the script dropped {queue.last_dropped}"))
        expected, seen = model.snapshot(), _outcome(observed)
        if isinstance(seen, Exception) or not self.same(decoded.queue, expected, seen):
            lines = diff(expected, seen) if not isinstance(seen, Exception) else [f"the snapshot failed: {seen!r}"]
            return Finding(call, "snapshot", (*lines, where) if where else tuple(lines))
        return self._unchanged(call, before, keyspace.prefix(self._server(decoded.queue)).encode())

    def _unchanged(self, call: RawCall, before: Fingerprint | None, mine: bytes | None = None) -> Finding | None:
        """Whether every key but those under ``mine`` (an accepted call's queue) is as it
        was ``before`` the call; by change, whether the server named none of them written."""
        if before is None:
            written = self._written()
            if written is None:
                return Finding(call, "keyspace", ("the server named a flush during the call",))
            changed = sorted(k for k in written if mine is None or not k.startswith(mine))
            return Finding(call, "keyspace", tuple(f"{k!r} written" for k in changed[:10])) if changed else None
        after = self.fingerprint()
        changed = sorted(k for k in before.keys() | after.keys()
                         if before.get(k) != after.get(k) and (mine is None or not k.startswith(mine)))
        return Finding(call, "keyspace", tuple(f"{k!r} changed" for k in changed[:10])) if changed else None


def _equal(_queue: str, expected: Snapshot, seen: Snapshot) -> bool:
    return expected == seen


def _hang(outcome: Any) -> ScriptHang | None:
    return outcome if isinstance(outcome, ScriptHang) else None


def _parser(queue: Queue, op: str) -> Callable[[Any], Any]:
    """How the client reads ``op``'s reply into the model's answer."""
    parsers: dict[str, Callable[[Any], Any]] = {
        "claim": queue._claim_answer,
        "claim_many": queue._claim_many_answer,
        "enqueue_many": queue._items_answer,
        "complete_many": queue._items_answer,
        "promote": int,
        "reap": int,
        "counts": lambda reply: {loc: int(n) for loc, n in zip(spec.LOCATIONS, reply)},
    }
    return parsers.get(op, queue._text_answer)


# -- the sweep -------------------------------------------------------------------------


def prepare(judge: RawJudge, op: str, queue: str = QUEUE,
            send: Callable[[RawCall], Finding | None] | None = None) -> list[Finding]:
    """Well-formed calls that put a job in the location ``op`` ``NEEDS`` (judged too, by
    ``send``: the judge's own by default): an enqueue, then a claim for active, then a
    retry with ``max_attempts`` 1 for dead."""
    need, model = NEEDS.get(op), judge.model(queue)
    if need is None or _held(model, need) is not None:
        return []
    steps = ["enqueue", "claim", "retry"][: {"pending": 1, "active": 2, "dead": 3}[need]]
    found = []
    for step in steps:
        b = base(step, model)
        if step == "retry":
            b = b.with_value("max_attempts", 1)
        keys, argv = b.assemble()
        finding = (send or judge.send)(raw(step, keys, argv, "prepare"))
        if finding:
            found.append(finding)
    return found


def sweep(judge: RawJudge, *, full: bool = True, kinds: Sequence[str] | None = None,
          send: Callable[[RawCall], Finding | None] | None = None) -> Iterator[tuple[RawCall, Finding | None]]:
    """Every raw call of every kind for every op, once, in a fixed order, on the queue
    ``QUEUE``: each call with its finding (``None``: as the contract says), judged by
    ``send`` (the judge's own by default). Without ``full`` the ``limit_max``-item
    batches are left out."""
    send = send or judge.send
    for kind in kinds or KINDS:
        if kind in FULL and not full:
            continue
        for op in OPS:
            for finding in prepare(judge, op, send=send):
                yield finding.call, finding
            for call in calls(kind, op, judge.model(QUEUE)):
                yield call, send(call)

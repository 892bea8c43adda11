"""The conformance machine's raw calls: a rule family that calls the target's
scripts past the client, as a port may, and the once-per-run sweep of the kinds the draws
leave out (``SWEPT``). Mixed into ``Conformance`` for every target that declares
``raw`` (our calling convention's scripts on fakeredis, a server, ``--scripts DIR``);
``Run.raw_calls`` switches the family off (a hostile-off run).

Each raw call is one trace step, op ``raw`` (specs/trace.md, TR-2), that ``emq replay``
sends again. A refused call must answer the contract's code and change no key; an
accepted one (an edge) on a machine queue changes the machine's model the same way, and
is verified like any step (INV-8, INV-1..7). A finding is a ``Divergence`` citing the
rule the raw call's kind tests (``RULES``).
"""

from __future__ import annotations

from typing import Any, Sequence

from hypothesis.stateful import precondition, rule

from emq_kit import interrupts
from emq_kit._signals import Quiet
from emq_kit.check.hang import RULE as HANG_RULE
from emq_kit.check.names import Renamed
from emq_kit.check.raw.contract import RawCall, queue_of, queues_named, step_args
from emq_kit.check.raw.judge import RawJudge, prepare, sweep
from emq_kit.check.raw.variants import KINDS, RAW, RULES, SWEPT, drawn, drawn_op, kind_of
from emq_kit.check.step import Crash
from emq_model.invariants import Violation
from emq_model.snapshot import Snapshot


class RawCalls:
    """The raw-call rule and sweep of ``Conformance`` (it supplies ``target``, ``run``,
    ``models``, ``impls``, ``steps``, ``_record``, ``diverge`` and ``verify``)."""

    _raw_judge: RawJudge | None = None
    _prepared: tuple[Snapshot, list[Violation]] | None  # Conformance's (see its _call_target)

    def raw_judge(self: Any) -> RawJudge:
        """This example's judge: the target's connection, the machine's models (the
        queues raw calls reach beyond them get their own); the fingerprint is the
        embedded server's memory, or on a server every key of the run's own names
        (``run_names``: its calls go under them, specs/ownership.md OWN-2). On a server it
        judges by the keys the server names written (DEPTH-6)."""
        if self._raw_judge is None:
            conn = self.target.conn
            names = self.target.run_names if isinstance(self.target, Renamed) else None
            self._raw_judge = RawJudge(conn, match=None if conn.server is not None or names else "emq:*",
                                           models=dict(self.models), names=names, reader=self.target,
                                           by_change=self.by_change, same=self._same_now)
        return self._raw_judge

    @precondition(lambda self: self.run.raw_calls and self.target.capabilities.raw)
    @rule(a=RAW.strategy)
    def raw_call(self: Any, a: Any) -> None:
        """A call past the client on the first queue: one thing spoiled, or an edge taken,
        after the well-formed calls that give it a job to change (``prepare``)."""
        if self.stopped:
            return
        queue = next(iter(self.models))
        op = drawn_op(a)
        judge = self.raw_judge()
        try:
            prepare(judge, op, queue, send=self.send_raw)
            self.send_raw(drawn(a, judge.model(queue)))
        except Quiet:  # a known difference (the run reports every one): past it the
            self.stopped = True  # keyspaces may disagree, so the example makes no more calls

    def send_raw(self: Any, call: RawCall) -> None:
        """Send one raw call, record it as a step and judge it (raise the divergence)."""
        # A raw call goes past the client and its window (emq_kit/check/window.py): the
        # steps the window holds are sent and judged first, so the call meets their state.
        self.drain()
        if self.stopped:
            raise Quiet("a known difference in the window ended the example")
        judge = self.raw_judge()
        queue = queue_of(call)
        # Every queue the keys name is handed out (its first handout since the reset
        # empties it): a script that wrongly accepts a refused call then meets the empty
        # queue the model has, not what an earlier example or replay left there.
        for named in queues_named(call):
            self.target.queue(named)
        step = self._record(queue or "", "raw", step_args(call))
        self.count("raw")
        self._prepared = None
        finding = judge.send(call)
        step.model = call.expected or "accepted"
        step.target = step.model if finding is None else f"{finding.what} diverges"
        kind = kind_of(call)
        if ("raw", kind) in self.run.coverage.total:  # the cells the run declared (raw_cells)
            self.run.coverage.add("raw", kind)
        if finding is not None:
            rule_id = RULES.get(kind) or _op_rule(call.op)
            if finding.hang is not None:  # CC-9, as any call's: no step follows one still running
                step.target, rule_id = Crash(finding.hang), HANG_RULE
                self.run.halt = self.run.halt or finding.hang.stuck
            raise self.diverge("answer" if finding.what == "answer" else "snapshot", rule_id, step,
                               list(finding.lines))
        if queue in self.impls:  # an accepted edge changed a machine queue: check it as a step
            impl = self.impls[queue]
            if hasattr(impl, "observed"):
                impl.observed = None  # the raw call went past the observing queue
            if hasattr(impl, "last_dropped"):  # and past the client's record of a claim's drops
                impl.last_dropped = self.models[queue].last_dropped
            self.verify(queue, step)
        else:
            self.run.steps += 1

    def raw_sweep(self: Any, kinds: Sequence[str] = tuple(KINDS)) -> None:
        """Every raw call of ``kinds`` (all of them by default: the drawn ones too, so an
        edit of one check is found whatever the seed; a draw meets one variant of one op),
        once, in a fixed order (``sweep``), then every queue it touched emptied. Only
        the accepted calls stay steps of the trace: a refused one that passed changed
        nothing."""
        judge = self.raw_judge()

        def send(call: RawCall) -> None:
            interrupts.check()  # each call a stopping point (INT-1): a refused one leaves no step
            self.send_raw(call)
            if call.expected is not None:
                self.steps.pop()

        for _ in sweep(judge, kinds=kinds, send=send):
            pass
        self.target.reset()
        for queue in judge.models:
            self.target.queue(queue)
        self.target.reset()


def raw_cells(sweep: bool) -> list[tuple[str, str]]:
    """The coverage cells of raw calls: one per kind the run sends (the swept kinds only
    when it sweeps)."""
    return [("raw", kind) for kind in KINDS if sweep or kind not in SWEPT]


def _op_rule(op: str) -> str:
    from emq_model import spec

    return str(spec.entry(op)["rule"])

"""The clock policy of a conformance run (specs/lifecycle.md CLK-3,
specs/driver-protocol.md "Server clock").

- ``VirtualClock``: the machine's clock travels as ``now`` on every clock op, to the
  model and the target alike, and everything compares exactly.
- ``ServerClock``: for implementations that take no clock argument. No ``now`` is
  passed; the kit reads the server's ``TIME`` before (t0) and after (t1) each clock op
  (the built-in client in the op's own round trip, ``LiveTarget.time_calls``; otherwise
  over the clock's own connection), and the model runs at one clock value inside ``[t0, t1]``: the first of t0, the
  values inside the window where the outcome can change (a due score of the pumped
  location; the clock the target's written score implies) and t1 that reproduces the
  target's answer *and* keyspace. A deadline inside the window may so be due or not, but
  one clock explains the whole call. When none does, the model runs at t0 and the
  machine reports the divergence. Ticks and boundary moves become real waits, bounded.
"""

from __future__ import annotations

import copy
import time
from typing import Any, Callable, Protocol

from emq_model import spec

RunModel = Callable[[Any, dict[str, Any]], Any]
Bracket = Callable[[], "tuple[int, int] | None"]
"""``bracket()``: the server's clock (t0, t1) read around the target's last call in the
call's own round trip, or None where it read none (``LiveTarget.bracket``)."""
RunTarget = Callable[..., Any]
"""``run_target(args, meanwhile=None)``: the target's outcome; ``meanwhile``, when given,
runs exactly once, while the call is on the wire if the target can (``Target.call``)."""

PUMPED: dict[str, str] = {op: loc for op in ("promote", "reap") for (loc,) in [spec.OPS[op]["from"]]}
"""The location whose due members (score <= now) a pump moves: its one ``from`` in
transitions.json (promote: schedule, reap: active)."""


class Clock(Protocol):
    """What the machine asks of a clock policy."""

    mode: str  # "virtual" or "server" (``--clock``)

    def start(self, start: int) -> int:
        """The clock at the start of an example."""

    def stamp(self, args: dict[str, Any], now: int) -> dict[str, Any]:
        """The arguments of a clock op as both sides receive them."""

    def advance(self, to: int) -> int:
        """Move the clock to ``to`` (at least); the clock afterwards."""

    def sleep(self, now: int, ms: int) -> int:
        """A trace's ``sleep_ms`` (specs/trace.md TR-4c): the clock ``ms`` past the clock
        the last clock op ran at (or the last sleep's end); ``now`` is the machine's."""

    def call(self, op: str, model: Any, args: dict[str, Any], run_model: RunModel,
             run_target: RunTarget, read_target: Callable[[], Any], bracket: Bracket | None = None) -> tuple[Any, Any]:
        """Run ``op`` on the model (``run_model(model, args)``) and the target; the two
        outcomes. ``read_target`` reads the target's snapshot after the call;
        ``bracket``, where the target reads the server's clock around its calls itself,
        hands out the (t0, t1) it read around the last one (``LiveTarget.bracket``)."""


class VirtualClock:
    """The model's clock, passed on every call: exact and reproducible."""

    mode = "virtual"

    def start(self, start: int) -> int:
        return start

    def stamp(self, args: dict[str, Any], now: int) -> dict[str, Any]:
        return {**args, "now": now}

    def advance(self, to: int) -> int:
        return to

    def sleep(self, now: int, ms: int) -> int:
        return min(now + ms, spec.LIMITS["ms_max"])  # every clock op carries its own now: nothing waits

    def call(self, op: str, model: Any, args: dict[str, Any], run_model: RunModel,
             run_target: RunTarget, read_target: Callable[[], Any], bracket: Bracket | None = None) -> tuple[Any, Any]:
        """The model runs while the target's call is on the wire where the target can
        overlap them (``Target.call``'s ``meanwhile``), else after it: the same clock, so
        the order is free."""
        ran: list[Any] = []
        target = run_target(args, lambda: ran.append(run_model(model, args)))
        # nothing ran only when the model's side raised (kept aside by the machine): run
        # it again here, so its own exception surfaces, never the target's outcome
        return (ran[0] if ran else run_model(model, args)), target


def _same(a: Any, b: Any) -> bool:
    return a == b and type(a) is type(b)


class ServerClock:
    """The server's clock, read around each clock op (see the module docstring).
    ``time_ms`` reads ``TIME`` in ms (CLK-1); waits poll it for at most ``max_wait_ms``;
    ``close`` releases what ``time_ms`` reads through (the connection ``for_url`` opens)."""

    mode = "server"

    def __init__(self, time_ms: Callable[[], int], max_wait_ms: int = 1000, *,
                 close: Callable[[], None] = lambda: None) -> None:
        self.time_ms, self.max_wait_ms, self.close = time_ms, max_wait_ms, close
        self.window: tuple[int, int, int] | None = None
        """(t0, t1, the model's clock) of the example's last clock op."""
        self.last = 0
        """The server's clock as last read (an example's start, a wait's end, a window's t1)."""
        self.mark = 0
        """Where a ``sleep`` counts from: the clock the last clock op ran at (the model's),
        or the last sleep's end; the example's start before either."""

    @classmethod
    def for_url(cls, url: str) -> "ServerClock":
        """A clock reading ``TIME`` of the server at ``url`` over its own connection."""
        from emq_live.client import connect

        conn = connect(url, fence=False)
        return cls.over(conn.redis, close=conn.close)

    @classmethod
    def over(cls, client: Any, *, close: Callable[[], None] = lambda: None) -> "ServerClock":
        """A clock reading ``TIME`` through ``client`` (a redis-py client; fakeredis has
        ``TIME`` too: its host's clock)."""

        from emq_live.scripts import ms_of

        return cls(lambda: ms_of(client.time()), close=close)

    def start(self, start: int) -> int:
        self.last = self.mark = self.time_ms()
        self.window = None
        return self.last

    def stamp(self, args: dict[str, Any], now: int) -> dict[str, Any]:
        return args

    def advance(self, to: int) -> int:
        """Wait until the server clock reaches ``to`` (polling, bounded)."""
        return self._wait(to, self.max_wait_ms)

    def sleep(self, now: int, ms: int) -> int:
        """Wait until the server clock reads ``ms`` past ``mark`` (bounded by ``ms`` and
        ``max_wait_ms`` more): every deadline the run saw pass between two clock ops
        passes again in a replay, however fast it runs."""
        self.mark += ms
        return self._wait(self.mark, ms + self.max_wait_ms)

    def _wait(self, to: int, bound_ms: int) -> int:
        deadline = time.monotonic() + bound_ms / 1000
        now = self.time_ms()
        while now < to and time.monotonic() < deadline:
            time.sleep(min(to - now, 50) / 1000)
            now = self.time_ms()
        self.last = max(self.last, now)
        return now

    def call(self, op: str, model: Any, args: dict[str, Any], run_model: RunModel,
             run_target: RunTarget, read_target: Callable[[], Any], bracket: Bracket | None = None) -> tuple[Any, Any]:
        """``t0`` and ``t1``: read by the target in the call's own round trip where it
        can (``bracket``: one round trip a clock op), else here, one before and one
        after the call (three). A call the target never sent (refused before any I/O)
        ran at no clock of the server's: the model runs at the clock last read, which
        no earlier step's clock passes (the step changes nothing, or diverges)."""
        if not spec.entry(op)["clock"]:  # a transition, a read or a batch
            return run_model(model, args), run_target(args)
        if bracket is None:
            t0 = self.time_ms()
            target = run_target(args)
            t1 = self.time_ms()
        else:
            target = run_target(args)
            t0, t1 = bracket() or (self.last, self.last)
        lo, hi = min(t0, t1), max(t0, t1)
        self.last = max(self.last, hi)
        now = self._choose(op, model, args, run_model, target, read_target, lo, hi)
        self.window, self.mark = (lo, hi, now), now
        return run_model(model, {**args, "now": now}), target

    def _choose(self, op: str, model: Any, args: dict[str, Any], run_model: RunModel, target: Any,
                read_target: Callable[[], Any], lo: int, hi: int) -> int:
        """The first clock in ``[lo, hi]`` at which the model does what the target did
        (``lo`` itself when the window is one clock: the only clock to run at)."""
        if lo == hi:
            return lo
        theirs = read_target()

        def explains(now: int) -> tuple[bool, Any]:
            trial = copy.deepcopy(model)
            answer = run_model(trial, {**args, "now": now})
            snap = trial.snapshot()
            return _same(answer, target) and snap == theirs, snap

        ok, at_lo = explains(lo)
        if ok:
            return lo
        candidates = {hi}
        if op in PUMPED:
            candidates |= {s for s in model.sets[PUMPED[op]].values() if lo < s <= hi}
        for loc, member, score in theirs.members():
            mine = at_lo.score(loc, member)
            if mine is not None and lo < lo + (score - mine) <= hi:
                candidates.add(int(lo + (score - mine)))
        return next((now for now in sorted(candidates) if explains(now)[0]), lo)

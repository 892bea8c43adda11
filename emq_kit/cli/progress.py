"""Every long command's progress on stderr, one facility (``Meter``): ``check``,
``audit``, ``selftest`` and ``bench`` each say their phase and, where they know it, how
far along it they are. On a terminal a live line redrawn in place; elsewhere (CI logs, a
pipe, a captured stream) plain lines only — never a ``\\r`` — one when the phase changes
and at most one every ``EVERY`` seconds in between. A count never passes its total, and
a known total gives an ETA from the phase's pace so far. The library never writes
progress itself (``emq_kit.check`` takes a callback), so a pytest failure shows none.

``CheckProgress`` is ``emq check``'s: its phases are the run's (``Run.phase``, one of
``PhaseName``: sweeping, searching, shrinking a difference, checking the server clock,
minimizing, reproducing)."""

from __future__ import annotations

import sys
import time
from typing import IO, Callable

from emq_kit.check.tally import PhaseName, Run

EVERY = 10.0  # seconds between plain lines off a terminal


def _duration(seconds: float) -> str:
    seconds = int(seconds + 0.5)
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


class Meter:
    """One command's progress line (``show``), ended by ``end`` so what follows starts on
    its own line."""

    def __init__(self, command: str, stream: IO[str] | None = None, *, every: float = EVERY,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.command, self.stream, self.every, self.clock = command, stream or sys.stderr, every, clock
        self.live = self.stream.isatty()
        self.width = 0  # the live line's width drawn: a shorter one blanks the rest
        self.last = clock()
        self.phase: str | None = None
        self.phase_started = self.last

    def text(self, phase: str, done: int | None, total: int | None, detail: str) -> str:
        """The line: the phase, ``done/total`` (clamped: never past it) with its share
        and an ETA from the phase's pace, or ``done`` alone, then ``detail``."""
        parts = [phase]
        if done is not None and total:
            done = min(done, total)
            part = f"{done:,}/{total:,} ({100 * done // total}%)"
            elapsed = self.clock() - self.phase_started
            if 0 < done < total and elapsed > 0:
                part += f", ETA {_duration(elapsed / done * (total - done))}"
            parts.append(part)
        elif done is not None:
            parts.append(f"{done:,}")
        if detail:
            parts.append(detail)
        return "  ".join(parts)

    def show(self, phase: str, done: int | None = None, total: int | None = None, detail: str = "") -> None:
        """Say where the command is: redrawn live on a terminal; off one, a plain line at
        a new phase and at most every ``every`` seconds."""
        now = self.clock()
        changed = phase != self.phase
        if changed:
            self.phase, self.phase_started = phase, now
        line = self.text(phase, done, total, detail)
        if self.live:
            self.stream.write("\r  " + line + " " * max(self.width - len(line), 0))
            self.width = len(line)
        elif changed or now - self.last >= self.every:
            self.stream.write(f"emq {self.command}: {line}\n")
            self.last = now
        else:
            return
        self.stream.flush()

    def end(self) -> None:
        """End the live line, if one was drawn."""
        if self.width:
            self.stream.write("\n")
            self.stream.flush()
            self.width = 0


class CheckProgress:
    """A check's meter (the callable handed to ``emq_kit.check``), called with the run
    at every example and every phase: the phase, the examples searched against the
    run's budget (those spent shrinking a difference are not searched), and the steps
    and cells so far."""

    def __init__(self, examples: int, stream: IO[str] | None = None, *, every: float = EVERY,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.examples, self.meter = examples, Meter("check", stream, every=every, clock=clock)
        self.run: Run | None = None  # the last seen: what an interrupted run has so far

    def __call__(self, run: Run) -> None:
        self.run = run
        searching = run.phase == PhaseName.SEARCH
        phase = PhaseName.SHRINK if searching and run.shrinking else run.phase
        self.meter.show(phase, run.searched if searching else None, (run.budget or self.examples) if searching else None,
                        f"steps {run.steps:,}  cells {'/'.join(map(str, run.cells()))}")

    def end(self) -> None:
        self.meter.end()

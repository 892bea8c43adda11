"""``emq check``'s progress on stderr, where people look: on a terminal a live line
redrawn at every example; elsewhere (CI logs) a plain line every ``EVERY`` seconds.
Both name the phase: ``searching`` until the first divergence, then ``shrinking``, and
``minimizing`` once the search is over and the kit's minimizer runs."""

from __future__ import annotations

import sys
import time
from typing import IO, Callable

from emq_kit.check.machine import Run

EVERY = 10.0  # seconds between plain lines off a terminal


def phase(run: Run) -> str:
    """``searching`` until a divergence was seen, then ``shrinking`` (Hypothesis shrinks
    it), then ``minimizing`` (the kit's minimizer, emq_kit/check/minimize.py)."""
    if run.minimizing:
        return "minimizing"
    return "searching" if run.first_failure is None else "shrinking"


def line(run: Run, examples: int) -> str:
    """The progress figures: phase, examples, steps, cells."""
    return (f"{phase(run)}  examples {run.examples}/{examples}  steps {run.steps}  "
            f"cells {run.coverage.reached()}/{len(run.coverage.total)}")


class Progress:
    """The callable handed to ``run_check`` (``show(run)`` at each example) and ``end()``,
    which ends a live line so what follows starts on its own line."""

    def __init__(self, examples: int, stream: IO[str] | None = None, *, every: float = EVERY,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.examples, self.stream, self.every, self.clock = examples, stream or sys.stderr, every, clock
        self.live = self.stream.isatty()
        self.drawn = False
        self.last = clock()
        self.run: Run | None = None  # the last seen: what an interrupted run has so far

    def __call__(self, run: Run) -> None:
        self.run = run
        if self.live:
            self.stream.write(f"\r  {line(run, self.examples)} ")
            self.drawn = True
        elif self.clock() - self.last >= self.every:
            self.stream.write(f"emq check: {line(run, self.examples)}\n")
            self.last = self.clock()
        else:
            return
        self.stream.flush()

    def end(self) -> None:
        """End the live line, if one was drawn."""
        if self.drawn:
            self.stream.write("\n")
            self.stream.flush()
            self.drawn = False

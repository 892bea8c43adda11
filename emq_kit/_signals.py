"""The kit's internal control-flow signals: exceptions that end a loop, an example or a
round where they are raised, and are caught by the kit itself. None reaches a caller of
the library or a user (the kit's errors are ``emq_kit.errors``)."""

from __future__ import annotations


class Quiet(Exception):
    """A known difference (or one set aside while another is shrunk) ended the example:
    not a failure, the rest of the example runs no calls."""


class ShrinkCut(KeyboardInterrupt):
    """The round's shrink budget is spent: raised when the next example would start, to
    end Hypothesis's shrinking there; the round ends with ``Run.best``. A
    ``KeyboardInterrupt`` because that is the one exception Hypothesis's engine lets
    through untouched: any other is recorded as the example's end (a test case that drew
    nothing, which the next replay of its choices contradicts: FlakyStrategyDefinition).
    ``run._round`` catches it; it never reaches a caller."""


class Refused(Exception):
    """A driver's ``init`` answered an error (DP-9: perhaps an old driver refusing the
    offer); ``DriverTarget`` offers protocol 1 next, or gives up."""


class PortTaken(Exception):
    """The port a throwaway server picked was taken between picking it and binding it;
    ``ServerProcess.start`` picks another."""


class Stopped(Exception):
    """A campaign's task ended because the command that started its worker told it to
    (``campaign.tasks.stop``): an interrupted run's end, its claim released, never a
    verdict. A plain exception, which Dask hands back to a command already ending on its
    interrupt; a ``KeyboardInterrupt`` would end the worker's event loop."""

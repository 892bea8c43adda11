"""The kit's own typed errors. Library code raises these (never the CLI's exit codes);
``emq_kit.cli`` turns each into one line on stderr and exit 2.

A ``KitError`` is a problem of the environment or the input (a server that cannot be
reached, scripts that do not load, a tool that is not installed, a file that cannot be
written), never a verdict about the implementation under check: counterexamples are
``Divergence`` (emq_kit.check.machine) and travel in a ``Report``.
"""

from __future__ import annotations


class KitError(Exception):
    """An environment or input problem: the run could not happen as asked."""


class TargetFault(Exception):
    """Mixed into the exceptions that carry a target's behaviour (a port's driver that
    fails or breaks the protocol): the machine records one as the target's ``Crash``,
    where any other exception from the kit's own code is a ``KitBug``."""


class TargetUnavailable(KitError):
    """The target cannot be opened (bad URL, unreachable server, scripts that do not
    load, a driver that does not start) or was lost during the run."""


class FencedElsewhere(TargetUnavailable):
    """The server's ``{emq}:version`` holds another wire version than the contract's
    (KS-6): our scripts refuse every call there (``emq check --refence`` proceeds)."""


class ServerUnreachable(TargetUnavailable):
    """The server cannot be reached at all (refused, timed out, not a Redis/Valkey
    server): the environment's fault, never a verdict on the scripts it would run."""


class KitBug(KitError):
    """An exception raised in the kit's own code (a ``TypeError`` in our client, a
    redis-py API mismatch): never the target's crash nor a counterexample. Printed as
    ``emq bug: ...`` with what to report."""

    REPORT = ("please report it with the command line, `pip show emq redis fakeredis hypothesis`, "
              "and EMQ_DEBUG=1's traceback")

    def __init__(self, exc: BaseException, where: str = "") -> None:
        self.cause = exc
        at = f" in {where}" if where else ""
        super().__init__(f"emq bug{at}: {type(exc).__name__}: {exc} ({self.REPORT})")


class ToolMissing(KitError):
    """An external program the command needs is not installed."""


class BadArgument(KitError):
    """An argument the library cannot work with (a URL of the wrong kind, a bad size)."""


class Occupied(KitError):
    """The server already holds keys of a name the run would write, and the user did
    not allow deleting them (``--wipe``; specs/ownership.md OWN-3)."""


class SearchFailed(KitError):
    """The search itself failed (Hypothesis gave up on the machine, a timed-out driver
    made an example unrepeatable): a kit-side failure, never a verdict on the target."""

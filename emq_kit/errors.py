"""The kit's errors, one tree. As in click's ``exceptions.py``, each class carries its exit
code and how it is shown, so a front end shows any of them in one place
(``emq_kit.cli.main``: ``error.show(command)`` on stderr, exit ``error.exit_code``).
Library code raises these, never an exit code.

Exit codes: 0 the target conforms (the command did what it was asked), 1 a difference
(a verdict on the target), 2 usage or environment: the run could not happen as asked,
130 interrupted (Ctrl-C, as a shell reports a command SIGINT ended: 128 + 2).

::

    KitError                 2  the command cannot give its result
      BadArgument               an argument the kit cannot work with
        Usage                   ... found by the command line itself
        TraceError              a trace file that is not one (TR-9a)
        InputRefused            a file named as input that is no regular file, or too long (TR-9c)
      TargetUnavailable         the target cannot be had, or was lost
        FencedElsewhere         its {emq}:version is another wire version (KS-6)
        ServerUnreachable       no server answers there
          Unkillable            ... it runs a script SCRIPT KILL cannot stop
        DriverUnavailable       a port's driver that does not start (DP-9)
      ToolMissing               an external program is not installed
      ClusterUnavailable        a campaign's Dask cluster cannot be had (CMP-5)
      ServerError               a throwaway server cannot be had (emq_kit.server)
        ServerMissing           ... its binary is not installed (a ToolMissing too)
        ServerStartError        ... it did not start
      Occupied                  the server holds keys the run would write (OWN-3)
      SearchFailed              the search itself failed
      SoakError                 a soak could not be carried out
      AuditError                a deployment could not be audited
      CheckFailed               a selftest mutant's run failed in the kit (in a KitBug)
      KitBug                    an exception of the kit's own code
      Wrong                  1  a wrong answer where no report can carry it (bench)

    Interrupted            130  Ctrl-C, raised where the run can stop (a KeyboardInterrupt: INT-1)

    TargetFault                 the target's behaviour, not an ending: the machine
      DriverError               records it as the step's ``Crash`` answer, so the
        DriverExited            verdict is a divergence there (DP-13..16)
        DriverTimeout
        DriverGarbage
      ProtocolError
      ScriptHang                a script that did not return within its bound (CC-9)

A ``TargetFault`` is never shown by itself: met outside a step (no step to judge), the
run cannot go on and the target counts as lost (``kit_error``). Counterexamples are
``Divergence`` (emq_kit.check.step) and travel in a ``Report``.
"""

from __future__ import annotations

import contextlib
import re
from typing import Iterator

EXIT_OK, EXIT_FAIL, EXIT_ENV = 0, 1, 2
EXIT_INTERRUPTED = 130

_ACTED_ON = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f]")  # C0 but tab, DEL, C1


def inert(text: object) -> str:
    """``text`` as the kit shows words it did not write (a path, a driver's message, a
    report's field): what a terminal acts on (escape sequences, a carriage return, a
    newline) and a lone surrogate written as escapes, so it stays one line of text."""
    text = str(text).encode("utf-8", "backslashreplace").decode("utf-8")
    return _ACTED_ON.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


class KitError(Exception):
    """The command cannot give its result as asked: the environment or the input (exit
    2), or a wrong answer no report can carry (``Wrong``, exit 1)."""

    exit_code = EXIT_ENV

    def show(self, command: str) -> str:
        """The one line a front end prints for this error of ``command`` (``check``):
        one line whatever it quotes (``inert``)."""
        return f"emq {command}: {inert(self)}"


class BadArgument(KitError):
    """An argument the library cannot work with (a URL of the wrong kind, a bad size,
    options that do not go together)."""


class Usage(BadArgument):
    """A usage problem the command line itself finds."""


class TraceError(BadArgument, ValueError):
    """A trace file that is not a trace this kit can replay: the first problem, with
    its JSON path."""


class InputRefused(BadArgument, OSError):
    """A file named as a command's input (a trace, an expectations file, a plan, a report)
    that the kit will not read: no regular file (a FIFO, a device, a directory), or longer
    than its bound (``emq_kit.inputs``, specs/trace.md TR-9c). An ``OSError`` too, as a
    file that cannot be read at all is, so each reader's ``except OSError`` names the file
    in its one line."""


class TargetUnavailable(KitError):
    """The target cannot be opened (bad URL, unreachable server, scripts that do not
    load, a driver that does not start) or was lost during the run."""


class FencedElsewhere(TargetUnavailable):
    """The server's ``{emq}:version`` holds another wire version than the contract's
    (KS-6): our scripts refuse every call there (``emq check --refence`` proceeds)."""


class ServerUnreachable(TargetUnavailable):
    """The server cannot be reached at all (refused, timed out, not a Redis/Valkey
    server): the environment's fault, never a verdict on the scripts it would run."""


class Unkillable(ServerUnreachable):
    """A script still running on the server that ``SCRIPT KILL`` cannot stop (it has
    written, CC-9): the server answers nothing else until it is restarted."""


class DriverUnavailable(TargetUnavailable):
    """A port's driver that cannot be checked: its command does not split or start, its
    ``init`` fails or names what the kit cannot check (DP-9), its fence disagrees with
    its server (DP-9d). The environment's, like a server out of reach; a driver that
    fails once started is a ``DriverError``, the target's behaviour."""


class ToolMissing(KitError):
    """An external program the command needs is not installed."""


class ClusterUnavailable(KitError):
    """A campaign's Dask cluster cannot be used (specs/campaign.md CMP-5): its scheduler
    does not answer, it has no worker, a worker lacks the kit (or has another version of
    it) or may not start a child process."""


class ServerError(KitError):
    """A throwaway server (``emq_kit.server``) cannot be had or used as asked."""


class ServerMissing(ServerError, ToolMissing):
    """The server binary is not installed (or not executable)."""

    def __init__(self, binary: str, hint: str) -> None:
        self.binary = binary
        super().__init__(f"server binary {binary!r} not found on PATH. {hint}")


class ServerStartError(ServerError):
    """The server exited early or did not answer PING within the timeout."""


class Occupied(KitError):
    """The server already holds keys of a name the run would write, and the user did
    not allow deleting them (``--wipe``; specs/ownership.md OWN-3)."""


class SearchFailed(KitError):
    """The search itself failed (Hypothesis gave up on the machine, a timed-out driver
    made an example unrepeatable, a mutant's budget spent on differences no replay
    showed): never a verdict on the target or the mutant."""


class SoakError(KitError):
    """The soak could not be carried out (a process failed, the server went away)."""


class AuditError(KitError):
    """The deployment could not be audited (connection, ACL, wire version)."""


class CheckFailed(KitError):
    """The machine's run on a selftest mutant failed in the kit, not in the mutant's
    scripts (what a ``KitBug`` of the selftest carries)."""


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


class Wrong(KitError):
    """A queue answered what the lifecycle does not allow where no report can carry the
    difference (``emq bench`` measures nothing of a wrong queue): a verdict, exit 1."""

    exit_code = EXIT_FAIL


class TargetFault(Exception):
    """An exception that carries a target's behaviour (a port's driver that fails or
    breaks the protocol): the machine records one as the target's ``Crash``, where any
    other exception from the kit's own code is a ``KitBug``."""


class DriverError(TargetFault):
    """A started driver failed to answer a request as the protocol says (DP-13)."""


class DriverExited(DriverError):
    """The driver's process ended (or closed its output) before it answered."""


class DriverTimeout(DriverError):
    """No answer within the per-request timeout; the driver was killed."""


class DriverGarbage(DriverError):
    """A reply that is not a JSON object for the pending request; the driver was killed."""


class ProtocolError(ValueError, TargetFault):
    """A message that breaks the driver protocol."""


class ScriptHang(TargetFault):
    """A script call that did not return within the kit's bound (specs/lifecycle.md
    CC-9): stopped (the embedded fakeredis aborts its Lua; a server's is stopped with
    ``SCRIPT KILL``), or, ``stuck``, still running on the server: it had written, so
    ``SCRIPT KILL`` cannot stop it, and the server answers nothing else until restarted."""

    def __init__(self, message: str, stuck: bool = False) -> None:
        super().__init__(message)
        self.stuck = stuck


class Interrupted(KeyboardInterrupt):
    """Ctrl-C, raised where the run can stop cleanly (``emq_kit.interrupts``, INT-1): a
    ``KeyboardInterrupt``, so that no ``except Exception`` of the kit or of Hypothesis
    takes it for a failure. ``said``: the command has printed what the interrupt left
    (its seed, its trace), so the front end adds nothing but the exit code."""

    exit_code = EXIT_INTERRUPTED

    def __init__(self, said: bool = False) -> None:
        super().__init__()
        self.said = said

    def show(self, command: str) -> str:
        return f"emq {command}: interrupted"


def kit_error(exc: Exception) -> KitError:
    """``exc`` as the kit error a front end shows: itself when it is one, the kit's class
    of it when a layer below raised it (``foreign``), else a ``KitBug``."""
    if isinstance(exc, KitError):
        return exc
    return foreign(exc) or KitBug(exc)


def foreign(exc: Exception) -> KitError | None:
    """The kit's class of what the layers below the kit raise: the client's ``UrlError``
    (a URL it cannot read, a ``BadArgument``) and ``ConnectError`` (a server out of
    reach), a command of the kit's own the server's ACL refuses, a layout the installed
    packages cannot serve; a target's fault met outside a step (no step to judge it) is
    the target lost. None for anything else."""
    from redis.exceptions import NoPermissionError

    from emq_live.layouts.bullmq import LayoutUnavailable
    from emq_live.urls import ConnectError, UrlError

    if isinstance(exc, UrlError):  # a URL the client cannot read: the user's to mend, nothing was connected
        return BadArgument(str(exc))
    if isinstance(exc, ConnectError):  # already names the URL, redacted
        return ServerUnreachable(str(exc))
    if isinstance(exc, NoPermissionError):  # the user's ACL lacks a rule (a script's own refusal is a step's answer)
        return TargetUnavailable(f"the server refused this user a command the kit needs: {exc} "
                                 "(the rules a user needs: specs/acl.json, docs/server.md \"Least privilege\")")
    if isinstance(exc, (LayoutUnavailable, TargetFault)):
        return TargetUnavailable(str(exc))
    return None


@contextlib.contextmanager
def raised_as_kit_errors() -> Iterator[None]:
    """Within it, what the layers below raise leaves as the kit's class of it
    (``foreign``): a library call raises the kit's errors only (or a bug's own)."""
    try:
        yield
    except Exception as exc:
        error = foreign(exc)
        if error is None:
            raise
        raise error from None


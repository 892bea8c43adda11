"""The target: what the conformance machine drives beside the model, as one interface.

A target hands out queues with the model's method names and answers, reads a queue's
snapshot, deletes a row by hand and overwrites a key with another type and back (the
faults the machine injects), and empties itself between examples. ``describe`` names
it in summaries and trace headers. Everything the machine reads of a target is
declared here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Mapping, NamedTuple, Protocol, Sequence

from emq_model.snapshot import Snapshot

if TYPE_CHECKING:
    from emq_live.client import BadReply, Connection


@dataclass(frozen=True)
class Capabilities:
    """What a target can be sent, declared once by the target itself (the model, the
    built-in client, a port's driver, the bullmq layout's target, and a renamed one
    of these as the one it wraps). The machine, the runner and a run's focus read it;
    nothing probes a target for a member."""

    batches: bool = False
    """The batch ops (``enqueue_many``, ``claim_many``, ``complete_many``): the machine
    draws none without them (a driver, B-4)."""
    raw: bool = False
    """Scripts of our calling convention (CC-1, CC-2) over the target's ``conn``: the
    machine also calls them past the client (``emq_kit/check/raw/``) and a gated run
    ends with a server-clock phase. Not a driver (a port's own client is in between), not
    the model, not a cluster."""
    lanes: bool = False
    """The lane ops (lifecycle.md §10): the machine draws none without them."""
    batch_max: int = 0
    """How many calls ``batch`` takes at once: 0 when the target has no windows (the
    machine then verifies step by step; emq_kit/check/window.py)."""
    ahead: bool = False
    """An ``Ahead`` (``post``, ``collect``): a window's calls go out one by one as the machine makes
    the steps, and their replies are read together when the window is judged (the
    built-in client on a server); otherwise a window goes whole, by ``batch``."""
    key_faults: bool = False
    """The kit can delete a row and overwrite keys by hand on the target's keyspace
    (``forget_row``, ``spoil_key``, ``stray_key``: FLT-3..5, CC-8); a driver only with a
    server to reach."""
    fence: str | None = None
    """The ``{emq}:version`` value the target reports it runs under (a driver, DP-9d);
    None: it fences as the contract says."""
    offered: frozenset[str] | None = None
    """The ops the target offered (a driver's ``init`` list, DP-9a); None: every op."""
    absent_args: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Arguments the target's API lacks, per op (DP-9a): never drawn."""


class Opened(Protocol):
    """What every target a layout opens has, whatever machine drives it: what the runner,
    a run's focus and the reports read."""

    @property
    def capabilities(self) -> Capabilities:
        """What it can be sent."""

    @property
    def conn(self) -> Connection | None:
        """With ``capabilities.raw``: the connection the scripts run over; None otherwise."""

    @property
    def notes(self) -> Sequence[str]:
        """What the target did on its own when it opened that the user should know (a
        driver offered protocol 1, DP-9), one line each."""

    @property
    def stuck(self) -> bool:
        """A script still runs on its server that SCRIPT KILL cannot stop (CC-9): the
        target answers nothing more, and is not replayed."""

    def reset(self) -> None:
        """Forget every queue: each queue handed out afterwards starts empty."""

    def describe(self) -> dict[str, object]:
        """What this target is: kind, URL, script directory and SHA1s, server version."""

    def close(self) -> None:
        """Release connections and servers."""


class Target(Opened, Protocol):
    """The surface the conformance machine needs from an implementation."""

    def call(self, name: str, op: str, args: dict[str, object], meanwhile: Callable[[], None] | None = None) -> object:
        """``op`` with ``args`` on the queue ``name``: its answer, a refusal raised as the
        ``EmqError`` it is. ``meanwhile`` (the model's side of the step) runs exactly
        once: while the call is on the wire when the target can overlap the two, else
        after the answer came back (or the refusal was raised). ``snapshot(name)`` right
        after hands out the snapshot that came back with the call, where one did."""

    def dropped(self, name: str) -> tuple[str, ...]:
        """The orphans the queue's last claim dropped (T-claim-5)."""

    def time_calls(self, on: bool) -> bool:
        """For the server clock (SC-1): from now on read the server's ``TIME`` right
        before and right after each call, in the call's own round trip; whether the
        target can (False: the reads are ``ServerClock``'s)."""

    def bracket(self) -> tuple[int, int] | None:
        """With ``time_calls`` on: the (t0, t1) read around the last ``call`` (None: it
        sent nothing, refused before any I/O)."""

    def batch(self, calls: Sequence[tuple[str, str, dict[str, object]]], snapshots: bool = True) -> list[BatchReply]:
        """A window's calls (op, queue, args) in one round trip, each answered with the
        queue's snapshot after it; only when ``capabilities.batch_max`` > 0."""

    def queue(self, name: str) -> object:
        """A queue object with the model's methods (``ArgError`` for a bad name). One
        that has a ``meanwhile`` attribute runs the callable set there once, after its
        next call went out and before its answer is read: the model's side of the step
        overlaps the round trip (``ObservedQueue``)."""

    def snapshot(self, name: str) -> Snapshot | BadReply:
        """The queue's whole keyspace, read in one consistent read (the ``BadReply`` of
        a reply of another shape: the machine's snapshot divergence)."""

    def forget_row(self, name: str, job_id: str) -> None:
        """Delete the job's row by hand, leaving its member an orphan."""

    def spoil_key(self, name: str, key: str, kind: str, id: str | None = None, group: str | None = None) -> None:
        """Overwrite the queue's key ``key`` (a name of transitions.json's ``keys``; the
        row of ``id``, the lane of ``group``) with a value of type ``kind``, keeping what
        it held (CC-8's fault: the machine's ``spoil`` rule)."""

    def mend_key(self, name: str, key: str, id: str | None = None, group: str | None = None) -> None:
        """Put back what ``spoil_key`` overwrote."""

    def stray_key(self, name: str, key: str, kind: str) -> None:
        """Write ``emq:{q}:<key>``, a key the grammar does not name, as a value of type
        ``kind`` (the machine's ``stray_keys`` rule)."""

    def drop_key(self, name: str, key: str) -> None:
        """Delete the stray key ``emq:{q}:<key>``."""


class Ahead(Target, Protocol):
    """A target that declares ``capabilities.ahead``: a window's calls go out as the
    machine makes its steps, and come back together."""

    def post(self, calls: Sequence[tuple[str, str, dict[str, object]]]) -> None:
        """Send a window's next calls (as ``batch`` takes them) now; their replies wait
        for ``collect``. A call may be a fault (``forget_row``, ``spoil_key``,
        ``mend_key``, ``stray_key``, ``drop_key``, with their arguments by name): answered
        None, or with the error its commands met."""

    def collect(self) -> list[BatchReply]:
        """The replies of every call posted since the last ``collect``, in order, as
        ``batch`` answers them."""


class BatchReply(NamedTuple):
    """One call's reply in a batch (DP-20): its answer as the model's (or the exception
    it stands for: a refusal's ``EmqError``, a ``DriverError``, a ``ProtocolError``), the
    orphans a claim dropped, and the queue's snapshot read after it (``None``: read it again;
    a ``BadReply``: a reply of another shape)."""

    answer: object
    dropped: tuple[str, ...]
    snapshot: Snapshot | BadReply | None

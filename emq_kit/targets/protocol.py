"""The target: what the conformance machine drives beside the model, as one interface.

A target hands out queues with the model's method names and answers, reads a queue's
snapshot, deletes a row by hand and overwrites a key with another type and back (the
faults the machine injects), and empties itself between examples. ``describe`` names
it in summaries and trace headers. Everything the machine reads of a target is
declared here.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Protocol, Sequence

from emq_model.snapshot import Snapshot


class Target(Protocol):
    """The surface the machine needs from an implementation."""

    batches: bool
    """Whether the target has the batch ops (``enqueue_many``, ``claim_many``,
    ``complete_many``): the machine draws none when it does not (a driver, B-4)."""

    raw: bool
    """Whether the target runs scripts of our calling convention (CC-1, CC-2) over a
    connection ``conn`` (an ``emq_live.client.Connection``): then the machine also calls
    them past the client (``emq_kit/check/raw.py``) and runs a server-clock phase. Not a
    driver (a port's own client is in between), not the model."""

    conn: Any
    """With ``raw``: the ``emq_live.client.Connection`` the scripts run over."""

    @property
    def lanes(self) -> bool:
        """Whether the target has the lane ops (lifecycle.md §10): the machine draws none
        when it does not."""

    batch_max: int
    """How many calls ``batch`` takes at once: 0 when the target has no windows (the
    machine then verifies step by step; emq_kit/check/window.py)."""

    fence: str | None
    """The ``{emq}:version`` value the target runs under, when it reports one (a driver,
    DP-9d); a target without the attribute fences as the contract says."""

    def call(self, name: str, op: str, args: dict[str, Any], meanwhile: Callable[[], None] | None = None) -> Any:
        """``op`` with ``args`` on the queue ``name``: its answer, a refusal raised as the
        ``EmqError`` it is. ``meanwhile`` (the model's side of the step) runs exactly
        once: while the call is on the wire when the target can overlap the two, else
        after the answer came back (or the refusal was raised). ``snapshot(name)`` right
        after hands out the snapshot that came back with the call, where one did."""

    def dropped(self, name: str) -> tuple[str, ...]:
        """The orphans the queue's last claim dropped (T-claim-5)."""

    def time_calls(self, on: bool) -> bool:
        """Optional, for the server clock (SC-1): from now on read the server's ``TIME``
        right before and right after each call, in the call's own round trip; whether
        the target can. A target without it leaves the reads to ``ServerClock``."""

    def bracket(self) -> tuple[int, int] | None:
        """With ``time_calls`` on: the (t0, t1) read around the last ``call`` (None: it
        sent nothing, refused before any I/O)."""

    def batch(self, calls: Sequence[tuple[str, str, dict[str, Any]]], snapshots: bool = True) -> list[Any]:
        """A window's calls (op, queue, args) in one round trip, each answered with the
        queue's snapshot after it (``BatchReply``); only when ``batch_max`` > 0."""

    def reset(self) -> None:
        """Forget every queue: each queue handed out afterwards starts empty."""

    def queue(self, name: str) -> Any:
        """A queue object with the model's methods (``ArgError`` for a bad name). One
        that has a ``meanwhile`` attribute runs the callable set there once, after its
        next call went out and before its answer is read: the model's side of the step
        overlaps the round trip (``ObservedQueue``)."""

    def snapshot(self, name: str) -> Snapshot:
        """The queue's whole keyspace, read in one consistent read."""

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

    def describe(self) -> dict[str, Any]:
        """What this target is: kind, URL, script directory and SHA1s, server version."""

    def close(self) -> None:
        """Release connections and servers."""


class BatchReply(NamedTuple):
    """One call's reply in a batch (DP-20): its answer as the model's (or the exception
    it stands for: a refusal's ``EmqError``, a ``DriverError``, a ``ProtocolError``), the
    orphans a claim dropped, and the queue's snapshot read after it (or ``None``)."""

    answer: Any
    dropped: tuple[str, ...]
    snapshot: Snapshot | None

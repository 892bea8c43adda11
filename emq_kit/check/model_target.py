"""The model as a target (``emq_kit.targets.protocol.Target``): a second, independent
model, what ``emq check`` against the machine alone and ``emq driver --model`` (a port's
oracle) drive. It imports no client: a serverless driver starts without redis-py."""

from __future__ import annotations

from typing import Any, Callable, Sequence

from emq_kit.targets.protocol import BatchReply, Capabilities
from emq_model.change import Change
from emq_model.keyspace import check_queue
from emq_model.model import QueueModel
from emq_model.snapshot import Snapshot


def call_then(queue: Any, op: str, args: dict[str, Any], meanwhile: Callable[[], None] | None) -> Any:
    """``op`` on ``queue``, then ``meanwhile`` (whatever the call answered or raised)."""
    try:
        return getattr(queue, op)(**args)
    finally:
        if meanwhile is not None:
            meanwhile()


class ModelTarget:
    """A second, independent model: the machine run against it must always pass, which
    checks the machine itself (and serves ``emq driver --model``)."""

    # every op, the lane ops (lifecycle.md §10) too; no windows: each call answered at once
    capabilities = Capabilities(batches=True, lanes=True, key_faults=True)
    conn = None
    notes: tuple[str, ...] = ()
    stuck = False

    def __init__(self) -> None:
        self.queues: dict[str, QueueModel] = {}

    def reset(self) -> None:
        self.queues.clear()

    def queue(self, name: str) -> QueueModel:
        queue = self.queues.get(name)
        if queue is None:  # a name is checked once, when its queue is first handed out
            check_queue(name)
            queue = self.queues[name] = QueueModel(name)
        return queue

    def snapshot(self, name: str) -> Snapshot:
        return self.queue(name).snapshot()

    def last_change(self, name: str) -> tuple[Snapshot, Change, Snapshot] | None:
        """The change that brought ``name``'s last snapshot up from the one before (INC-3),
        with both; None when it was built whole."""
        return self.queue(name).last_change

    def call(self, name: str, op: str, args: dict[str, Any], meanwhile: Callable[[], None] | None = None) -> Any:
        return call_then(self.queue(name), op, args, meanwhile)

    def dropped(self, name: str) -> tuple[str, ...]:
        return self.queue(name).last_dropped

    def time_calls(self, on: bool) -> bool:
        return False  # no server, no server clock

    def bracket(self) -> tuple[int, int] | None:
        return None

    def batch(self, calls: Sequence[tuple[str, str, dict[str, Any]]], snapshots: bool = True) -> list[BatchReply]:
        raise NotImplementedError("the model takes no windows (capabilities.batch_max is 0)")

    def forget_row(self, name: str, job_id: str) -> None:
        self.queue(name).forget_row(job_id)

    def spoil_key(self, name: str, key: str, kind: str, id: str | None = None, group: str | None = None) -> None:
        self.queue(name).spoil(key, id, group)

    def mend_key(self, name: str, key: str, id: str | None = None, group: str | None = None) -> None:
        self.queue(name).mend(key, id, group)

    def stray_key(self, name: str, key: str, kind: str) -> None:
        self.queue(name).write_stray(key)

    def drop_key(self, name: str, key: str) -> None:
        self.queue(name).drop_stray(key)

    def describe(self) -> dict[str, Any]:
        return {"target": "model"}

    def close(self) -> None:
        self.queues.clear()

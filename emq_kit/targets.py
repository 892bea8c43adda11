"""Targets: what the conformance machine drives beside the model.

A target hands out queues with the model's method names and answers, reads a queue's
snapshot, deletes a row by hand (the one fault the machine injects), and empties itself
between examples. ``describe`` names it in summaries and trace headers.
"""

from __future__ import annotations

from typing import Any, Protocol

from emq_model.keyspace import check_queue, job_key
from emq_model.model import QueueModel
from emq_model.snapshot import Snapshot


class Target(Protocol):
    """The surface the machine needs from an implementation."""

    def reset(self) -> None:
        """Forget every queue: the next example starts from an empty keyspace."""

    def queue(self, name: str) -> Any:
        """A queue object with the model's methods (``ArgError`` for a bad name)."""

    def snapshot(self, name: str) -> Snapshot:
        """The queue's whole keyspace, read in one consistent read."""

    def forget_row(self, name: str, job_id: str) -> None:
        """Delete the job's row by hand, leaving its member an orphan."""

    def describe(self) -> dict[str, Any]:
        """What this target is: kind, URL, script directory and SHA1s, server version."""

    def close(self) -> None:
        """Release connections and servers."""


class ModelTarget:
    """A second, independent model: the machine run against it must always pass, which
    checks the machine itself (and serves ``emq driver --model``)."""

    def __init__(self) -> None:
        self.queues: dict[str, QueueModel] = {}

    def reset(self) -> None:
        self.queues.clear()

    def queue(self, name: str) -> QueueModel:
        check_queue(name)
        if name not in self.queues:
            self.queues[name] = QueueModel(name)
        return self.queues[name]

    def snapshot(self, name: str) -> Snapshot:
        return self.queue(name).snapshot()

    def forget_row(self, name: str, job_id: str) -> None:
        self.queue(name).forget_row(job_id)

    def describe(self) -> dict[str, Any]:
        return {"target": "model"}

    def close(self) -> None:
        self.queues.clear()


class LiveTarget:
    """The live client (``emq_live``) on fakeredis (``url=None``) or a server, running our
    scripts or those of ``scripts`` (a directory with the same calling convention)."""

    def __init__(self, url: str | None = None, scripts: str | None = None) -> None:
        from emq_live.client import connect

        self.url, self.scripts_dir = url, scripts
        self.conn = connect(url, scripts=scripts)
        self.queues: dict[str, Any] = {}

    def reset(self) -> None:
        self.conn.redis.flushall()
        self.conn.fence()
        self.queues.clear()

    def queue(self, name: str) -> Any:
        if name not in self.queues:
            self.queues[name] = self.conn.queue(name)
        return self.queues[name]

    def snapshot(self, name: str) -> Snapshot:
        return self.queue(name).snapshot()

    def forget_row(self, name: str, job_id: str) -> None:
        self.conn.redis.delete(job_key(name, job_id))

    def describe(self) -> dict[str, Any]:
        if self.url is None:
            import fakeredis

            server = f"fakeredis {fakeredis.__version__}"
        else:
            info = self.conn.redis.info("server")
            server = f"{info.get('server_name', 'redis')} {info.get('valkey_version') or info.get('redis_version')}"
        return {
            "target": self.url or "fakeredis",
            "server": server,
            "scripts": self.scripts_dir or "builtin",
            "shas": {name: s.sha for name, s in self.conn.scripts.scripts.items()},
        }

    def close(self) -> None:
        self.conn.close()

"""emq_live — the Lua scripts and the Python client that runs them on Valkey or fakeredis."""

from .client import Batch, Connection, Queue, connect

__all__ = ["Batch", "Connection", "Queue", "connect"]

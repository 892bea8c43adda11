"""emq_live — the Lua scripts and the Python client that runs them on Valkey or fakeredis."""

from .client import Batch, Connection, Queue, connect
from .urls import ConnectError, UrlError, redact

__all__ = ["Batch", "ConnectError", "Connection", "Queue", "UrlError", "connect", "redact"]

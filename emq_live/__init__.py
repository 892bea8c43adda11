"""emq_live — the Lua scripts and the Python client that runs them on Valkey or fakeredis.

The client's names load with their module when first asked for, so ``emq_live.urls``
(what the redaction of every command's output reads) costs no import of redis-py, and a
serverless driver (``emq driver --model``) starts without it."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .client import Batch, Connection, Queue, connect
    from .urls import ConnectError, UrlError, redact

__all__ = ["Batch", "ConnectError", "Connection", "Queue", "UrlError", "connect", "redact"]

_LAZY = {"Batch": "client", "Connection": "client", "Queue": "client", "connect": "client",
         "ConnectError": "urls", "UrlError": "urls", "redact": "urls"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})

"""QueueModel — the oracle (being written; see specs/lifecycle.md)."""

from __future__ import annotations

from typing import NamedTuple


class Claimed(NamedTuple):
    """A claim's answer: the id, its payload and the fencing token (the row's attempts)."""

    id: str
    payload: bytes
    token: int

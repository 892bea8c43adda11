"""The live harness's fixtures (tests/livekit.py): each backend in turn, a fresh one per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.livekit import BACKENDS, LIVE, Backend, make_backend


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    """Each backend in turn: the model alone, then each live one."""
    b = make_backend(request.param, request)
    yield b
    if b.conn is not None:
        b.conn.close()


@pytest.fixture(params=LIVE)
def live(request: pytest.FixtureRequest) -> Iterator[Backend]:
    """Each live backend in turn (fakeredis, Valkey, Redis)."""
    b = make_backend(request.param, request)
    yield b
    b.conn.close()

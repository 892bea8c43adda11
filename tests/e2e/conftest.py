"""Fixtures shared by the end-to-end tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from emq_kit.server import ServerProcess
from emq_model import keyspace, spec


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    """A private Valkey: ACL users are server-wide."""
    with ServerProcess() as s:
        yield s


@pytest.fixture
def admin(server: ServerProcess) -> Iterator[redis.Redis]:
    """An administrator connection to ``server``: every key gone but the wire version, the ACL LOG emptied."""
    with server.client() as r:
        r.flushall()
        r.set(keyspace.VERSION_KEY, spec.WIRE_VERSION)
        r.acl_log_reset()
        yield r

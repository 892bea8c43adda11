"""Shared pytest fixtures. Servers are throwaway processes on free loopback ports
(emq_kit.server), never the default port; a missing binary is an error, not a skip."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from emq_kit.server import ClusterProcess, ServerProcess


@pytest.fixture(scope="session")
def valkey() -> Iterator[ServerProcess]:
    """A valkey-server for the whole session (no persistence)."""
    with ServerProcess("valkey-server") as server:
        yield server


@pytest.fixture(scope="session")
def redis_server() -> Iterator[ServerProcess]:
    """Debian's redis-server 7.0, the second server under test (no persistence)."""
    with ServerProcess("redis-server") as server:
        yield server


@pytest.fixture(scope="session")
def cluster() -> Iterator[ClusterProcess]:
    """A 3-primary Valkey Cluster for the whole session (no replicas, no persistence)."""
    with ClusterProcess(3) as c:
        yield c

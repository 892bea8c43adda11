"""Shared pytest fixtures. Servers are throwaway processes on free loopback ports
(emq_kit.server), never the default port; a missing binary is an error, not a skip.
Hypothesis runs under the ``emq`` profile: no example is timed, on any machine."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

from emq_kit.server import ClusterProcess, ServerProcess

# No timed tests: an example's time is the machine's, not the code's (a loaded desk broke
# the 200 ms deadline and the slow-draws check that CI's own profile already lifts).
# Over the profile Hypothesis loaded (``ci`` where CI is set: derandomized, no database).
settings.register_profile("emq", settings(deadline=None, suppress_health_check=[HealthCheck.too_slow]))
settings.load_profile("emq")


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


@pytest.fixture
def ctrl_c() -> Iterator[None]:
    """Ctrl-C raises KeyboardInterrupt here and in every child started meanwhile, however
    the suite was launched: a suite started with SIGINT ignored (a background job of a
    non-interactive shell, `cmd &`) passes that on to its workers and their children, and
    a test of what Ctrl-C does would then wait for an interrupt that never comes."""
    import signal

    before = signal.signal(signal.SIGINT, signal.default_int_handler)  # a child's exec resets it to SIG_DFL
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)

"""Target URLs: ``redact`` hides userinfo and password parameters; ``connect`` gives a
typed one-line error (``UrlError``, ``ConnectError``) for a URL of the wrong type or
scheme, a dead port, a server that does not speak RESP, and a ``+cluster`` scheme on a
plain node — never a traceback from inside redis-py, never the password."""

from __future__ import annotations

import socket
import threading
from typing import Any, Iterator

import pytest

import emq_live
from emq_live import ConnectError, UrlError, redact


@pytest.mark.parametrize("url, shown", [
    ("redis://user:secret@host:6379/0", "redis://***@host:6379/0"),
    ("redis://:secret@host:6379", "redis://***@host:6379"),
    ("rediss://user:p%40ss@host:6380/1", "rediss://***@host:6380/1"),
    ("redis+cluster://u:s@node:7000", "redis+cluster://***@node:7000"),
    ("unix://:secret@/run/valkey.sock?db=2", "unix://***@/run/valkey.sock?db=2"),
    ("redis://host:6379/0?password=secret&db=1", "redis://host:6379/0?password=***&db=1"),
    ("redis://host:6379/0", "redis://host:6379/0"),
    ("not a url", "not a url"),
    ("", ""),
])
def test_redact_hides_every_secret_and_keeps_the_rest(url: str, shown: str) -> None:
    assert redact(url) == shown
    assert "secret" not in redact(url)


@pytest.mark.parametrize("url", [123, b"redis://localhost:6379/0", ["redis://x"], 1.5])
def test_a_url_of_the_wrong_type_is_a_url_error(url: Any) -> None:
    with pytest.raises(UrlError, match=type(url).__name__):
        emq_live.connect(url)


@pytest.mark.parametrize("url", ["http://user:secret@host/", "localhost:6379", "redis:/host"])
def test_a_url_of_another_scheme_is_a_url_error_without_the_password(url: str) -> None:
    with pytest.raises(UrlError) as refused:
        emq_live.connect(url)
    assert "secret" not in str(refused.value) and "\n" not in str(refused.value)


def dead_port() -> int:
    """A loopback port nobody listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("scheme", ["redis", "valkey", "redis+cluster"])
def test_a_dead_port_is_a_connect_error(scheme: str) -> None:
    url = f"{scheme}://user:secret@127.0.0.1:{dead_port()}/0".replace("/0", "" if "cluster" in scheme else "/0")
    with pytest.raises(ConnectError) as refused:
        emq_live.connect(url)
    text = str(refused.value)
    assert "***@127.0.0.1" in text and "secret" not in text and "\n" not in text


@pytest.fixture
def not_redis() -> Iterator[int]:
    """A TCP server that answers every connection like an HTTP server."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.recv(1024)
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")

    threading.Thread(target=serve, daemon=True).start()
    yield server.getsockname()[1]
    server.close()


def test_a_server_that_is_not_redis_is_a_connect_error(not_redis: int) -> None:
    with pytest.raises(ConnectError, match=r"redis://127\.0\.0\.1:\d+/0: Protocol error"):
        emq_live.connect(f"redis://127.0.0.1:{not_redis}/0")


def test_a_cluster_scheme_on_a_plain_node_is_a_connect_error(valkey: Any) -> None:
    host_port = valkey.url.split("://", 1)[1]
    with pytest.raises(ConnectError) as refused:
        emq_live.connect(f"redis+cluster://{host_port}")
    assert "\n" not in str(refused.value)


def test_a_connect_error_is_a_connection_error_and_a_url_error_a_value_error() -> None:
    """Callers that catch the builtin families keep working."""
    assert issubclass(ConnectError, ConnectionError) and issubclass(UrlError, ValueError)

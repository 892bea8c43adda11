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
    ("redis://u:secret@[::1:6379?password=secret&db=1", "redis://***@[::1:6379?password=***&db=1"),  # unclosed IPv6
    ("redis://[::1:6379?db=1&password=secret", "redis://[::1:6379?db=1&password=***"),
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


UNREADABLE = [  # a URL the client cannot read, and what its one line says (docs/server.md "Connecting")
    ("redis://:secret@127.0.0.1:6379?bogus=1", "unknown query option 'bogus': a redis:// URL takes db, username"),
    ("redis://:secret@127.0.0.1:6379/0?protocol=3", "unknown query option 'protocol'"),
    ("redis://:secret@127.0.0.1:6379?decode_responses=false", "unknown query option 'decode_responses'"),
    ("unix://:secret@/run/v.sock?socket_keepalive=true", "unknown query option 'socket_keepalive'"),
    ("redis://:secret@127.0.0.1:6379?ssl_cert_reqs=none", "unknown query option 'ssl_cert_reqs'"),
    ("redis+cluster://:secret@127.0.0.1:7000?health_check_interval=5", "unknown query option 'health_check_interval'"),
    ("redis://:secret@127.0.0.1:6379?db=1&db=2", "the query option 'db' is given 2 times"),
    ("redis://:secret@127.0.0.1:6379/abc", "the path '/abc' names no database: it is / or /N"),
    ("redis://:secret@127.0.0.1:6379/-1", "the path '/-1' names no database"),
    ("redis://:secret@127.0.0.1:6379/1/2", "the path '/1/2' names no database"),
    ("redis://:secret@127.0.0.1:6379?db=abc", "?db='abc' names no database"),
    ("redis://:secret@127.0.0.1:6379?db=-1", "?db='-1' names no database"),
    ("redis://:secret@127.0.0.1:6379/1?db=2", "two databases: the path '/1' and ?db=2"),
    ("redis+cluster://:secret@127.0.0.1:7000/3", "a cluster has database 0 only, not 3"),
    ("redis://:secret@127.0.0.1:notaport", "Port could not be cast to integer value as 'notaport'"),
    ("redis://:secret@127.0.0.1:70000", "Port out of range"),
    ("redis://:secret@[::1:6379", "Invalid IPv6 URL"),
    ("redis://:secret@127.0.0.1:6379?socket_timeout=abc", "Invalid value for 'socket_timeout'"),
]


@pytest.mark.parametrize("url, says", UNREADABLE)
def test_a_url_the_client_cannot_read_is_one_url_error_naming_it_once(url: str, says: str) -> None:
    """Refused before any client is made (a dead port: nothing would answer anyway), with
    one line that names the URL once, its password masked."""
    with pytest.raises(UrlError) as refused:
        emq_live.connect(url)
    text = str(refused.value)
    assert says in text and "secret" not in text and "\n" not in text
    assert text.startswith(redact(url) + ": ") and text.count(redact(url)) == 1, text


@pytest.mark.parametrize("url", [
    "redis://h:1", "redis://h:1/", "redis://h:1/15", "redis://h:1/007", "redis://h:1/2?db=2", "redis://h:1?db=3",
    "valkey://u:p@h:1/0?socket_timeout=2.5&socket_connect_timeout=1&socket_keepalive=true&client_name=x"
    "&health_check_interval=10&username=u&password=p",
    "rediss://h:1?ssl_cert_reqs=none&ssl_ca_certs=/ca.pem&ssl_check_hostname=false",
    "unix:///run/valkey.sock?db=3", "redis+cluster://h:1", "redis+cluster://h:1/0", "valkeys+cluster://h:1?ssl_ca_path=/ca",
])
def test_a_url_the_client_reads_is_accepted_and_each_option_is_one_its_client_takes(url: str) -> None:
    from emq_live.client import _client
    from emq_live.urls import check_url, plain

    assert check_url(url) == url
    if not plain(url)[1]:  # a cluster client connects at once; a plain one makes its connection lazily
        client = _client(url)
        client.connection_pool.make_connection()  # redis-py takes every option given (no TypeError)
        client.close()


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

"""Target URLs: which schemes select which client, how a URL is shown without its
secrets, and the errors of reaching one (``connect``'s typed failures).

A URL may carry a password (``redis://user:secret@host:6379/0``, or ``?password=``):
``redact`` is the one way a URL is printed or written (summaries, traces, errors).

``check_url`` is the one place a URL is read before any client is made (docs/server.md
"Connecting"): its scheme, its port, its database (the path ``/N`` or ``?db=N``, N a
non-negative integer; 0 alone on a cluster) and its query options (those of
``options``, each value as redis-py reads it) — a URL refused there never connects.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

CLUSTER_SCHEMES = ("redis+cluster://", "rediss+cluster://", "valkey+cluster://", "valkeys+cluster://")
"""URL schemes that select cluster mode (never guessed from the server)."""

PLAIN_SCHEMES = ("redis://", "rediss://", "unix://", "valkey://", "valkeys://")
"""URL schemes of one server."""

_SECRET_PARAMS = ("password", "username")
MASK = "***"

OPTIONS = ("db", "username", "password", "client_name", "socket_timeout", "socket_connect_timeout",
           "socket_keepalive", "health_check_interval")
"""The query options a server URL may carry (redis-py's names and readings); ``options``
says which of them a scheme takes. Others are refused, not handed to redis-py, whose
client would fail on a name it does not know (``?bogus=1``) or obey one that changes
what the kit relies on (``protocol``: every connection speaks RESP2; ``decode_responses``;
``retry_on_error``: a call is never resent)."""
TLS_OPTIONS = ("ssl_cert_reqs", "ssl_ca_certs", "ssl_ca_path", "ssl_certfile", "ssl_keyfile", "ssl_check_hostname")
"""The query options a TLS URL (``rediss://``, ``valkeys://``, and their ``+cluster``) takes besides."""
_DB_PATH = re.compile(r"/(?:[0-9]+)?")
_SECRET_VALUE = re.compile(r"([?&](?:password|username)=)[^&#]*")


class ConnectError(ConnectionError):
    """``connect`` could not open a queue connection: the server is unreachable, is not
    a Redis/Valkey server, or refused the handshake. One line, the URL redacted."""


class UrlError(ConnectError, ValueError):
    """The URL is not a ``str`` or names no scheme ``connect`` serves."""


def redact(url: str) -> str:
    """``url`` with its userinfo replaced by ``***`` (``redis://***@host:6379/0``) and
    the values of ``password``/``username`` query parameters too. A string that is not
    a URL comes back unchanged; this never raises."""
    try:
        parts = urlsplit(url)
    except ValueError:  # not a URL urlsplit reads (an unclosed IPv6 bracket): masked by its text
        head, at, rest = url.rpartition("@")
        shown = f"{head.split('://', 1)[0]}://{MASK}@{rest}" if at and "://" in head else MASK if at else url
        return _SECRET_VALUE.sub(rf"\g<1>{MASK}", shown)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = MASK + "@" + netloc.rsplit("@", 1)[1]
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(k in _SECRET_PARAMS for k, _ in pairs):
            query = urlencode([(k, MASK if k in _SECRET_PARAMS else v) for k, v in pairs], safe="*")
    if netloc == parts.netloc and query == parts.query:
        return url
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def options(url: str) -> tuple[str, ...]:
    """The query options a URL of ``url``'s scheme takes: ``OPTIONS``, the TLS ones on a
    TLS scheme, but no ``socket_keepalive`` on a Unix socket and no
    ``health_check_interval`` on a cluster (redis-py's clients take no such argument there)."""
    cluster = url.startswith(CLUSTER_SCHEMES)
    tls = url.startswith(("rediss", "valkeys"))
    return tuple(o for o in OPTIONS + (TLS_OPTIONS if tls else ())
                 if not (o == "socket_keepalive" and url.startswith("unix://"))
                 and not (o == "health_check_interval" and cluster))


def check_url(url: object) -> str:
    """``url`` itself when it is a ``str`` the client can read (docs/server.md
    "Connecting"): a scheme ``connect`` serves, a port, a database path ``/N`` (N a
    non-negative integer; the path of ``unix://`` is the socket's), only query options
    of ``options``, each given once with a value redis-py reads. Else ``UrlError``, one
    line that names the URL once, redacted. Nothing is connected."""
    if not isinstance(url, str):
        raise UrlError(f"a server URL is a str such as 'redis://host:6379/0', got {type(url).__name__}")
    if not url.startswith(PLAIN_SCHEMES + CLUSTER_SCHEMES):
        schemes = ", ".join(s[:-3] for s in PLAIN_SCHEMES + CLUSTER_SCHEMES)
        raise UrlError(f"{redact(url)}: the scheme must be one of {schemes}")
    problem = _problem(url)
    if problem:
        raise UrlError(f"{redact(url)}: {redact(problem)}")
    return url


def _problem(url: str) -> str | None:
    """What the client could not read in ``url`` (of a served scheme), or None."""
    from redis.connection import parse_url

    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  (a port that is no number raises here)
    except ValueError as exc:
        return f"not a URL the client can read: {exc}"
    names = [name for name, _ in parse_qsl(parts.query, keep_blank_values=True)]
    takes = options(url)
    for name in names:
        if name not in takes:
            return f"unknown query option {name!r}: a {parts.scheme}:// URL takes {', '.join(takes)}"
        if names.count(name) > 1:
            return f"the query option {name!r} is given {names.count(name)} times"
    db = dict(parse_qsl(parts.query, keep_blank_values=True)).get("db")
    if db is not None and not re.fullmatch("[0-9]+", db):
        return f"?db={db!r} names no database: ?db=N, N a non-negative integer"
    database = None if db is None else int(db)
    if not url.startswith("unix://"):  # a Unix socket's path is the socket's
        if not _DB_PATH.fullmatch(parts.path or "/"):
            return f"the path {parts.path!r} names no database: it is / or /N, N a non-negative integer"
        path = None if parts.path.strip("/") == "" else int(parts.path.strip("/"))
        if path is not None and database is not None and path != database:
            return f"two databases: the path {parts.path!r} and ?db={db}"
        database = path if database is None else database
    if url.startswith(CLUSTER_SCHEMES) and database:
        return f"a cluster has database 0 only, not {database}"
    try:
        parse_url(plain(url)[0])  # each value as redis-py reads it
    except ValueError as exc:
        return str(exc)
    return None


def plain(url: str) -> tuple[str, bool]:
    """redis-py's URL for ``url`` (``valkey`` read as ``redis``, ``+cluster`` dropped)
    and whether it selects cluster mode."""
    cluster = url.startswith(CLUSTER_SCHEMES)
    if cluster:
        url = url.replace("+cluster", "", 1)
    for scheme, to in (("valkey://", "redis://"), ("valkeys://", "rediss://")):
        if url.startswith(scheme):
            url = to + url[len(scheme):]
    return url, cluster

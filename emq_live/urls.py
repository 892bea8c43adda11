"""Target URLs: which schemes select which client, how a URL is shown without its
secrets, and the errors of reaching one (``connect``'s typed failures).

A URL may carry a password (``redis://user:secret@host:6379/0``, or ``?password=``):
``redact`` is the one way a URL is printed or written (summaries, traces, errors).
"""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

CLUSTER_SCHEMES = ("redis+cluster://", "rediss+cluster://", "valkey+cluster://", "valkeys+cluster://")
"""URL schemes that select cluster mode (never guessed from the server)."""

PLAIN_SCHEMES = ("redis://", "rediss://", "unix://", "valkey://", "valkeys://")
"""URL schemes of one server."""

_SECRET_PARAMS = ("password", "username")
MASK = "***"


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
    except ValueError:
        return MASK if "@" in url else url
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


def check_url(url: object) -> str:
    """``url`` itself when it is a ``str`` with a scheme ``connect`` serves; else
    ``UrlError`` (the URL redacted in the message)."""
    if not isinstance(url, str):
        raise UrlError(f"a server URL is a str such as 'redis://host:6379/0', got {type(url).__name__}")
    if not url.startswith(PLAIN_SCHEMES + CLUSTER_SCHEMES):
        schemes = ", ".join(s[:-3] for s in PLAIN_SCHEMES + CLUSTER_SCHEMES)
        raise UrlError(f"{redact(url)}: the scheme must be one of {schemes}")
    return url


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

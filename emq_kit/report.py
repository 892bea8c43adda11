"""The one report every command writes (issue 17, part 2): a versioned JSON document,
``specs/schemas/report.json``. A function per command turns that command's result into
the document; ``validate`` holds a document against the schema."""

from __future__ import annotations


def redact(url: str) -> str:
    """``url`` with the password (if any) replaced by ``***``."""
    head, sep, rest = url.partition("://")
    if not sep or "@" not in rest.split("/", 1)[0]:
        return url
    auth, _, host = rest.partition("@")
    user = auth.split(":", 1)[0]
    return f"{head}://{user}:***@{host}" if ":" in auth else f"{head}://***@{host}"


def printable(text: str) -> str:
    """``text`` (an id or key read as UTF-8 with surrogate escapes) as printable UTF-8:
    a byte that is not UTF-8 shows as ``\\xNN``."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")

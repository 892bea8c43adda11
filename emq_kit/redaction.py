"""The one way the kit's output leaves the process: nothing it shows carries a secret
(SEC-1, specs/safety.md).

Every line on stdout and stderr passes ``scrub`` while a command runs (``shown`` wraps
both streams around ``emq_kit.cli.main``, which ``pytest --emq`` runs too), and every
file the kit writes for a reader — reports, traces, HTML pages, regression tests,
expectations, a soak's history — is written by ``write_text`` or ``open_text``. The
rest of the kit never opens a file for writing (tests/e2e/test_harm.py reads the source to
hold it there), so a new output cannot forget the redaction.

``scrub`` takes out of any text:

- the userinfo of every URL (``redis://user:secret@host`` -> ``redis://***@host``) and
  the values of its ``password``/``username`` parameters, as ``emq_live.urls.redact``
  does for one URL;
- every secret ``remember`` was shown (the passwords of the URLs on the command line
  and in ``EMQ_URL``), wherever it stands — percent-decoded, JSON- or HTML-escaped too
  — when it is at least ``SHORTEST`` characters long (a shorter one would mask common
  words; it is masked where it stands in a URL).
"""

from __future__ import annotations

import contextlib
import html
import io
import json
import os
import re
import secrets
import sys
from pathlib import Path
from typing import IO, Iterable, Iterator
from urllib.parse import unquote

from emq_live.urls import MASK

SHORTEST = 4
"""A remembered secret shorter than this is masked only inside URLs."""

_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^\s/?#'\"<>]*)@")
"""A URL's scheme and userinfo, up to the last ``@`` of its authority."""
_PARAM = re.compile(r"(?P<key>[?&;](?:password|username)=)(?P<value>[^&\s'\"#<>]*)")
"""A ``password=``/``username=`` query parameter."""

_secrets: set[str] = set()
"""Every form of every remembered secret, longest first when used."""


def secrets_in(text: str) -> list[str]:
    """The secrets of the URLs in ``text``: each userinfo's password (the part after
    its first ``:``, or the whole userinfo when it has none: a password-only URL), and
    each ``password=`` parameter's value."""
    found = []
    for m in _USERINFO.finditer(text):
        user, colon, password = m.group("userinfo").partition(":")
        found.append(password if colon else user)
    found += [m.group("value") for m in _PARAM.finditer(text) if m.group("key")[1:].startswith("password")]
    return [s for s in found if s]


def remember(texts: Iterable[str | None]) -> None:
    """Note the secrets of the URLs in ``texts`` (argv, ``EMQ_URL``): ``scrub`` masks
    them from now on, for the life of the process (forked children included)."""
    for text in texts:
        for secret in secrets_in(text or ""):
            for plain in {secret, unquote(secret)}:
                for form in (plain, json.dumps(plain)[1:-1], json.dumps(plain, ensure_ascii=False)[1:-1],
                             html.escape(plain, quote=True)):
                    if len(form) >= SHORTEST:
                        _secrets.add(form)


def _masked(m: re.Match[str]) -> str:
    """A parameter's value masked; one masked already keeps the ``:`` a line puts after
    its URL (``URL?password=***: reason``), which the value's pattern takes in."""
    value = m.group("value")
    return m.group("key") + MASK + (":" if value == MASK + ":" else "")


def scrub(text: str) -> str:
    """``text`` with every URL's userinfo and password parameter masked, and every
    remembered secret; unchanged (the same object) when there is nothing to mask."""
    if "://" in text:
        text = _USERINFO.sub(lambda m: m.group("scheme") + MASK + "@", text)
    if "password=" in text or "username=" in text:
        text = _PARAM.sub(_masked, text)
    for secret in sorted(_secrets, key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, MASK)
    return text


def write_text(path: str | Path, text: str) -> Path:
    """Write ``text``, scrubbed, to ``path`` as UTF-8 (its directory made); the path. A
    file of its own (absent, or a regular file) is whole or not there: written beside it
    and renamed over it, so a run ended while writing leaves no half of a report (INT-3).
    Anything else the path names is written through as it is, never replaced (OWN-1): a
    symbolic link's file, a pipe, a terminal, ``/dev/stdout``."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.is_symlink() or (out.exists() and not out.is_file()):
        with open(out, "w", encoding="utf-8") as f:
            f.write(scrub(text))
        return out
    temporary = out.with_name(f".{out.name}.{secrets.token_hex(4)}.part")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the umask's mode, as open() gives
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(scrub(text))
        os.replace(temporary, out)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    return out


class ScrubbedStream(io.TextIOBase):
    """A text stream that scrubs what it passes on: whole lines (a secret is never cut
    in two by a write boundary), and what is pending when flushed (a live line redrawn
    with ``\\r``)."""

    def __init__(self, inner: IO[str]) -> None:
        super().__init__()
        self.inner = inner
        self.pending = ""

    def write(self, text: str) -> int:
        self.pending += text
        cut = max(self.pending.rfind("\n"), self.pending.rfind("\r"))
        if cut >= 0:
            done, self.pending = self.pending[:cut + 1], self.pending[cut + 1:]
            self.inner.write(scrub(done))
        return len(text)

    def flush(self) -> None:
        if self.pending:
            done, self.pending = self.pending, ""
            self.inner.write(scrub(done))
        self.inner.flush()

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return self.inner.isatty()

    def fileno(self) -> int:
        return self.inner.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.inner, "encoding", "utf-8")

    def close(self) -> None:  # the stream under it is the process's: left open
        with contextlib.suppress(Exception):  # a reader gone: what is pending is lost either way
            self.flush()
        super().close()


def channel(stream: IO[str]) -> IO[str]:
    """The stream under ``stream``'s scrubbing: a protocol channel (``emq driver``'s
    stdout) carries data, which masking would change, and no output of ours."""
    return stream.inner if isinstance(stream, ScrubbedStream) else stream


@contextlib.contextmanager
def open_text(path: str | Path) -> Iterator[ScrubbedStream]:
    """A file opened for writing text, line-buffered, every line scrubbed."""
    with open(path, "w", encoding="utf-8", buffering=1) as raw:
        stream = ScrubbedStream(raw)
        try:
            yield stream
        finally:
            stream.flush()


@contextlib.contextmanager
def shown(argv: Iterable[str]) -> Iterator[None]:
    """While the body runs, stdout and stderr scrubbed, the secrets of ``argv`` and
    ``EMQ_URL`` remembered. Nested uses wrap once."""
    remember([*argv, os.environ.get("EMQ_URL")])
    saved = sys.stdout, sys.stderr
    if not isinstance(sys.stdout, ScrubbedStream):
        sys.stdout = ScrubbedStream(sys.stdout)
    if not isinstance(sys.stderr, ScrubbedStream):
        sys.stderr = ScrubbedStream(sys.stderr)
    try:
        yield
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # a closed pipe (`emq check | head`) is the reader's
                stream.flush()
        sys.stdout, sys.stderr = saved

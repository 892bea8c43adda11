"""A real headless Chromium (Debian's ``chromium``) for the HTML report's tests: render a
page to a screenshot and to its DOM, and collect every console message.

Console messages are read from Chromium's own log (``--enable-logging=stderr --v=0``):
each is one line with ``:CONSOLE`` in it — a script's ``console.*`` and every blocked
load (the pages carry a Content-Security-Policy of ``default-src 'none'``, so a page
that reached for the network would log its refusal). A missing ``chromium`` is an
error, not a skip (scripts/install-valkey.sh installs it).
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import zlib
from dataclasses import dataclass
from pathlib import Path

WINDOW = (1400, 1800)


@dataclass
class Rendered:
    dom: str
    screenshot: Path
    console: list[str]


def chromium() -> str:
    found = shutil.which("chromium")
    if found is None:
        raise RuntimeError("chromium is not installed: run scripts/install-valkey.sh")
    return found


def _run(page: Path, profile: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [chromium(), "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run", "--disable-extensions",
         f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0",
         f"--window-size={WINDOW[0]},{WINDOW[1]}", *extra, page.resolve().as_uri()],
        capture_output=True, text=True, timeout=120, check=True)


def render(page: Path, work: Path) -> Rendered:
    """Screenshot ``page`` and dump its DOM, in one run of Chromium on a fresh profile
    under ``work``."""
    shot = work / (page.stem + ".png")
    done = _run(page, work / "profile", f"--screenshot={shot}", "--dump-dom")
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line]
    return Rendered(done.stdout, shot, console)


def png_facts(path: Path) -> tuple[int, int, int]:
    """(width, height, distinct byte values of the decoded pixel data) of a PNG: a
    blank or near-blank screenshot has very few."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    idat, pos = b"", 8
    while pos < len(data):
        size, kind = struct.unpack(">I4s", data[pos : pos + 8])
        if kind == b"IDAT":
            idat += data[pos + 8 : pos + 8 + size]
        pos += 12 + size
    return width, height, len(set(zlib.decompress(idat)))

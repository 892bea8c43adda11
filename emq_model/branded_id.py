"""Branded ids: 3 uppercase letters (the namespace) + 11 Base62 characters over a
63-bit snowflake (specs/lifecycle.md, "Branded ids").

For one width, byte order equals numeric order because the alphabet is in ASCII order.
"""

from __future__ import annotations

import re
import threading
import time
from typing import Callable

from .contract import load
from .errors import KindError

ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
BODY_LEN = 11
ID_LEN = 3 + BODY_LEN
MAX_VALUE: int = load()["limits"]["snowflake_max"]
EPOCH_MS = 1704067200000
JOB = "JOB"

NODE_BITS = 10
SEQ_BITS = 12
MAX_NODE = (1 << NODE_BITS) - 1
MAX_SEQ = (1 << SEQ_BITS) - 1
_SHAPE = re.compile(r"[A-Z]{3}[0-9A-Za-z]{11}")
_NS = re.compile(r"[A-Z]{3}")
_DIGIT = {c: i for i, c in enumerate(ALPHABET)}
_MASK64 = (1 << 64) - 1


def encode(ns: str, n: int) -> str:
    """The branded id of snowflake ``n`` in namespace ``ns``; ``KindError`` if either is out of shape."""
    if not isinstance(ns, str) or not _NS.fullmatch(ns):
        raise KindError(f"namespace must be 3 uppercase ASCII letters, got {ns!r}")
    if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_VALUE:
        raise KindError(f"snowflake must be an integer in [0, 2^63-1], got {n!r}")
    body = []
    for _ in range(BODY_LEN):
        n, r = divmod(n, 62)
        body.append(ALPHABET[r])
    return ns + "".join(reversed(body))


_BODY_MAX = encode(JOB, MAX_VALUE)[3:]


def parse(branded: object) -> tuple[str, int]:
    """``(namespace, snowflake)`` of a well-formed id; ``KindError`` for anything else."""
    if not isinstance(branded, str) or not _SHAPE.fullmatch(branded):
        raise KindError(f"not a branded id: {branded!r}")
    n = 0
    for c in branded[3:]:
        n = n * 62 + _DIGIT[c]
    if n > MAX_VALUE:
        raise KindError(f"branded id overflows 2^63-1: {branded!r}")
    return branded[:3], n


def _well_formed(branded: object) -> bool:
    """Whether ``branded`` parses, without computing its value: a fixed-width body over an
    alphabet in ASCII order compares like its value (ID-6), so the range check is one
    string comparison. Every call of the API and every invariant check gates ids here."""
    return isinstance(branded, str) and _SHAPE.fullmatch(branded) is not None and branded[3:] <= _BODY_MAX


def is_valid(branded: object, ns: str | None = None) -> bool:
    """Whether ``branded`` parses (and, given ``ns``, is in that namespace)."""
    return _well_formed(branded) and (ns is None or branded[:3] == ns)  # type: ignore[index]


def require(branded: object, ns: str = JOB) -> str:
    """``branded`` itself if it is a well-formed id of namespace ``ns``; ``KindError`` otherwise."""
    if not _well_formed(branded):
        parse(branded)  # raises the refusal that says what is wrong
    if branded[:3] != ns:  # type: ignore[index]
        raise KindError(f"expected a {ns} id, got {branded!r}")
    return branded  # type: ignore[return-value]


def hash32(n: int) -> int:
    """Placement hash: the first half of MurmurHash3's fmix64, truncated to 32 bits."""
    h = n & _MASK64
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & _MASK64
    h ^= h >> 33
    return h & 0xFFFFFFFF


def unix_ms(branded: str) -> int:
    """The Unix time in ms at which the id's snowflake was minted."""
    _, n = parse(branded)
    return (n >> (NODE_BITS + SEQ_BITS)) + EPOCH_MS


def snowflake(ms: int, node: int = 0, seq: int = 0) -> int:
    """The snowflake ``(ms - epoch) << 22 | node << 12 | seq``."""
    return ((ms - EPOCH_MS) << (NODE_BITS + SEQ_BITS)) | (node << SEQ_BITS) | seq


class Minter:
    """Strictly monotonic ids for one node: the next value is ``max(now_part, last + 1)``
    on the (ms, seq) logical clock, so a full sequence carries into the timestamp (never
    into the node bits) and a clock that steps back keeps minting from the logical clock.
    Thread-safe."""

    def __init__(self, ns: str = JOB, node: int = 0, clock: Callable[[], int] | None = None) -> None:
        encode(ns, 0)  # gate the namespace now, not at the first mint
        if isinstance(node, bool) or not isinstance(node, int) or not 0 <= node <= MAX_NODE:
            raise KindError(f"node must be an integer in [0, {MAX_NODE}], got {node!r}")
        self.ns = ns
        self.node = node
        self._clock = clock or (lambda: time.time_ns() // 1_000_000)
        self._last = (-1, MAX_SEQ)
        self._lock = threading.Lock()

    def next_value(self) -> int:
        """The next snowflake value of this minter."""
        with self._lock:
            ms = max(self._clock(), EPOCH_MS)
            last_ms, last_seq = self._last
            if ms > last_ms:
                ms, seq = ms, 0
            elif last_seq < MAX_SEQ:
                ms, seq = last_ms, last_seq + 1
            else:  # the sequence is full: carry into the timestamp
                ms, seq = last_ms + 1, 0
            value = snowflake(ms, self.node, seq)
            if value > MAX_VALUE:
                raise KindError("minter exhausted the 63-bit range")
            self._last = (ms, seq)
            return value

    def mint(self) -> str:
        """The next id of this minter."""
        return encode(self.ns, self.next_value())

"""The keyspace grammar: ``emq:{q}:<kind>`` for a queue's keys, ``emq:{q}:job:<id>`` for
rows. Inputs are gated before a key is composed, so a malformed id or a queue name that
would move the hash tag never reaches the wire (specs/lifecycle.md, "Keyspace")."""

from __future__ import annotations

from .branded_id import require
from .errors import ArgError
from .spec import LIMITS, LOCATIONS, SPEC, check_value

KINDS: tuple[str, ...] = (*LOCATIONS, *(SPEC["keys"][c].removeprefix("emq:{q}:") for c in ("completed", "failed")))
"""The fixed keys of one queue, in the order every script declares them as KEYS: the four
locations (``pending``, ``active``, ``schedule``, ``dead``), then the counters
(``metrics:completed``, ``metrics:failed``)."""

LANE_KINDS: tuple[str, ...] = ("ring", "paused", "glimit", "gactive", "gweight")
"""The fixed lane keys of one queue (lifecycle.md §10, LANE-1); derived from the prefix in
the scripts, like row keys, never passed as KEYS."""

LANE_HEAD, LANE_TAIL = SPEC["keys"]["lane"].removeprefix("emq:{q}:").split("<group>")
"""A lane's key is ``emq:{q}:`` + ``g:`` + group + ``:pending``."""

KEY_TYPES: dict[str, str] = SPEC["key_types"]
"""The type (as ``TYPE`` names it) of each key of the grammar, by its name in
transitions.json's ``keys`` (CC-8)."""

VERSION_KEY = SPEC["keys"]["version"]
QUEUE_MAX_BYTES: int = LIMITS["queue_max_bytes"]


def check_queue(queue: object) -> str:
    """``queue`` itself if it may name a queue; ``ArgError`` if it is not a str, is empty,
    longer than ``queue_max_bytes`` in UTF-8, or holds ``{``, ``}``, whitespace or a
    control character."""
    if not isinstance(queue, str):
        raise ArgError(f"queue name must be a str, got {type(queue).__name__}")
    try:
        size = len(queue.encode("utf-8"))
    except UnicodeEncodeError:
        raise ArgError(f"queue name is not encodable as UTF-8: {queue!r}") from None
    if size == 0:
        raise ArgError("queue name is empty")
    if size > QUEUE_MAX_BYTES:
        raise ArgError(f"queue name is {size} bytes, more than {QUEUE_MAX_BYTES}")
    for ch in queue:
        if ch in "{}" or ch.isspace() or not ch.isprintable():
            raise ArgError(f"queue name may not hold {ch!r}: {queue!r}")
    return queue


def prefix(queue: str) -> str:
    """``emq:{queue}:``, the prefix of every key of the queue."""
    return "emq:{" + check_queue(queue) + "}:"


def glob(text: str) -> str:
    """``text`` as a SCAN/KEYS glob matching itself only: the glob's special characters
    (``* ? [ ] \\``) escaped. A queue name may hold any of them (KS-3)."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def pattern(queue: str) -> str:
    """The SCAN/KEYS glob matching every key of the queue and nothing else: the prefix,
    escaped (``glob``), then ``*``."""
    return glob(prefix(queue)) + "*"


def queue_key(queue: str, kind: str) -> str:
    """``emq:{queue}:<kind>`` for one of ``KINDS``."""
    if kind not in KINDS:
        raise ArgError(f"unknown key kind {kind!r}; one of {KINDS}")
    return prefix(queue) + kind


def queue_keys(queue: str) -> list[str]:
    """The queue's fixed keys in script KEYS order."""
    p = prefix(queue)
    return [p + kind for kind in KINDS]


def lane_keys(queue: str) -> dict[str, str]:
    """The queue's fixed lane keys by kind (``ring``, ``paused``, ``glimit``...)."""
    p = prefix(queue)
    return {kind: p + kind for kind in LANE_KINDS}


def lane_key(queue: str, group: str) -> str:
    """``emq:{queue}:g:<group>:pending`` for a well-formed group (``ArgError`` otherwise)."""
    return prefix(queue) + LANE_HEAD + check_value("group", "group", group) + LANE_TAIL


def group_of(queue: str, key: str) -> str | None:
    """The group whose lane ``key`` is, or ``None`` when ``key`` is not a lane key of
    ``queue`` with a well-formed group."""
    head, tail = prefix(queue) + LANE_HEAD, LANE_TAIL
    if not (key.startswith(head) and key.endswith(tail)) or len(key) < len(head) + len(tail):
        return None
    group = key[len(head) : len(key) - len(tail)]
    try:
        return check_value("group", "group", group)
    except ArgError:
        return None


def outside(queue: str, key: str) -> bool:
    """Whether ``key`` is under ``queue``'s prefix yet names nothing of the grammar: no
    fixed key, no row (``job:`` and a suffix, any suffix), no lane of a well-formed group.
    A snapshot reports such a key as stray, whatever its type (lifecycle.md §7)."""
    head = prefix(queue)
    if not key.startswith(head):
        return False
    rest = key[len(head):]
    if rest in KINDS or rest in LANE_KINDS or (rest.startswith("job:") and rest != "job:"):
        return False
    return group_of(queue, key) is None


def job_key(queue: str, branded: str) -> str:
    """``emq:{queue}:job:<id>`` for a well-formed JOB id (``KindError`` otherwise)."""
    return prefix(queue) + "job:" + require(branded)


def key_of(queue: str, name: str, id: str | None = None, group: str | None = None) -> str:
    """The key ``name`` of transitions.json's ``keys`` names for ``queue``: a fixed key
    (``pending``, ``completed``, ``ring``...), the row of ``id``, the lane of ``group``."""
    if name == "row":
        return job_key(queue, str(id))
    if name == "lane":
        return lane_key(queue, str(group))
    if name in LANE_KINDS:
        return prefix(queue) + name
    kind = next((k for k in KINDS if k.split(":")[-1] == name), None)
    if kind is None:
        raise ArgError(f"unknown key {name!r}; one of {sorted(KEY_TYPES)}")
    return prefix(queue) + kind


def _crc16(data: bytes) -> int:
    """CRC16-XMODEM (poly 0x1021, init 0), the cluster's key hash."""
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
        crc &= 0xFFFF
    return crc


def hash_tag(key: bytes) -> bytes:
    """The part of ``key`` the cluster hashes: the first ``{…}`` with a non-empty inside,
    else the whole key."""
    start = key.find(b"{")
    if start >= 0:
        end = key.find(b"}", start + 1)
        if end > start + 1:
            return key[start + 1 : end]
    return key


def slot(key: str | bytes) -> int:
    """The cluster slot of ``key``: CRC16 of its hash tag mod 16384."""
    raw = key.encode("utf-8") if isinstance(key, str) else key
    return _crc16(hash_tag(raw)) % 16384

"""The values of a trace's steps (TR-4): an argument or an answer as JSON, and back.
Bytes are ``{"b64": ...}``, as the driver protocol carries them (version 1 traces wrote
``$bytes``, still read); the other values JSON cannot carry are tagged objects with one
``$`` key: ``$float`` (non-finite), ``$claimed``, ``$lane_claimed``, ``$refused`` (a
refusal code), ``$crash`` (what the target raised), ``$tuple``."""

from __future__ import annotations

import base64
import math
from typing import Any

from emq_kit.check.step import Crash
from emq_kit.ports.protocol import bytes_json, is_bytes_json, json_bytes
from emq_model.errors import EmqError, from_code
from emq_model.lanes import LaneClaimed
from emq_model.model import Claimed


def encode(value: Any) -> Any:
    """A JSON-able form of an argument or an answer."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"$float": repr(value)}
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes_json(value)
    if isinstance(value, Claimed):
        return {"$claimed": [value.id, encode(value.payload), value.token]}
    if isinstance(value, LaneClaimed):
        return {"$lane_claimed": [value.id, encode(value.payload), value.token, value.group]}
    if isinstance(value, EmqError):
        return {"$refused": value.code}
    if isinstance(value, Crash):
        return {"$crash": repr(value)}
    if isinstance(value, tuple):
        return {"$tuple": [encode(v) for v in value]}
    if isinstance(value, list):
        return [encode(v) for v in value]
    if isinstance(value, dict):
        return {str(k): encode(v) for k, v in value.items()}
    return {"$crash": f"unencodable {type(value).__name__}: {value!r}"}


def decode(value: Any) -> Any:
    """The inverse of ``encode`` (a crash decodes to its description)."""
    if isinstance(value, list):
        return [decode(v) for v in value]
    if not isinstance(value, dict):
        return value
    if is_bytes_json(value):
        return json_bytes(value)
    if len(value) == 1:
        (tag, inner), = value.items()
        if tag == "$bytes":  # version 1 traces
            return base64.b64decode(inner)
        if tag == "$float":
            return float(inner)
        if tag == "$claimed":
            return Claimed(inner[0], decode(inner[1]), inner[2])
        if tag == "$lane_claimed":
            return LaneClaimed(inner[0], decode(inner[1]), inner[2], inner[3])
        if tag == "$refused":
            return from_code(inner)
        if tag == "$crash":
            return Crash(RuntimeError(inner))
        if tag == "$tuple":
            return tuple(decode(v) for v in inner)
    return {k: decode(v) for k, v in value.items()}

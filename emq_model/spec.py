"""The machine-readable contract: ``specs/transitions.json``, read once.

Everything that the model, the live client, the scripts' generated prelude, the
conformance machine and the docs share about ops (argument types and ranges, locations,
answers, refusals, outcome cells) comes from here.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any, Iterator

from .errors import ArgError


@cache
def load() -> dict[str, Any]:
    """The parsed transition table."""
    return json.loads(resources.files("emq_specs").joinpath("transitions.json").read_text("utf-8"))


def text(name: str) -> str:
    """A file of the contract, by its path inside ``specs/``."""
    node = resources.files("emq_specs")
    for part in name.split("/"):
        node = node.joinpath(part)
    return node.read_text("utf-8")


SPEC: dict[str, Any] = load()
SPEC_VERSION: str = SPEC["spec_version"]
WIRE_VERSION: str = SPEC["wire_version"]
LIMITS: dict[str, int] = SPEC["limits"]
OPS: dict[str, dict[str, Any]] = SPEC["ops"]
TYPES: dict[str, dict[str, Any]] = SPEC["types"]
LOCATIONS: tuple[str, ...] = tuple(SPEC["locations"])
STATE_OF: dict[str, str] = {loc: v["state"] for loc, v in SPEC["locations"].items()}
LOCATION_OF_STATE: dict[str, str] = {v: k for k, v in STATE_OF.items()}
ROW_FIELDS: tuple[str, ...] = tuple(SPEC["row_fields"])
TRANSITIONS: tuple[str, ...] = tuple(op for op, d in OPS.items() if d["kind"] == "transition")


def bound(value: int | str) -> int:
    """A type bound: an integer, or the name of a limit."""
    return LIMITS[value] if isinstance(value, str) else value


def cells() -> list[tuple[str, str]]:
    """Every (op, outcome) cell a conformance run must reach, in table order."""
    return [(op, outcome) for op, d in OPS.items() for outcome in d["outcomes"]]


def rule(op: str) -> str:
    """The spec rule an op's transition is numbered under (``T-claim``)."""
    return OPS[op]["rule"]


def check_value(type_name: str, name: str, value: Any) -> Any:
    """``value`` normalised for the wire (ints stay ints, text becomes bytes), or the
    refusal the type names (``KindError`` for ids, ``ArgError`` otherwise)."""
    from .branded_id import require  # branded_id reads LIMITS from this module

    t = TYPES[type_name]
    if type_name == "job_id":
        return require(value)
    if type_name in ("payload", "text"):
        if isinstance(value, str):
            try:
                value = value.encode("utf-8")
            except UnicodeEncodeError:
                raise ArgError(f"{name} is a str that is not encodable as UTF-8") from None
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise ArgError(f"{name} must be bytes or str, got {type(value).__name__}")
        value = bytes(value)
        if "max_bytes" in t and len(value) > bound(t["max_bytes"]):
            raise ArgError(f"{name} is {len(value)} bytes, more than {bound(t['max_bytes'])}")
        return value
    if "values" in t:
        if value not in t["values"]:
            raise ArgError(f"{name} must be one of {t['values']}, got {value!r}")
        return value
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArgError(f"{name} must be an integer, got {value!r}")
    lo, hi = bound(t["min"]), bound(t["max"])
    if not lo <= value <= hi:
        raise ArgError(f"{name} must be in [{lo}, {hi}], got {value}")
    return value


def check_args(op: str, values: dict[str, Any]) -> dict[str, Any]:
    """Every argument of ``op`` checked in table order (the order refusals are decided in);
    ``None`` passes for optional arguments. Returns the normalised values."""
    out: dict[str, Any] = {}
    for arg in OPS[op]["args"]:
        value = values.get(arg["name"], arg.get("default"))
        if value is None and arg.get("optional"):
            out[arg["name"]] = None
            continue
        out[arg["name"]] = check_value(arg["type"], arg["name"], value)
    return out


def check_now(now: Any) -> int:
    """A clock argument: an instant in ms (``time``)."""
    return check_value("time", "now", now)


def arg_names(op: str) -> Iterator[str]:
    """The API argument names of ``op``, in order."""
    return (a["name"] for a in OPS[op]["args"])


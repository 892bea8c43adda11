"""The machine-readable contract: ``specs/transitions.json``, read once.

Everything that the model, the live client, the scripts' generated prelude, the
conformance machine and the docs share about ops (argument types and ranges, locations,
answers, refusals, outcome cells) comes from here.
"""

from __future__ import annotations

from typing import Any, Iterator

from .branded_id import require
from .contract import load, text
from .errors import ArgError

__all__ = ["load", "text"]  # the contract's files, read (emq_model.contract)


SPEC: dict[str, Any] = load()
SPEC_VERSION: str = SPEC["spec_version"]
WIRE_VERSION: str = SPEC["wire_version"]
LIMITS: dict[str, int] = SPEC["limits"]
OPS: dict[str, dict[str, Any]] = SPEC["ops"]
TYPES: dict[str, dict[str, Any]] = SPEC["types"]
LOCATIONS: tuple[str, ...] = tuple(SPEC["locations"])
STATE_OF: dict[str, str] = {loc: v["state"] for loc, v in SPEC["locations"].items()}
ROW_FIELDS: tuple[str, ...] = tuple(SPEC["row_fields"])
TRANSITIONS: tuple[str, ...] = tuple(op for op, d in OPS.items() if d["kind"] == "transition")
LANE_OPS: dict[str, dict[str, Any]] = SPEC["lane_ops"]
"""The lane transitions (lifecycle.md §10), in the same form as ``OPS``. Kept apart until
the conformance machine has rules for them: ``cells()`` is what a run must reach today,
``lane_cells()`` what the lane rules will add."""
LANE_TRANSITIONS: tuple[str, ...] = tuple(LANE_OPS)
BATCHES: dict[str, dict[str, Any]] = SPEC["batches"]
"""Batch forms of transitions (lifecycle.md §6, "Batches"): not in ``OPS``, so they add no
outcome cell; each is defined as the per-item loop of the op it is ``of``."""


def bound(value: int | str) -> int:
    """A type bound: an integer, or the name of a limit."""
    return LIMITS[value] if isinstance(value, str) else value


def entry(op: str) -> dict[str, Any]:
    """The table entry of an op, a lane op or a batch op."""
    return OPS.get(op) or LANE_OPS.get(op) or BATCHES[op]


def cells() -> list[tuple[str, str]]:
    """Every (op, outcome) cell a conformance run must reach, in table order."""
    return [(op, outcome) for op, d in OPS.items() for outcome in d["outcomes"]]


def lane_cells() -> list[tuple[str, str]]:
    """Every (op, outcome) cell of the lane ops, in table order."""
    return [(op, outcome) for op, d in LANE_OPS.items() for outcome in d["outcomes"]]


def rule(op: str) -> str:
    """The spec rule an op's transition is numbered under (``T-claim``)."""
    return entry(op)["rule"]


def check_value(type_name: str, name: str, value: Any) -> Any:
    """``value`` normalised for the wire (ints stay ints, text becomes bytes), or the
    refusal the type names (``KindError`` for ids, ``ArgError`` otherwise)."""
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
    if "alphabet" in t:
        return _check_name(t, name, value)
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


def _check_name(t: dict[str, Any], name: str, value: Any) -> str:
    """A name of a closed alphabet (a lane's group, LANE-2): a str of ``min_bytes`` to
    ``max_bytes`` characters, each in ``alphabet`` (so one byte each)."""
    if not isinstance(value, str):
        raise ArgError(f"{name} must be a str, got {type(value).__name__}")
    lo, hi = t["min_bytes"], bound(t["max_bytes"])
    if not lo <= len(value) <= hi:
        raise ArgError(f"{name} must be {lo} to {hi} characters, got {len(value)}")
    bad = sorted(set(value) - set(t["alphabet"]))
    if bad:
        raise ArgError(f"{name} may hold only 0-9 A-Z a-z _ . -, got {bad[0]!r}")
    return value


def check_args(op: str, values: dict[str, Any]) -> dict[str, Any]:
    """Every argument of ``op`` checked in table order (the order refusals are decided in);
    ``None`` passes for optional arguments. Returns the normalised values. ``op`` may
    be a batch op without items (``claim_many``)."""
    out: dict[str, Any] = {}
    for arg in entry(op)["args"]:
        value = values.get(arg["name"], arg.get("default"))
        if value is None and arg.get("optional"):
            out[arg["name"]] = None
            continue
        out[arg["name"]] = check_value(arg["type"], arg["name"], value)
    return out


def check_items(op: str, items: Any) -> list[dict[str, Any]]:
    """The items of a batch op with ``items: true``, checked as a whole before anything
    runs, in the order the script checks them (B-1): a list of 1..``limit_max`` tuples of
    the base op's arguments (``EMQARG``), then every item's id (``EMQKIND``), then every
    item's other arguments, item by item (``EMQARG``). Returns the normalised items as
    argument dicts of the base op."""
    base = OPS[BATCHES[op]["of"]]["args"]
    if isinstance(items, (str, bytes, bytearray, memoryview, dict)) or not hasattr(items, "__iter__"):
        raise ArgError(f"{op} takes a sequence of items, got {type(items).__name__}")
    items = list(items)
    if not 1 <= len(items) <= LIMITS["limit_max"]:
        raise ArgError(f"{op} takes 1 to {LIMITS['limit_max']} items, got {len(items)}")
    for i, item in enumerate(items):
        if not isinstance(item, (tuple, list)) or len(item) != len(base):
            raise ArgError(f"{op} item {i} must be a ({', '.join(a['name'] for a in base)}) tuple, got {item!r}")
    first, rest = base[0], base[1:]
    ids = [check_value(first["type"], first["name"], item[0]) for item in items]
    return [
        {first["name"]: job_id, **{a["name"]: check_value(a["type"], a["name"], v) for a, v in zip(rest, item[1:])}}
        for job_id, item in zip(ids, items)
    ]


def check_now(now: Any) -> int:
    """A clock argument: an instant in ms (``time``)."""
    return check_value("time", "now", now)


def arg_names(op: str) -> Iterator[str]:
    """The API argument names of ``op``, in order."""
    return (a["name"] for a in entry(op)["args"])


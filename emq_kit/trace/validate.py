"""A trace read from a file is checked before anything runs: against its schema
(specs/schemas/trace.json, with jsonschema), then against the contract of the layout its
header names (each step's op is one of the layout's — for the four sets an op of
specs/transitions.json, a fault (``forget_row``, ``spoil_key``, ``mend_key``, ``stray_key``,
``drop_key``), ``queue`` or ``raw``; its queue is one of the machine's;
its arguments are the op's, none missing). The first problem is reported with its JSON
path (``steps/3/args``), so a hand-edited trace says where it went wrong."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

from emq_kit.check import faults
from emq_kit.errors import KitError
from emq_model import spec
from emq_model.keyspace import KEY_TYPES, outside, prefix

# The steps the machine records besides the spec's ops and its faults, and the arguments
# they take (a raw call, issue 19: its script, KEYS and ARGV as sent, and what was spoiled).
EXTRA_OPS = {"queue": {"name"}, "raw": {"op", "keys", "argv", "spoil"}}
# Steps whose queue is no machine queue: ``queue`` names a queue (any name, a bad one
# is its point); a raw call's is the queue its KEYS name, empty when refused (TR-2) —
# replay reads the call, not the field.
FREE_QUEUE_OPS = {"queue", "raw"}


class TraceError(KitError, ValueError):
    """A trace file that is not a trace this kit can replay: the first problem, with
    its JSON path."""


@cache
def _validator() -> Any:
    import jsonschema

    schema = json.loads(resources.files("emq_specs").joinpath("schemas/trace.json").read_text("utf-8"))
    return jsonschema.Draft202012Validator(schema)


def _path(parts: Any) -> str:
    return "/".join(str(p) for p in parts) or "(the document)"


def check_trace(data: Any) -> None:
    """``TraceError`` for the first way ``data`` (parsed JSON) is not a replayable trace."""
    errors = sorted(_validator().iter_errors(data), key=lambda e: (list(map(str, e.absolute_path)), e.message))
    if errors:
        first = errors[0]
        raise TraceError(f"{_path(first.absolute_path)}: {first.message:.300}")
    from emq_kit.layouts import of_trace

    try:
        layout = of_trace(data)  # the header fields are the document's top level
    except KitError as exc:
        raise TraceError(f"header/layout: {exc}") from None
    for n, step in enumerate(data["steps"]):
        where = f"steps/{n}"
        op, queue, args = step["op"], step["queue"], set(step["args"])
        table = layout.step_args(op)
        if table is None:
            raise TraceError(f"{where}/op: {op!r} is no op of {layout.contract} ({layout.name} layout)")
        required, allowed = table
        if op not in FREE_QUEUE_OPS and queue not in layout.queues:
            raise TraceError(f"{where}/queue: {queue!r} is not one of the run's queues {list(layout.queues)}")
        if required - args:
            raise TraceError(f"{where}/args: {op} needs {', '.join(sorted(required - args))}")
        if args - allowed:
            raise TraceError(f"{where}/args: {op} takes no {', '.join(sorted(args - allowed))}")
        if op in faults.KEY_FAULTS:
            _check_key_fault(where, step["args"])
        elif op in faults.STRAY_FAULTS:
            _check_stray(where, queue, step["args"])


def _check_key_fault(where: str, args: dict[str, Any]) -> None:
    """A spoil_key/mend_key step names a key of the grammar (an id with row, a group with
    lane only) and, for spoil_key, a type of ``faults.KINDS``."""
    key = args["key"]
    if key not in KEY_TYPES:
        raise TraceError(f"{where}/args/key: {key!r} is no key of transitions.json ({', '.join(sorted(KEY_TYPES))})")
    if ("id" in args) != (key == "row") or ("group" in args) != (key == "lane"):
        raise TraceError(f"{where}/args: key {key!r} takes {'id' if key == 'row' else 'group' if key == 'lane' else 'neither id nor group'}")
    _check_kind(where, args)


def _check_stray(where: str, queue: str, args: dict[str, Any]) -> None:
    """A stray_key/drop_key step names a key outside the grammar (a suffix after
    ``emq:{q}:``) and, for stray_key, a type of ``faults.KINDS``."""
    key = args["key"]
    if not isinstance(key, str) or not outside(queue, prefix(queue) + key):
        raise TraceError(f"{where}/args/key: {key!r} is not a stray key (a suffix after emq:{{q}}: that the grammar "
                         "does not name)")
    _check_kind(where, args)


def _check_kind(where: str, args: dict[str, Any]) -> None:
    if "kind" in args and args["kind"] not in faults.KINDS:
        raise TraceError(f"{where}/args/kind: {args['kind']!r} is not one of {', '.join(faults.KINDS)}")


def step_args(op: str) -> tuple[set[str], set[str]] | None:
    """The four sets' (required, allowed) arguments of a trace step's ``op``: an op, lane
    op or batch of specs/transitions.json, or one of the machine's extra steps."""
    if op in EXTRA_OPS:
        return EXTRA_OPS[op], EXTRA_OPS[op]
    if op in faults.ARGS:
        return faults.ARGS[op]
    if op not in spec.OPS and op not in spec.LANE_OPS and op not in spec.BATCHES:
        return None
    entry = spec.entry(op)
    allowed = {a["name"] for a in entry["args"]} | ({"now"} if entry["clock"] else set())
    allowed |= {"jobs"} if entry.get("items") else set()
    required = {a["name"] for a in entry["args"] if not a.get("optional")}
    required |= {"jobs"} if entry.get("items") else set()
    return required, allowed

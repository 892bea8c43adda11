"""A trace read from a file is checked before anything runs: against its schema
(specs/schemas/trace.json, with jsonschema), then against the contract (each step's op
is an op of specs/transitions.json, ``forget_row`` or ``queue``; its queue is one of the
machine's; its arguments are the op's, none missing). The first problem is reported with
its JSON path (``steps/3/args``), so a hand-edited trace says where it went wrong."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

from emq_kit.check.machine import QUEUES
from emq_kit.errors import KitError
from emq_model import spec

# The steps the machine records besides the spec's ops, and the arguments they take.
EXTRA_OPS = {"forget_row": {"id"}, "queue": {"name"}}


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
    for n, step in enumerate(data["steps"]):
        where = f"steps/{n}"
        op, queue, args = step["op"], step["queue"], set(step["args"])
        if op in EXTRA_OPS:
            required = allowed = EXTRA_OPS[op]
        elif op in spec.OPS or op in spec.LANE_OPS or op in spec.BATCHES:
            entry = spec.entry(op)
            allowed = {a["name"] for a in entry["args"]} | ({"now"} if entry["clock"] else set())
            allowed |= {"jobs"} if entry.get("items") else set()
            required = {a["name"] for a in entry["args"] if not a.get("optional")}
            required |= {"jobs"} if entry.get("items") else set()
        else:
            raise TraceError(f"{where}/op: {op!r} is no op of specs/transitions.json, nor forget_row or queue")
        if op != "queue" and queue not in QUEUES:
            raise TraceError(f"{where}/queue: {queue!r} is not one of the run's queues {list(QUEUES)}")
        if required - args:
            raise TraceError(f"{where}/args: {op} needs {', '.join(sorted(required - args))}")
        if args - allowed:
            raise TraceError(f"{where}/args: {op} takes no {', '.join(sorted(args - allowed))}")

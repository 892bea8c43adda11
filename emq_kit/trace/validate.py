"""A trace read from a file is data, checked before anything runs (TR-9a, TR-9c): its
size and nesting first, then its schema (specs/schemas/trace.json, with jsonschema),
then the contract of the layout its header names — each step's op is one of the
layout's (for the four sets an op of specs/transitions.json, a fault (``forget_row``,
``spoil_key``, ``mend_key``, ``stray_key``, ``drop_key``), ``queue``, ``raw`` or
``sleep_ms``), its queue one of the machine's, its arguments the op's, none missing —
and every argument's value (the layout's ``check_values``: for the four sets against its
type, ``arg_types``: the contract's types, the faults', the extra steps'; for bullmq what
its adapter sends). The first problem is reported with its JSON path
(``steps/3/args/lease_ms``), so a hand-edited trace says where it went wrong.

A step may carry one value outside its type, as the machine's hostile calls do (a
spoiled argument, ``machine.bad_values``): exactly one argument, and only a value the
machine itself sends for it. Anything else outside a type (``lease_ms: -5``, ``"x"``,
``10**400``) is an edited trace, refused."""

from __future__ import annotations

import json
import re
import sys
from functools import cache
from importlib import resources
from typing import Any, Callable

from emq_kit.check import faults
from emq_kit.check.step import SLEEP, SLEEP_MAX
from emq_kit.errors import KitError, TraceError
from emq_kit.trace.values import decode
from emq_model import spec
from emq_model.errors import EmqError
from emq_model.keyspace import KEY_TYPES, outside, prefix

MAX_BYTES = 64 * 1024 * 1024
"""The largest trace file read (a thorough run's longest trace is well under a MiB)."""
MAX_DEPTH = 32
"""The deepest nesting of arrays and objects a trace may have (a machine-made one has
about eight: steps, a step, args, a batch's items, an item, a tagged value)."""

EXTRA_OPS: dict[str, dict[str, str]] = {
    "queue": {"name": "queue_name"},
    "raw": {"op": "raw_op", "keys": "raw_keys", "argv": "wire", "spoil": "label"},
    SLEEP: {"ms": "wait"},
}
"""The steps the machine records besides the spec's ops and its faults, and the type of
each argument they take (all required): opening a queue by a refused name, a raw call
(its script, KEYS and ARGV as sent, and what was spoiled; TR-2) and a wait (TR-4c)."""
FAULT_TYPES = {"id": "job_id", "group": "group", "key": "fault_key", "kind": "fault_kind"}
"""The type of each argument a fault step takes (``faults.ARGS`` says which it takes)."""
# Steps whose queue is no machine queue: ``queue`` names a queue (any name, a bad one
# is its point); a raw call's is the queue its KEYS name, empty when refused (TR-2) —
# replay reads the call, not the field; a wait is about no queue.
FREE_QUEUE_OPS = {"queue", "raw", SLEEP}
NAME_MAX = 1024  # a ``queue`` step's name: the refused names are a few bytes past KS-3's limit
WIRE_MAX = 4 * spec.LIMITS["limit_max"] + 8  # a raw call's KEYS or ARGV: every item of a batch at most


@cache
def _validator() -> Any:
    import jsonschema

    schema = json.loads(resources.files("emq_specs").joinpath("schemas/trace.json").read_text("utf-8"))
    return jsonschema.Draft202012Validator(schema)


def _path(parts: Any) -> str:
    return "/".join(str(p) for p in parts) or "(the document)"


def parse(text: str) -> Any:
    """The JSON of a trace file's ``text``: its size bounded before it is parsed, its
    nesting and its text right after (TR-9c)."""
    if len(text) > MAX_BYTES:
        raise TraceError(f"(the document): {len(text):,} characters, more than a trace holds ({MAX_BYTES:,})")
    try:
        data = json.loads(text, parse_int=_integer)
    except RecursionError:  # the parser's own bound, far past ours
        raise TraceError(f"(the document): nested deeper than {MAX_DEPTH} levels") from None
    except TraceError:
        raise
    except ValueError as exc:  # not JSON
        raise TraceError(f"(the document): not JSON: {str(exc)[:200]}") from None
    level, deepest = [data], 0
    while level:  # breadth first, without recursion: what follows (the schema) recurses
        deepest += 1
        if deepest > MAX_DEPTH:
            raise TraceError(f"(the document): nested deeper than {MAX_DEPTH} levels")
        level = [v for node in level if isinstance(node, (list, dict))
                 for v in (node.values() if isinstance(node, dict) else node)]
    if _ESCAPED_SURROGATE.search(text):  # only an escape makes one: the file was read as UTF-8
        _utf8(data, ())
    return data


def _integer(digits: str) -> int:
    """A JSON integer, unless it has more digits than Python converts (an edit: no trace
    value comes near)."""
    most = sys.get_int_max_str_digits()
    if most and len(digits.lstrip("-")) > most:
        raise TraceError(f"(the document): an integer of {len(digits.lstrip('-')):,} digits, more than a trace "
                         f"holds ({most:,} at most)")
    return int(digits)


_ESCAPED_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _utf8(node: Any, at: tuple[Any, ...]) -> None:
    """``TraceError`` at the first string of ``node`` (a value or an object's key) that
    holds a lone surrogate (``"\\ud800"``, valid JSON): no UTF-8 text can, so no trace
    the kit writes does, and no output could show or write it (TR-9c). Recursive: the
    nesting is bounded already."""
    if isinstance(node, str) and _SURROGATE.search(node):
        raise TraceError(f"{_path(at)}: {node!r:.80} holds a lone surrogate, which UTF-8 cannot encode: a trace "
                         "is UTF-8 text")
    if isinstance(node, dict):
        for key, value in node.items():
            if _SURROGATE.search(key):
                raise TraceError(f"{_path(at)}: the key {key!r:.80} holds a lone surrogate, which UTF-8 cannot "
                                 "encode: a trace is UTF-8 text")
            _utf8(value, (*at, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            _utf8(value, (*at, i))


def check_trace(data: Any) -> None:
    """``TraceError`` for the first way ``data`` (parsed JSON) is not a replayable trace."""
    from jsonschema.exceptions import best_match

    errors = sorted(_validator().iter_errors(data), key=lambda e: (list(map(str, e.absolute_path)), e.message))
    if errors:
        first = best_match(errors[:1])  # within a oneOf (a divergence, a row value), the field that fails it
        raise TraceError(f"{_path(first.absolute_path)}: {first.message:.300}")
    if not data["steps"]:
        raise TraceError("steps: no steps: a trace holds the calls that made its run")
    _check_rows(data)
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
        for side in ("model", "target"):
            if side in step:
                _decoded(f"{where}/{side}", step[side])
        layout.check_values(where, op, queue, step["args"])


def _check_rows(data: dict[str, Any]) -> None:
    """Each snapshot row value as the header's ``version`` writes it (TR-4): ``{"b64":
    ...}`` from version 3, latin-1 text before (the schema takes either in any version)."""
    from emq_kit.ports.protocol import is_bytes_json, json_bytes

    version, divergence = data["version"], data["divergence"] or {}
    for side in ("model", "target"):
        for job, row in divergence.get(f"{side}_snapshot", {"rows": {}})["rows"].items():
            for name, value in row.items():
                at = f"divergence/{side}_snapshot/rows/{job}/{name}"
                if version >= 3:
                    if not is_bytes_json(value):
                        raise TraceError(f"{at}: a version {version} trace writes a row value as {{\"b64\": ...}}, "
                                         f"got {value!r:.80}")
                    try:
                        json_bytes(value)
                    except ValueError as exc:
                        raise TraceError(f"{at}: {exc}") from None
                elif not isinstance(value, str) or not _latin1(value):
                    raise TraceError(f"{at}: a version {version} trace writes a row value as latin-1 text, "
                                     f"got {value!r:.80}")


def _latin1(text: str) -> bool:
    try:
        text.encode("latin-1")
    except UnicodeEncodeError:
        return False
    return True


def _decoded(where: str, value: Any) -> Any:
    """``value`` as replay reads it (``values.decode``), or ``TraceError`` at ``where``."""
    try:
        return decode(value)
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        raise TraceError(f"{where}: not a value this kit writes ({type(exc).__name__}: {exc})") from None


def arg_types(op: str) -> dict[str, str] | None:
    """The four sets' type of each argument a trace step's ``op`` may take: a type of
    specs/transitions.json's ``types`` (``now`` is a ``time``; a batch's ``jobs`` are
    ``items``), or one of ``CHECKS``; ``None`` for no such op."""
    if op in EXTRA_OPS:
        return EXTRA_OPS[op]
    if op in faults.ARGS:
        return {name: FAULT_TYPES[name] for name in faults.ARGS[op][1]}
    if op not in spec.OPS and op not in spec.LANE_OPS and op not in spec.BATCHES:
        return None
    entry = spec.entry(op)
    types = {a["name"]: a["type"] for a in entry["args"]}
    types |= {"now": "time"} if entry["clock"] else {}
    types |= {"jobs": "items"} if entry.get("items") else {}
    return types


def step_args(op: str) -> tuple[set[str], set[str]] | None:
    """The four sets' (required, allowed) arguments of a trace step's ``op``: an op, lane
    op or batch of specs/transitions.json, or one of the machine's extra steps."""
    if op in EXTRA_OPS:
        return set(EXTRA_OPS[op]), set(EXTRA_OPS[op])
    if op in faults.ARGS:
        return faults.ARGS[op]
    types = arg_types(op)
    if types is None:
        return None
    entry = spec.entry(op)
    required = {a["name"] for a in entry["args"] if not a.get("optional")}
    required |= {"jobs"} if entry.get("items") else set()
    return required, set(types)


def check_values(where: str, op: str, queue: str, encoded: dict[str, Any]) -> None:
    """The four sets' check of every argument of a step against its type; at most one
    contract argument may be a value the machine spoils it with."""
    from emq_kit.check.pools import bad_values

    types = arg_types(op) or {}
    args = {name: _decoded(f"{where}/args/{name}", value) for name, value in encoded.items()}
    spoiled: str | None = None
    for name, value in args.items():
        kind, at = types[name], f"{where}/args/{name}"
        if kind in spec.TYPES:
            if value is None and _optional(op, name):
                continue
            try:
                spec.check_value(kind, name, value)
            except EmqError as exc:
                table = {"name": name, "type": kind, "optional": _optional(op, name)}
                if spoiled is None and _among(value, bad_values(table)):
                    spoiled = name  # a hostile call's one spoiled argument
                    continue
                also = f" ({spoiled} is the step's one spoiled argument)" if spoiled else ""
                raise TraceError(f"{at}: {_said(exc)}{also}") from None
        else:
            CHECKS[kind](at, op, value, args, queue)


def _said(exc: EmqError) -> str:
    """A refusal's words, cut to a line (an edited value may be thousands of digits)."""
    text = str(exc.args[0] if exc.args else exc.code)
    return text if len(text) <= 160 else text[:150] + f"… ({len(text):,} characters)"


def _optional(op: str, name: str) -> bool:
    return name == "now" or any(a["name"] == name and a.get("optional") for a in spec.entry(op)["args"])


def _among(value: Any, options: list[Any]) -> bool:
    """``value`` is one of ``options``, of the same type (``True`` is not ``1``, nor ``1.0``)."""
    return any(type(value) is type(o) and value == o for o in options)


def _items(at: str, op: str, value: Any, args: dict[str, Any], queue: str) -> None:
    try:
        spec.check_items(op, value)
    except EmqError as exc:
        raise TraceError(f"{at}: {_said(exc)}") from None


def _queue_name(at: str, op: str, value: Any, args: dict[str, Any], queue: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (str, int)) or (isinstance(value, str) and len(value) > NAME_MAX):
        raise TraceError(f"{at}: a queue name is a str of at most {NAME_MAX} characters (or an int), got {value!r:.80}")


def _raw_op(at: str, op: str, value: Any, args: dict[str, Any], queue: str) -> None:
    from emq_kit.check.raw.contract import OPS

    if value not in OPS:
        raise TraceError(f"{at}: {value!r:.80} is no script a raw call reaches ({', '.join(OPS)})")


def _wire(at: str, op: str, value: Any, args: dict[str, Any], queue: str) -> None:
    if not isinstance(value, list) or len(value) > WIRE_MAX or not all(isinstance(v, bytes) for v in value):
        raise TraceError(f"{at}: the wire values are an array of at most {WIRE_MAX} {{b64}} values")


def _raw_keys(at: str, op: str, value: Any, args: dict[str, Any], queue: str) -> None:
    """A raw call's KEYS: wire values, each a key of a queue a run sends (OWN-1, OWN-2):
    the scripts under check may write any key they are given, and a run maps only the
    keys of its own names (``Names.key``), so an edited one is refused, never sent."""
    from emq_kit.check.names import queue_of_key, vocabulary

    _wire(at, op, value, args, queue)
    names = vocabulary()
    for i, key in enumerate(value):
        if queue_of_key(key, names) is None:
            raise TraceError(f"{at}/{i}: {key!r:.80} is no key of a queue a run sends (emq:{{q}}: of the machine's, "
                             "the hostile and the raw calls' names)")


def _label(at: str, op: str, value: Any, args: dict[str, Any], queue: str) -> None:
    if not isinstance(value, str) or len(value) > NAME_MAX:
        raise TraceError(f"{at}: a str of at most {NAME_MAX} characters, got {value!r:.80}")


def _fault_key(at: str, op: str, value: Any, args: dict[str, Any], queue: str) -> None:
    """A spoil_key/mend_key step names a key of the grammar (an id with row, a group with
    lane only); a stray_key/drop_key step a key outside it (a suffix after ``emq:{q}:``)."""
    if op in faults.STRAY_FAULTS:
        if not isinstance(value, str) or not outside(queue, prefix(queue) + value):
            raise TraceError(f"{at}: {value!r:.80} is not a stray key (a suffix after emq:{{q}}: that the grammar "
                             "does not name)")
        return
    if value not in KEY_TYPES:
        raise TraceError(f"{at}: {value!r:.80} is no key of transitions.json ({', '.join(sorted(KEY_TYPES))})")
    if ("id" in args) != (value == "row") or ("group" in args) != (value == "lane"):
        wants = "id" if value == "row" else "group" if value == "lane" else "neither id nor group"
        raise TraceError(f"{at.rsplit('/', 2)[0]}/args: key {value!r} takes {wants}")


def _fault_kind(at: str, op: str, value: Any, args: dict[str, Any], queue: str) -> None:
    if value not in faults.KINDS:
        raise TraceError(f"{at}: {value!r} is not one of {', '.join(faults.KINDS)}")


def _wait(at: str, op: str, value: Any, args: dict[str, Any], queue: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= SLEEP_MAX:
        raise TraceError(f"{at}: a wait is a whole number of ms in [0, {SLEEP_MAX}], got {value!r:.80}")


CHECKS: dict[str, Callable[[str, str, Any, dict[str, Any], str], None]] = {
    "items": _items, "queue_name": _queue_name, "raw_op": _raw_op, "wire": _wire, "raw_keys": _raw_keys,
    "label": _label, "fault_key": _fault_key, "fault_kind": _fault_kind, "wait": _wait,
}
"""The checks of the argument types that are not the contract's (``arg_types``), each
given the argument's JSON path, the step's op, the value, the step's decoded arguments
and its queue. A new kind of step slots in with its types in ``EXTRA_OPS`` (and a check
here for a type of its own)."""

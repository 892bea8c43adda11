"""Trace files: a counterexample that replays anywhere (specs/trace.md, schema in
specs/schemas/trace.json).

A trace is JSON: a header (kit and spec versions, target, script SHA1s, seed, clock
mode), the steps (queue, op, args — the clock travels in ``args.now`` — and both
answers, as ``emq_kit.trace.values`` writes them), the first diverging step and both
snapshots there. A file is checked before it is read as a trace
(``emq_kit.trace.validate``).
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from emq_kit.check.signature import signature
from emq_kit.check.step import Divergence, Step
from emq_kit.ports.protocol import bytes_json, json_bytes
from emq_kit.trace.values import decode, encode
from emq_model import branded_id, spec
from emq_model.snapshot import Snapshot

FORMAT = "emq-trace"
VERSION = 3

READS = (1, 2, 3)  # version 1 wrote bytes as {"$bytes": ...}, 1 and 2 snapshot rows as latin-1 text: all are read


def snapshot_json(snap: Snapshot) -> dict[str, Any]:
    """A snapshot in a trace: its row values as bytes are everywhere else (TR-4)."""
    data = snap.to_json()
    data["rows"] = {i: {f: bytes_json(v) for f, v in row} for i, row in snap.rows}
    return data


def json_snapshot(data: dict[str, Any], version: int) -> Snapshot:
    """The inverse of ``snapshot_json``; a version 1 or 2 trace wrote row values as latin-1 text."""
    if version >= 3:
        data = {**data, "rows": {i: {f: json_bytes(v).decode("latin-1") for f, v in row.items()}
                                 for i, row in data["rows"].items()}}
    return Snapshot.from_json(data)


def step_json(step: Step, index: int) -> dict[str, Any]:
    """A step as the trace file holds it (TR-2; ``at``, a server-clock op's clock)."""
    return {"i": index, "queue": step.queue, "op": step.op, "args": encode(step.args),
            "model": encode(step.model), "target": encode(step.target),
            **({"at": step.at} if step.at is not None else {})}


def step_of_json(data: dict[str, Any]) -> Step:
    """The inverse of ``step_json``."""
    return Step(data["queue"], data["op"], decode(data["args"]), decode(data.get("model")),
                decode(data.get("target")), index=data.get("i", 0), at=data.get("at"))


@dataclass
class Trace:
    """A counterexample: header, steps, and the divergence at the last step."""

    header: dict[str, Any]
    steps: list[Step]
    divergence: dict[str, Any] | None = None
    snapshots: dict[str, Snapshot] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            **self.header,
            "steps": [step_json(s, i) for i, s in enumerate(self.steps, 1)],
            "divergence": None if self.divergence is None else {
                **self.divergence, **{f"{side}_snapshot": snapshot_json(snap) for side, snap in self.snapshots.items()}},
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Trace":
        if data.get("format") != FORMAT:
            raise ValueError(f"not an emq trace (format {data.get('format')!r})")
        if data.get("version") not in READS:
            raise ValueError(f"trace version {data.get('version')!r}; this kit reads versions {READS}")
        header = {k: v for k, v in data.items() if k not in ("format", "version", "steps", "divergence")}
        div = data.get("divergence")
        snapshots = {}
        if div is not None:
            snapshots = {side: json_snapshot(div[f"{side}_snapshot"], data["version"])
                         for side in ("model", "target") if div.get(f"{side}_snapshot")}
            div = {k: v for k, v in div.items() if not k.endswith("_snapshot")}
        return cls(header, [step_of_json(s) for s in data["steps"]], div, snapshots)

    def write(self, path: Path) -> Path:
        from emq_kit.redaction import write_text

        return write_text(path, json.dumps(self.to_json(), indent=1, ensure_ascii=False) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> "Trace":
        """The trace in the file ``path``, checked first (``TraceError`` with the JSON
        path of the first problem; ``InputRefused`` for a file that is no regular file or
        is larger than a trace holds, before it is parsed)."""
        from emq_kit.inputs import read_text
        from emq_kit.trace.validate import MAX_BYTES, check_trace, parse

        data = parse(read_text(path, MAX_BYTES, "a trace holds"))  # a regular file, at most MAX_BYTES read (TR-9c)
        check_trace(data)
        return cls.from_json(data)


def header(target: dict[str, Any], *, seed: int | None, profile: str | None, clock: str) -> dict[str, Any]:
    """The trace header: who made it, against what, and how to make it again."""
    try:
        kit = metadata.version("emq")
    except metadata.PackageNotFoundError:
        kit = "unknown"
    return {
        "kit_version": kit,
        "spec_version": spec.SPEC_VERSION,
        "wire_version": spec.WIRE_VERSION,
        "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "layout": target.get("layout", "echomq"),
        "target": target,
        "seed": seed,
        "profile": profile,
        "clock": clock,
    }


def divergence_json(d: Divergence, index: int) -> dict[str, Any]:
    """The divergence part of a trace (its snapshots are added by ``Trace``): its
    signature's cell and rule (``emq_kit/check/signature.py``), the names ``emq check``
    lists it by."""
    sig = signature(d)
    return {"step": index, "kind": d.kind, "cell": sig.cell, "rule": sig.rule, "evidence": d.lines}


def renaming(steps: list[Step]) -> dict[str, str]:
    """Readable, stable names for the JOB ids of a trace: ``JOB00000000001`` … in the
    ids' own byte order, so every order the lifecycle depends on (claim takes the
    lowest; browse is newest first) is kept. A trace with raw calls keeps its ids: a raw
    call's ids are bytes on the wire, picked among the low names renaming would hand out."""
    seen: set[str] = set()
    if any(s.op == "raw" for s in steps):
        return {}

    def collect(value: Any) -> None:
        if isinstance(value, str) and branded_id.is_valid(value, branded_id.JOB):
            seen.add(value)
        elif isinstance(value, dict):
            for v in value.values():
                collect(v)
        elif isinstance(value, (list, tuple)):
            for v in value:
                collect(v)

    for s in steps:
        collect(s.args)
    return {old: branded_id.encode(branded_id.JOB, n) for n, old in enumerate(sorted(seen), 1)}


def renamed(steps: list[Step], names: dict[str, str]) -> list[Step]:
    """``steps`` with every id in the arguments renamed (answers are left to a replay)."""

    def swap(value: Any) -> Any:
        if isinstance(value, str):
            return names.get(value, value)
        if isinstance(value, dict):
            return {k: swap(v) for k, v in value.items()}
        if isinstance(value, list):
            return [swap(v) for v in value]
        if isinstance(value, tuple):  # a batch's items
            return tuple(swap(v) for v in value)
        return value

    return [Step(s.queue, s.op, swap(s.args), index=s.index) for s in steps]

"""The regression corpus: before its search, a check replays the counterexample traces
already in its traces directory on the target (as Hypothesis replays its example
database before generating) and reports, per trace, whether it still fails, now passes,
or was not replayed here and why (another layout or clock, a file that is no trace).

Traces are named by their content (``name``): the same counterexample found again, by
any seed, is the same file, so the corpus grows by new counterexamples only."""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from emq_kit.check.signature import Signature, parse, signature

FAILS, PASSES, SKIPPED = "fails", "passes", "skipped"


@dataclass
class Known:
    """One trace of the corpus as this run replayed it: ``verdict`` is ``fails`` (a
    divergence again, ``now`` its signature), ``passes`` (the target agrees with the
    model at every step) or ``skipped`` (``reason``); ``signature`` the one it was
    written under."""

    path: Path
    signature: Signature | None
    verdict: str
    now: Signature | None = None
    reason: str = ""
    expected: str | None = None  # the expectations file's reason, when it lists ``now``

    @property
    def regression(self) -> bool:
        """A known counterexample the target still shows, and no expectation excuses."""
        return self.verdict == FAILS and self.expected is None

    def to_json(self) -> dict[str, Any]:
        return {"trace": str(self.path), "signature": None if self.signature is None else str(self.signature),
                "verdict": self.verdict, "now": None if self.now is None else str(self.now), "reason": self.reason,
                "expected": self.expected}


def corpus_phase(known: list[Known], seconds: float) -> dict[str, Any]:
    """The corpus phase's figures, as the report's ``phases`` lists them."""
    return {"traces": len(known), **{v: sum(k.verdict == v for k in known) for v in (FAILS, PASSES, SKIPPED)},
            "seconds": round(seconds, 3)}


def name(trace: Any) -> str:
    """A trace's file name by its content: its rule and a digest of what it replays (the
    layout, the clock, each step's queue, op and arguments) and of the difference it
    shows (cell and rule). Answers, evidence, seed and time are left out: they vary
    between runs that found the same counterexample (an object's address in a repr)."""
    from emq_kit.trace.format import step_json

    d = trace.divergence or {}
    content = {"layout": trace.header.get("layout", "echomq"), "clock": trace.header.get("clock", "virtual"),
               "steps": [{k: v for k, v in step_json(s, i).items() if k in ("queue", "op", "args")}
                         for i, s in enumerate(trace.steps, 1)],
               "cell": d.get("cell"), "rule": d.get("rule")}
    digest = hashlib.sha256(json.dumps(content, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:16]
    return f"{d.get('rule', 'conforms')}-{digest}.json"


def replay_corpus(directory: Path, target: Any, replay: Callable[..., Any], *, layout: str, clock_mode: str,
                  clock: Any = None) -> tuple[list[Known], float]:
    """Replay every counterexample trace in ``directory`` (sorted by name) on
    ``target`` with the layout's ``replay``; what each showed, and the seconds it took.
    A trace of another layout or clock is skipped, as is a file that is no trace."""
    from emq_kit import interrupts
    from emq_kit.trace.format import Trace

    started = time.perf_counter()
    known: list[Known] = []
    for path in sorted(directory.glob("*.json")) if directory.is_dir() else []:
        interrupts.check()
        try:
            trace = Trace.load(path)
        except (OSError, ValueError, KeyError) as exc:
            known.append(Known(path, None, SKIPPED, reason=f"not a trace: {exc}"))
            continue
        d = trace.divergence
        if d is None:  # an interrupted run's steps: no counterexample to hold the target to
            continue
        sig = parse(f"{d['cell']} {d['rule']}") if d.get("cell") else None
        theirs = (trace.header.get("layout") or "echomq", trace.header.get("clock") or "virtual")
        if theirs != (layout, clock_mode):
            known.append(Known(path, sig, SKIPPED, reason=f"written under layout {theirs[0]}, clock {theirs[1]}"))
            continue
        result = replay(trace.steps, target, clock)
        if result.divergence is None:
            known.append(Known(path, sig, PASSES))
        else:
            known.append(Known(path, sig, FAILS, now=signature(result.divergence)))
    return known, time.perf_counter() - started

"""Differences grouped into causes (specs/trace.md TR-14): a port
that never checks a key's type differs on every op that touches one, one signature per
op, yet it is one thing to fix.

Two differences share a cause when

- the target answered the same failure where the model answered (a crash, a driver
  error, a server's ``WRONGTYPE``: its message without where it happened), whatever the
  model's answer;
- or the model refused the call for its arguments or its keys (``EMQKIND``, ``EMQARG``,
  ``EMQTYPE``: every op checks them alike) and the target answered the same other way,
  or the target refused so where the model answered (a bound too strict): the same
  refusal expected and the same wrong answer across ops, under the same validation
  rule (ID-7 for ids, CC-5 for arguments, KS-3 for queue names);
- or they cite the same rule otherwise (a T-* rule of one op, an invariant), but for
  INV-8 (snapshots differ), which every op's keyspace difference cites: each of those
  is its own cause.

A cause's class is lifecycle when one of its differences is; its representative is its
difference with the shortest trace (the first found among equals).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from emq_kit.check import effect
from emq_kit.check.step import Crash
from emq_model.errors import EmqError

ARGUMENT_REFUSALS = ("EMQKIND", "EMQARG", "EMQTYPE")
"""Refusals every op makes alike, for its arguments (ID-7, CC-5, KS-3) or its keys' types
(CC-8): one defect shows on every op."""
VALIDATION_PREFIXES = ("ID-", "CC-", "KS-")
WHERE = re.compile(r" at request \d+ \([^)]*\)")
"""Where a driver's failure happened (``DriverError``'s ``at request 12 (claim)``): not
part of what failed."""


@dataclass
class Cause:
    """Differences one defect of the port explains: ``title`` says what the defect looks
    like, ``differences`` (the report's, in the order found) show it."""

    title: str
    klass: str
    differences: list[Any] = field(default_factory=list)
    failure: str | None = None  # what the target's failure said, for a cause of failures

    @property
    def ops(self) -> list[str]:
        """The ops it shows on, in the order met."""
        return list(dict.fromkeys(d.divergence.step.op for d in self.differences))

    @property
    def representative(self) -> Any:
        """The difference with the fewest steps (the first found among equals)."""
        return min(self.differences, key=lambda d: len(d.shrunk))


def causes_of(differences: list[Any]) -> list[Cause]:
    """``differences`` grouped into causes, lifecycle first, each class in the order its
    first difference was found."""
    grouped: dict[tuple[str, ...], Cause] = {}
    for d in differences:
        key, title = _key(d)
        cause = grouped.setdefault(key, Cause(title, effect.SURFACE, failure=key[1] if key[0] == "failed" else None))
        cause.differences.append(d)
        if d.klass == effect.LIFECYCLE:
            cause.klass = effect.LIFECYCLE
    for cause in grouped.values():
        expected = {_code(d.divergence.step.model) for d in cause.differences}
        if cause.failure is not None and len(expected) == 1 and None not in expected:
            cause.title = f"{expected.pop()} never answered: the target fails with {cause.failure}"
    return [c for k in effect.CLASSES for c in grouped.values() if c.klass == k]


def _key(d: Any) -> tuple[tuple[str, ...], str]:
    """The cause ``d`` belongs to, and its title."""
    div, rule = d.divergence, d.signature.rule
    step = div.step
    validation = rule if rule.startswith(VALIDATION_PREFIXES) else ""
    if div.kind == "answer" and isinstance(step.target, Crash):
        failure = failed(step.target)
        return ("failed", failure), f"the target fails where the model answers: {failure}"
    if div.kind == "answer" and (_code(step.model) in ARGUMENT_REFUSALS or _code(step.target) in ARGUMENT_REFUSALS):
        expected, answered = _code(step.model), _code(step.target)
        said = (f"{expected} expected, {answered} answered" if expected and answered
                else f"{expected} expected, the call accepted" if expected
                else f"{answered} answered where the model accepts the call")
        return ("refusal", expected or "", answered or "", validation), said + (f" ({validation})" if validation else "")
    if rule == "INV-8" or not rule:
        return ("signature", str(d.signature)), f"{d.signature}: the keyspace differs"
    what = {"answer": "the answer differs", "snapshot": "the keyspace differs",
            "invariant": "an invariant breaks"}.get(div.kind, div.kind)
    return ("rule", rule), f"{rule}: {what}"


def failed(crash: Crash) -> str:
    """What a target's failure says, without where it happened: one cause however many
    ops met it."""
    text = WHERE.sub("", str(crash.exc)).splitlines()[0] if str(crash.exc) else ""
    return f"{type(crash.exc).__name__}: {text}"[:160]


def _code(answer: Any) -> str | None:
    return answer.code if isinstance(answer, EmqError) else None

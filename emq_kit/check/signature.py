"""A divergence's signature: what makes two divergences the same difference of a port.

A signature is the divergence's *cell* (op x outcome of ``specs/transitions.json``, the
outcome the model's answer names) and the *rule* it cites. The rule of an answer that
differs where the model refused the call for its arguments (EMQKIND, EMQARG) is the
validation rule broken (ID-7 for a job id, CC-5 for any other argument, KS-3 for a queue
name), whatever the op: a port that accepts an out-of-range lease on claim and on extend
shows two signatures, one per cell. A snapshot that changed under such a refused call
cites the same validation rule (bad input changes nothing). Every other divergence keeps
the rule the machine cited (the op's T-* rule, INV-8, INV-1..7).

A signature is one name wherever a divergence is shown: ``emq check`` lists a difference
by it, its trace file records it (``divergence.cell`` and ``divergence.rule``), and
``emq replay``, the JSON report and the HTML page print it — all through ``signature``.
A difference's class is not the signature's: it is the divergence's effect
(``emq_kit/check/effect.py``).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from emq_kit.check.coverage import classify
from emq_model import spec
from emq_model.errors import EmqError

VALIDATION_RULES = {"EMQKIND": "ID-7", "EMQARG": "CC-5"}
"""The rule a refusal for a call's arguments enforces, by refusal code."""


class Signature(NamedTuple):
    """One distinct difference: ``cell`` is ``op/outcome`` (``queue/EMQARG`` for a
    queue name KS-3 refuses, ``forget_row/ok`` for a row deleted by hand)."""

    cell: str
    rule: str

    def __str__(self) -> str:
        return f"{self.cell} {self.rule}"


def cell_of(op: str, model_answer: Any) -> str:
    """The cell the model's answer puts a call in (the first outcome it names)."""
    if op == "queue":
        return "queue/EMQARG"
    if op in spec.TRANSITIONS:
        names = classify(op, model_answer)
        if names:
            return f"{op}/{names[0]}"
    if isinstance(model_answer, EmqError):
        return f"{op}/{model_answer.code}"
    return f"{op}/ok"


def signature(divergence: Any) -> Signature:
    """The signature of a ``Divergence`` (its ``step``, ``kind`` and ``rule``)."""
    step = divergence.step
    rule = divergence.rule
    code = step.model.code if isinstance(step.model, EmqError) else None
    if step.op == "queue":
        rule = "KS-3"
    elif code in VALIDATION_RULES and divergence.kind in ("answer", "snapshot"):
        rule = VALIDATION_RULES[code]
    return Signature(cell_of(step.op, step.model), rule)


def parse(text: str) -> Signature:
    """A signature from its printed form ``op/outcome RULE``."""
    cell, _, rule = text.strip().partition(" ")
    if "/" not in cell or not rule.strip():
        raise ValueError(f"a signature is 'op/outcome RULE', not {text!r}")
    return Signature(cell, rule.strip())

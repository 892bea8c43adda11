"""One-check edits of lib.lua and batch.lua the raw sweep must find
(``emq_kit/check/check_edits.json``; tests/kit/test_rawcalls.py, the selftest's mutants)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources


@dataclass(frozen=True)
class CheckEdit:
    """One check of lib.lua or batch.lua edited: ``before``, a text found in exactly one
    line of code of the script, becomes ``after``. ``why`` says what a raw call then sees.
    ``emq_kit.selftest.check_mutants`` turns each into a mutant."""

    name: str
    script: str
    before: str
    after: str
    why: str


def _check_edits() -> tuple[CheckEdit, ...]:
    data = json.loads(resources.files("emq_kit.check").joinpath("check_edits.json").read_text("utf-8"))
    return tuple(CheckEdit(**e) for e in data["edits"])


CHECK_EDITS: tuple[CheckEdit, ...] = _check_edits()
"""The one-check edits of lib.lua and batch.lua (``emq_kit/check/check_edits.json``)."""

"""Packed draws: the small choices of a rule drawn as one Hypothesis choice.

Hypothesis's cost is per choice (each is recorded, spanned and replayed for shrinking),
and a rule with five arguments would pay five of them: on a fast server most of a
checked step. A ``Draw`` names the fields of a rule, each a short
sequence of options (at most 256), and draws one byte string with a byte per field;
field i is ``options[byte_i % len(options)]``.

Why bytes and not one integer in mixed radix: Hypothesis draws a bounded integer from a
distribution that favours small values once the range passes 256, which would pin the
most significant fields to their first option; its bytes are uniform. Every field's
first option is its simplest and Hypothesis shrinks bytes towards zero one at a time, so
a shrunk counterexample simplifies field by field. A field's options may repeat a value
to weight it (``QUEUE`` sends three calls in four to the first queue); an option count
that does not divide 256 favours its first ``256 % len`` options by one part in
``256 // len``.
"""

from __future__ import annotations

from collections import namedtuple
from typing import Any, Sequence

from hypothesis import strategies as st

MAX_OPTIONS = 256


class Draw:
    """One bytes choice decoded into a named tuple of fields."""

    def __init__(self, name: str, **fields: Sequence[Any]) -> None:
        for field, options in fields.items():
            if not 1 <= len(options) <= MAX_OPTIONS:
                raise ValueError(f"{name}.{field}: 1..{MAX_OPTIONS} options, not {len(options)}")
        self.fields = {k: tuple(v) for k, v in fields.items()}
        self.tuple = namedtuple(name, list(fields))  # type: ignore[misc]
        n = len(self.fields)
        self.strategy = st.binary(min_size=n, max_size=n).map(self.decode)

    def decode(self, raw: bytes) -> Any:
        """The fields a byte string (one byte per field) selects."""
        if len(raw) != len(self.fields):
            raise ValueError(f"{len(raw)} bytes for {len(self.fields)} fields")
        return self.tuple(*(options[b % len(options)] for b, options in zip(raw, self.fields.values())))

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

The strategy (``Packed``) is ``st.binary(n, n).map(decode)`` as Hypothesis draws it,
less the per-draw bookkeeping of ``map`` (a warnings context and a printer record for
every value: several times the choice's own cost, once a step): the same choice under
the same spans and labels, so the same examples from a seed, and the same shrinking.
"""

from __future__ import annotations

from collections import namedtuple
from typing import Any, Callable, Sequence

from hypothesis import strategies as st
from hypothesis.strategies._internal.lazy import unwrap_strategies
from hypothesis.strategies._internal.strategies import MAPPED_SEARCH_STRATEGY_DO_DRAW_LABEL, SearchStrategy

MAX_OPTIONS = 256


class Draw:
    """One bytes choice decoded into a named tuple of fields."""

    def __init__(self, name: str, **fields: Sequence[Any]) -> None:
        for field, options in fields.items():
            if not 1 <= len(options) <= MAX_OPTIONS:
                raise ValueError(f"{name}.{field}: 1..{MAX_OPTIONS} options, not {len(options)}")
        self.fields = {k: tuple(v) for k, v in fields.items()}
        self.tuple = namedtuple(name, list(fields))  # type: ignore[misc]
        self.strategy = Packed(len(self.fields), self.decode)

    def decode(self, raw: bytes) -> Any:
        """The fields a byte string (one byte per field) selects."""
        if len(raw) != len(self.fields):
            raise ValueError(f"{len(raw)} bytes for {len(self.fields)} fields")
        return self.tuple(*(options[b % len(options)] for b, options in zip(raw, self.fields.values())))


class Packed(SearchStrategy):
    """``st.binary(min_size=n, max_size=n).map(decode)``, drawn as Hypothesis draws that
    one (``MappedStrategy.do_draw``): under its label, a span of map's own, then the
    bytes drawn as a strategy (so a value the shrinker hands back is read as bytes).
    tests/kit/test_draws.py holds both to the same choices, spans and values."""

    def __init__(self, n: int, decode: Callable[[bytes], Any]) -> None:
        super().__init__()
        self.reference = st.binary(min_size=n, max_size=n).map(decode)
        self.bytes = unwrap_strategies(st.binary(min_size=n, max_size=n))
        self.decode = decode

    def calc_label(self) -> int:
        return int(unwrap_strategies(self.reference).label)

    def draw_in(self, data: Any) -> Any:
        """``data.draw(self)`` less its per-draw checks (validation, an empty strategy,
        a value to invert: none can apply to this one): the same span, then ``do_draw``."""
        data.start_span(self.label)
        try:
            return self.do_draw(data)
        finally:
            data.stop_span()

    def do_draw(self, data: Any) -> Any:
        data.start_span(MAPPED_SEARCH_STRATEGY_DO_DRAW_LABEL)
        raw = data.draw(self.bytes)
        data.stop_span()
        return self.decode(raw)

    def __repr__(self) -> str:
        return repr(self.reference)

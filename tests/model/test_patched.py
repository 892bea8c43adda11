"""``Patched`` (a snapshot's look-up patched by a step, INC-3) answers every question a
dict answers exactly as the dict it stands for: along chains of random changes, across
its folds into a plain dict, at every size."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from emq_model.snapshot import Patched

KEYS = st.integers(0, 40)
CHANGES = st.dictionaries(KEYS, st.none() | st.integers(0, 3), max_size=12)


def same(patched: Patched[int, int], plain: dict[int, int]) -> None:
    assert len(patched) == len(plain) and dict(patched) == plain
    assert sorted(patched) == sorted(plain)  # each key once
    for key in range(-1, 42):
        assert (key in patched) == (key in plain)
        assert patched.get(key, "none") == plain.get(key, "none")
        if key in plain:
            assert patched[key] == plain[key]
        else:
            with pytest.raises(KeyError):
                patched[key]


@given(st.dictionaries(KEYS, st.integers(0, 3)), st.lists(CHANGES, max_size=40))
def test_a_chain_of_patches_is_the_dict_it_stands_for(base: dict[int, int], changes: list[dict[int, Any]]) -> None:
    plain, patched = dict(base), Patched(base, {})
    for change in changes:
        patched = Patched(patched, change)
        for key, value in change.items():
            if value is None:
                plain.pop(key, None)
            else:
                plain[key] = value
        same(patched, plain)
    assert dict(Patched(base, {})) == base  # the base itself is never written


def test_a_long_chain_folds_and_stays_two_probes_deep(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Patched, "FOLD", 8)
    base = {n: n for n in range(1000)}
    patched = Patched(base, {})
    for n in range(100):
        patched = Patched(patched, {n: None, 1000 + n: n})
        assert isinstance(patched.base, dict) and len(patched.over) <= 8
    same(patched, {**{n: n for n in range(100, 1000)}, **{1000 + n: n for n in range(100)}})
    assert len(base) == 1000 and base[0] == 0

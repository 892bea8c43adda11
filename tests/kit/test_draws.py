"""The machine's cheap choices: ``Draw`` (a rule's arguments in one bytes choice) and
``Selection`` (its rule in one index choice, the swarm once per example)."""

from __future__ import annotations

import collections

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    precondition,
    rule,
    run_state_machine_as_test,
)

from emq_kit.check.base import Selection
from emq_kit.check.draws import MAX_OPTIONS, Draw

PAIR = Draw("Pair", colour=("red", "green", "blue"), size=range(1, 11))


def test_zeros_decode_to_every_fields_first_option() -> None:
    assert PAIR.decode(b"\x00\x00") == ("red", 1)


def test_each_byte_picks_its_own_field_modulo_the_options() -> None:
    assert PAIR.decode(bytes([4, 9])) == ("green", 10)
    assert PAIR.decode(bytes([255, 255])).colour == ("red", "green", "blue")[255 % 3]


def test_every_option_is_reachable_and_evenly_when_the_count_divides_256() -> None:
    draw = Draw("Four", x="abcd")
    counts = collections.Counter(draw.decode(bytes([b])).x for b in range(256))
    assert counts == {c: 64 for c in "abcd"}


@pytest.mark.parametrize("raw", [b"", b"\x00", b"\x00\x00\x00"])
def test_a_byte_string_of_the_wrong_length_is_refused(raw: bytes) -> None:
    with pytest.raises(ValueError, match="bytes for 2 fields"):
        PAIR.decode(raw)


@pytest.mark.parametrize("options", [(), tuple(range(MAX_OPTIONS + 1))])
def test_a_field_needs_1_to_256_options(options: tuple) -> None:
    with pytest.raises(ValueError, match="options"):
        Draw("Bad", x=options)


@given(PAIR.strategy)
def test_the_strategy_draws_decoded_tuples(pair) -> None:
    assert isinstance(pair, PAIR.tuple) and pair.colour in ("red", "green", "blue") and 1 <= pair.size <= 10


class Toy(RuleBasedStateMachine):
    """Four rules, one never valid: which rules each example runs, under ``Selection``."""

    runs: list[collections.Counter] = []

    def __init__(self) -> None:
        super().__init__()
        self._rules_strategy = Selection(self)
        self.ran: collections.Counter = collections.Counter()
        Toy.runs.append(self.ran)

    @rule(a=PAIR.strategy)
    def one(self, a) -> None:
        self.ran["one"] += 1

    @rule()
    def two(self) -> None:
        self.ran["two"] += 1

    @rule(x=st.integers(0, 3))
    def three(self, x: int) -> None:
        self.ran["three"] += 1

    @precondition(lambda self: False)
    @rule()
    def never(self) -> None:
        self.ran["never"] += 1


def test_selection_honours_preconditions_swarms_and_reaches_every_valid_rule() -> None:
    Toy.runs = []
    run_state_machine_as_test(Toy, settings=settings(
        max_examples=150, stateful_step_count=30, database=None, deadline=None,
        suppress_health_check=list(HealthCheck), phases=[Phase.generate]))
    used = [set(r) for r in Toy.runs if sum(r.values()) >= 10]
    assert used, "no example ran 10 steps"
    assert all("never" not in u for u in used)  # a false precondition is never chosen
    assert set().union(*used) == {"one", "two", "three"}
    assert any(len(u) < 3 for u in used)  # the swarm switches rules off in some examples
    assert any(len(u) == 3 for u in used)  # and leaves all on in others


# -- the fence around Hypothesis's private API ----------------------------------------------
# ``Selection`` takes over ``RuleBasedStateMachine._rules_strategy``, which Hypothesis does
# not promise to keep reading. These fail when it stops: the rules would still run, drawn
# by Hypothesis's own strategy, and every other test would still pass.


class Counted(Toy):
    """``Toy``, keeping each example's ``Selection`` to count what it drew."""

    made: list["Counted"] = []

    def __init__(self) -> None:
        super().__init__()
        Counted.made.append(self)


def test_selection_is_the_strategy_that_draws_every_rule() -> None:
    Counted.made = []
    run_state_machine_as_test(Counted, settings=settings(
        max_examples=30, stateful_step_count=20, database=None, deadline=None,
        suppress_health_check=list(HealthCheck), phases=[Phase.generate]))
    assert sum(sum(m.ran.values()) for m in Counted.made) > 0
    for m in Counted.made:
        assert m._rules_strategy.drawn == sum(m.ran.values())


def test_the_conformance_machine_draws_through_selection() -> None:
    from emq_kit.check.machine import Conformance
    from emq_kit.check.model_target import ModelTarget
    from emq_kit.check.tally import Run

    made: list[Conformance] = []
    base = Conformance.factory(ModelTarget(), Run())

    def factory() -> Conformance:
        made.append(base())
        return made[-1]

    run_state_machine_as_test(factory, settings=settings(
        max_examples=10, stateful_step_count=20, database=None, deadline=None,
        suppress_health_check=list(HealthCheck), phases=[Phase.generate]))
    assert sum(m._rules_strategy.drawn for m in made) >= sum(len(m.steps) > 0 for m in made) > 0
    for m in made:  # an example that stepped drew its rules through Selection
        assert m._rules_strategy.drawn > 0 or not m.steps


class Stuck(RuleBasedStateMachine):
    """A machine whose only rule never holds."""

    def __init__(self) -> None:
        super().__init__()
        self._rules_strategy = Selection(self)

    @precondition(lambda self: False)
    @rule()
    def never(self) -> None:
        pass


def test_no_runnable_rule_is_hypothesiss_own_error() -> None:
    from hypothesis.errors import InvalidDefinition

    with pytest.raises(InvalidDefinition, match="No progress can be made"):
        run_state_machine_as_test(Stuck, settings=settings(
            max_examples=1, database=None, deadline=None, suppress_health_check=list(HealthCheck),
            phases=[Phase.generate]))

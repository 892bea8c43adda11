"""The contract documents agree with the table the code reads."""

from __future__ import annotations

from emq_model import spec, spec_table


def test_lifecycle_md_carries_the_generated_table() -> None:
    document = spec.text("lifecycle.md")
    assert spec_table.render(document) == document, "run: python -m emq_model.spec_table specs/lifecycle.md"


def test_the_table_has_a_row_per_op_citing_its_rule() -> None:
    rows = spec_table.table().splitlines()[2:]
    assert len(rows) == len(spec.OPS)
    for row, (op, d) in zip(rows, spec.OPS.items()):
        assert row.startswith(f"| {op} | `{d['rule']}` |")


def test_every_rule_the_table_cites_is_in_the_prose() -> None:
    document = spec.text("lifecycle.md")
    for d in spec.OPS.values():
        assert d["rule"] in document.split(spec_table.BEGIN)[0], d["rule"]


def test_the_lane_table_has_a_row_per_lane_op_citing_its_rule() -> None:
    rows = spec_table.table(spec.LANE_OPS).splitlines()[2:]
    assert [r.split(" | ")[0] for r in rows] == [f"| {op}" for op in spec.LANE_OPS]
    prose = spec.text("lifecycle.md").split(spec_table.BEGIN_LANES)[0]
    for d in spec.LANE_OPS.values():
        assert f"`{d['rule']}`" in prose and f"**{d['rule']}-1**" in prose, d["rule"]

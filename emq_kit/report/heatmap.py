"""A check's coverage drawn: the op × outcome matrix as an inline SVG heat map, a row per
op and a column per outcome, each cell of the contract shaded by its hits (log scale),
an unreached cell outlined in red with a 0, a cell the target was sent no call for
(not implemented, DP-9e) or that the focus leaves out grey with its mark. A pair that is
no cell of the contract is left blank. Pure: text in, text out."""

from __future__ import annotations

import html
import math
from typing import Iterable, Mapping

from emq_model import spec

CELL_W, CELL_H, LEFT, TOP = 48, 22, 110, 90
REACHED, UNREACHED, NOT_IMPLEMENTED, OUT_OF_FOCUS = "reached", "unreached", "not-implemented", "out-of-focus"
MARKS = {UNREACHED: "0", NOT_IMPLEMENTED: "n/i", OUT_OF_FOCUS: "off"}


def _cell(name: str) -> tuple[str, str]:
    op, _, outcome = name.partition("/")
    return op, outcome


def cells(hits: Mapping[str, int], unreached: Iterable[str], not_implemented: Iterable[str],
          out_of_focus: Iterable[str] = ()) -> dict[tuple[str, str], tuple[str, int]]:
    """Every cell of the run's matrix (``op/outcome`` names as the report writes them)
    with its state and its hits; a cell hit is reached whatever else lists it."""
    out: dict[tuple[str, str], tuple[str, int]] = {}
    for state, names in ((OUT_OF_FOCUS, out_of_focus), (NOT_IMPLEMENTED, not_implemented), (UNREACHED, unreached)):
        for name in names:
            out[_cell(name)] = (state, 0)
    for name, n in hits.items():
        if n:
            out[_cell(name)] = (REACHED, n)
    return out


def _shade(n: int, most: int) -> str:
    """A blue whose depth grows with log(hits): 1 hit is pale, ``most`` is deep."""
    t = math.log1p(n) / math.log1p(max(most, 1))
    light, dark = (222, 235, 250), (16, 78, 160)
    r, g, b = (round(a + (z - a) * t) for a, z in zip(light, dark))
    return f"#{r:02x}{g:02x}{b:02x}"


def split(matrix: Mapping[tuple[str, str], tuple[str, int]]) -> list[dict[tuple[str, str], tuple[str, int]]]:
    """``matrix`` as the ops' matrix and the raw calls' (their outcomes are kinds of
    call past the client, no other op's: one matrix of both would be mostly blank)."""
    parts = [{c: v for c, v in matrix.items() if c[0] != "raw"}, {c: v for c, v in matrix.items() if c[0] == "raw"}]
    return [p for p in parts if p]


def heatmap(matrix: Mapping[tuple[str, str], tuple[str, int]]) -> str:
    """The SVG of ``matrix`` (from ``cells``): ops and outcomes in the contract's order
    (specs/transitions.json), the answers first and the refusals (``EMQ*``) after."""
    if not matrix:
        return "<p>no coverage recorded</p>"
    order = {c: n for n, c in enumerate(spec.cells() + spec.lane_cells())}
    ranked = sorted(matrix, key=lambda c: order.get(c, len(order)))
    ops = list(dict.fromkeys(op for op, _ in ranked))
    seen = list(dict.fromkeys(o for _, o in ranked))
    outcomes = [o for o in seen if not o.startswith("EMQ")] + [o for o in seen if o.startswith("EMQ")]
    most = max((n for _, n in matrix.values()), default=1)
    width, height = LEFT + CELL_W * len(outcomes) + 48, TOP + CELL_H * len(ops) + 30  # room for the last label
    counts = {s: sum(1 for st, _ in matrix.values() if st == s) for s in (REACHED, UNREACHED, NOT_IMPLEMENTED,
                                                                         OUT_OF_FOCUS)}
    label = (f"coverage: {counts[REACHED]} cells reached, {counts[UNREACHED]} unreached, "
             f"{counts[NOT_IMPLEMENTED]} not implemented, {counts[OUT_OF_FOCUS]} out of focus")
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="coverage" width="{width}" height="{height}" '
           f'role="img" aria-label="{html.escape(label)}"><title>{html.escape(label)}</title>']
    for x, outcome in enumerate(outcomes):
        cx = LEFT + x * CELL_W + CELL_W // 2
        out.append(f'<text x="{cx}" y="{TOP - 6}" transform="rotate(-45 {cx} {TOP - 6})">{html.escape(outcome)}</text>')
    for y, op in enumerate(ops):
        cy = TOP + y * CELL_H
        out.append(f'<text x="4" y="{cy + 15}">{html.escape(op)}</text>')
        for x, outcome in enumerate(outcomes):
            if (op, outcome) not in matrix:
                continue
            state, n = matrix[(op, outcome)]
            cx = LEFT + x * CELL_W
            fill = {REACHED: _shade(n, most), UNREACHED: "#fff", NOT_IMPLEMENTED: "#d6d6d6",
                    OUT_OF_FOCUS: "#eeeeee"}[state]
            stroke = ' stroke="#b00020" stroke-width="2"' if state == UNREACHED else ' stroke="#fff"'
            text = f"{n:,}" if state == REACHED else MARKS[state]
            ink = "#fff" if state == REACHED and math.log1p(n) / math.log1p(max(most, 1)) > 0.55 else (
                "#b00020" if state == UNREACHED else "#1b1b1b")
            name = html.escape(f"{op}/{outcome}")
            out.append(f'<g class="cell {state}" data-cell="{name}" data-hits="{n}">'
                       f'<rect x="{cx + 1}" y="{cy + 1}" width="{CELL_W - 2}" height="{CELL_H - 2}" fill="{fill}"'
                       f'{stroke}><title>{name}: {text if state == REACHED else state}</title></rect>'
                       f'<text x="{cx + CELL_W // 2}" y="{cy + 15}" text-anchor="middle" fill="{ink}">{text}</text></g>')
    legend_y = TOP + CELL_H * len(ops) + 20
    out.append(f'<text x="4" y="{legend_y}">hits per cell (log shade); 0 = unreached (red), '
               f'n/i = not implemented, off = out of focus</text></svg>')
    return "".join(out)

"""The node x node matrix of a sweep, per rail: each cell a pair's bandwidth as a share of the rail's
median (:class:`MatrixGrid`), in blocks of ranks when the fleet is larger than the drawing, and its
lines for a terminal (:func:`matrix_lines`). :mod:`~ibdiag.sweep.chart` draws the same grid as SVG and PNG.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ibdiag.sweep.model import SweepResult
from ibdiag.sweep.stats import gbs_text

if TYPE_CHECKING:  # rich only where the matrix is drawn on a terminal
    from rich.text import Text

FAILED = -1.0
"""Cell value of a pair whose test failed."""


@dataclass(frozen=True)
class MatrixGrid:
    """A rail's node x node matrix, possibly in blocks of ``block`` ranks (the worst pair of each block).

    ``cells[i][j]``: bandwidth as a share of the rail's median (1.0 = typical), :data:`FAILED`, or None
    (not tested). The matrix is symmetric; the diagonal is None.
    """

    rail: int
    block: int
    nodes: int
    cells: tuple[tuple[float | None, ...], ...]
    median_gbs: float | None

    @property
    def size(self) -> int:
        return len(self.cells)


def matrix_grid(result: SweepResult, rail: int, *, max_cells: int = 64) -> MatrixGrid:
    """The matrix of ``rail`` in at most ``max_cells`` x ``max_cells`` cells."""
    n = len(result.nodes)
    block = max(1, math.ceil(n / max(1, max_cells)))
    size = math.ceil(n / block)
    stats = result.analysis.rail(rail)
    median = stats.bw.median if stats else None
    cells: list[list[float | None]] = [[None] * size for _ in range(size)]
    for link in result.analysis.links:
        if link.rail != rail:
            continue
        if link.failed:
            value = FAILED
        elif link.bw_gbs is None or not median:
            continue
        else:
            value = link.bw_gbs / median
        i, j = link.a // block, link.b // block
        for x, y in ((i, j), (j, i)):
            cur = cells[x][y]
            if cur is None or value < cur:
                cells[x][y] = value
    return MatrixGrid(rail, block, n, tuple(tuple(row) for row in cells), median)


#: (lowest share of the median, rich style, ASCII character, legend text), best first.
LEVELS: tuple[tuple[float, str, str, str], ...] = (
    (0.9, "green", ".", ">= 0.9 x median"),
    (0.75, "yellow", "o", "0.75-0.9"),
    (0.5, "dark_orange", "O", "0.5-0.75"),
    (0.0, "red", "@", "< 0.5"),
)


def level(value: float | None) -> tuple[str, str]:
    """(rich style, ASCII character) of a cell."""
    if value is None:
        return ("grey23", " ")
    if value <= FAILED:
        return ("bold magenta", "X")
    for low, style, char, _ in LEVELS:
        if value >= low:
            return (style, char)
    return (LEVELS[-1][1], LEVELS[-1][2])


def matrix_lines(grid: MatrixGrid, *, ascii_only: bool = False) -> list[Text]:
    """The matrix as lines for a terminal: rich Text with coloured blocks, or plain ASCII characters.

    Rows and columns are ranks (blocks of ranks when the fleet is wider than the terminal); the
    header marks every tenth column.
    """
    from rich.text import Text  # lazy: rich, for the table output only (start-up of -o json)

    label_w = len(str(max(0, grid.nodes - 1)))
    out: list[Text] = []
    what = f"rail {grid.rail}" + (
        f", each cell the worst pair of {grid.block} x {grid.block} ranks" if grid.block > 1 else ""
    )
    median = gbs_text(grid.median_gbs)
    out.append(Text(f"node x node bandwidth, {what} (median {median})"))
    ticks = "".join("|" if c % 10 == 0 else " " for c in range(grid.size))
    out.append(Text(" " * (label_w + 1) + ticks))
    for i, row in enumerate(grid.cells):
        line = Text(f"{i * grid.block:>{label_w}} ")
        for j, value in enumerate(row):
            style, char = level(value)
            if i == j:
                line.append("\\" if ascii_only else "╲", style="grey50")
            elif ascii_only:
                line.append(char)
            else:
                line.append("█" if value is not None else "·", style=style)
        out.append(line)
    legend = "  ".join(f"{char if ascii_only else '█'} {text}" for _, _, char, text in LEVELS)
    legend_text = Text(" " * (label_w + 1))
    if ascii_only:
        legend_text.append(legend + "  X failed  (blank) not tested")
    else:
        for _, style, _, text in LEVELS:
            legend_text.append("█", style=style)
            legend_text.append(f" {text}  ")
        legend_text.append("X", style="bold magenta")
        legend_text.append(" failed  · not tested")
    out.append(legend_text)
    return out

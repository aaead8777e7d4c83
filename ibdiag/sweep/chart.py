"""The sweep matrix as an image: PNG through matplotlib (imported only here), SVG by hand (no library).

Both draw :class:`~ibdiag.sweep.matrix.MatrixGrid` cells coloured by bandwidth as a share of the rail's
median: green (typical) to red (half or less), magenta for a failed test, grey for not tested.
"""

from __future__ import annotations

import html
import io
from collections.abc import Sequence

from ibdiag.errors import NotSupportedError
from ibdiag.sweep.matrix import FAILED, MatrixGrid
from ibdiag.sweep.stats import gbs_text

#: (lowest share of the median, colour), best first; one palette for PNG, SVG and the tests that look for it.
PALETTE: tuple[tuple[float, str], ...] = (
    (0.9, "#1a9850"),
    (0.75, "#d9ef8b"),
    (0.5, "#fc8d59"),
    (0.0, "#d73027"),
)
FAILED_COLOUR = "#c51b7d"
UNTESTED_COLOUR = "#e8e8e8"
DIAGONAL_COLOUR = "#bdbdbd"


def cell_colour(value: float | None) -> str:
    if value is None:
        return UNTESTED_COLOUR
    if value <= FAILED:
        return FAILED_COLOUR
    for low, colour in PALETTE:
        if value >= low:
            return colour
    return PALETTE[-1][1]


#: Cell sizes of the SVG matrix: at least 6 px (96 cells fit 720 px), at most 32 px (2 nodes stay legible).
MIN_CELL_PX, MAX_CELL_PX, MATRIX_PX = 6, 32, 720


#: Cells at least this wide hold their mark's label; smaller ones have it right of the matrix.
LABEL_INSIDE_PX = 20
_HALO = 'fill="#000" stroke="#fff" stroke-width="3" paint-order="stroke"'


def _marks(marks: Sequence[tuple[int, int, str]], px: int, side: int) -> tuple[list[str], int]:
    """The SVG of ``marks`` (inside the matrix's translated group) and the width its labels add."""
    out = []
    if px >= LABEL_INSIDE_PX:
        for i, j, text in marks:
            out.append(
                f'<rect class="mark" x="{j * px + 1}" y="{i * px + 1}" width="{px - 2}" height="{px - 2}" '
                'fill="none" stroke="#000" stroke-width="2"/>'
                f'<text class="mark-label" x="{j * px + px / 2:g}" y="{i * px + px / 2 + 4:g}" font-size="11" '
                f'font-weight="bold" text-anchor="middle" {_HALO}>{html.escape(text)}</text>'
            )
        return out, 0
    rows: dict[int, list[tuple[int, str]]] = {}
    for i, j, text in marks:
        out.append(
            f'<rect class="mark" x="{j * px - 1.5:g}" y="{i * px - 1.5:g}" width="{px + 3}" height="{px + 3}" '
            'fill="none" stroke="#000" stroke-width="1.5"/>'
        )
        rows.setdefault(i, []).append((j, text))
    width = 0
    for i, cells in sorted(rows.items()):
        text = ",".join(t for _, t in sorted(cells))
        width = max(width, int(len(text) * 6.5) + 8)
        out.append(
            f'<text class="mark-label" x="{side + 4}" y="{i * px + px / 2 + 3.5:g}" font-size="10" '
            f'font-weight="bold" {_HALO}>{html.escape(text)}</text>'
        )
    return out, width


def matrix_svg(
    grid: MatrixGrid,
    *,
    cell_px: int | None = None,
    title: str | None = None,
    marks: Sequence[tuple[int, int, str]] = (),
) -> str:
    """An ``<svg>`` element of the matrix, for inline use in an HTML page (no namespace, no external references).

    ``marks``: (row, column, label) cells outlined in black and labelled (the page lists what each
    label names): the worst links. Cells of :data:`LABEL_INSIDE_PX` or more hold their label (with a
    white halo); smaller cells are ringed and their row's labels stand right of the matrix, in column
    order, so that no label covers a cell."""
    size = max(grid.size, 1)
    px = cell_px or max(MIN_CELL_PX, min(MAX_CELL_PX, MATRIX_PX // size))
    margin = 40
    side = size * px
    label = f"rail {grid.rail}: rank x rank" + (
        f", cells of {grid.block} x {grid.block} ranks (worst pair)" if grid.block > 1 else ""
    )
    mark_parts, mark_width = _marks(marks, px, side)
    # wide enough for the caption (11 px text, ~6.5 px a character) and the row labels: never clipped
    width = max(side + margin + 4 + mark_width, margin + int(len(label) * 6.5) + 8)
    out = [
        f'<svg class="matrix" width="{width}" height="{side + margin + 24}" '
        f'viewBox="0 0 {width} {side + margin + 24}" role="img" aria-label="{html.escape(title or f"rail {grid.rail} matrix")}">'
    ]
    if title:
        out.append(f"<title>{html.escape(title)}</title>")
    out.append(f'<g transform="translate({margin},{margin})">')
    for i, row in enumerate(grid.cells):
        for j, value in enumerate(row):
            colour = DIAGONAL_COLOUR if i == j else cell_colour(value)
            out.append(
                f'<rect x="{j * px}" y="{i * px}" width="{px}" height="{px}" fill="{colour}"/>'
            )
    out += mark_parts
    out.append("</g>")
    step = max(1, size // 8)
    for k in range(0, size, step):
        rank = k * grid.block
        centre = k * px + px / 2  # each label at its row's and column's middle
        out.append(
            f'<text x="{margin - 4}" y="{margin + centre + 3.5:g}" font-size="10" text-anchor="end">{rank}</text>'
        )
        out.append(
            f'<text x="{margin + centre:g}" y="{margin - 6}" font-size="10" text-anchor="middle">{rank}</text>'
        )
    out.append(
        f'<text x="{margin}" y="{side + margin + 16}" font-size="11">{html.escape(label)}</text>'
    )
    out.append("</svg>")
    return "".join(out)


def matrix_png(grids: Sequence[MatrixGrid], *, title: str = "") -> bytes:
    """One PNG with a panel per rail (matplotlib's Agg backend; needs ``pip install 'ibdiag[chart]'``)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.colors import BoundaryNorm, ListedColormap
    except ImportError:
        raise NotSupportedError(
            "--png needs matplotlib, which is not installed", hint="pip install 'ibdiag[chart]'"
        ) from None
    cols = min(4, len(grids)) or 1
    rows = (len(grids) + cols - 1) // cols or 1
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 4 * rows + 0.6), squeeze=False)
    # Colour bands: failed < 0 <= red < 0.5 <= orange < 0.75 <= light green < 0.9 <= green.
    colours = [FAILED_COLOUR] + [c for _, c in reversed(PALETTE)]
    cmap = ListedColormap(colours).with_extremes(bad=UNTESTED_COLOUR)
    norm = BoundaryNorm([-2.0, -0.5, 0.5, 0.75, 0.9, 10.0], cmap.N)
    for ax in axes.flat:
        ax.set_visible(False)
    for ax, grid in zip(axes.flat, grids, strict=False):
        ax.set_visible(True)
        data = [
            [float("nan") if (v is None or i == j) else v for j, v in enumerate(row)]
            for i, row in enumerate(grid.cells)
        ]
        extent = (0, grid.size * grid.block, grid.size * grid.block, 0)
        ax.imshow(data, cmap=cmap, norm=norm, interpolation="nearest", extent=extent)
        median = gbs_text(grid.median_gbs)
        ax.set_title(f"rail {grid.rail} (median {median})", fontsize=10)
        ax.set_xlabel("rank")
        ax.set_ylabel("rank")
    fig.suptitle(
        title
        or "bandwidth / rail median: green typical, red <= half, magenta failed, grey not tested",
        fontsize=10,
    )
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return buf.getvalue()

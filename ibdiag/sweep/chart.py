"""The sweep matrix as an image: PNG through matplotlib (imported only here), SVG by hand (no library).

Both draw :class:`~ibdiag.sweep.render.MatrixGrid` cells coloured by bandwidth as a share of the rail's
median: green (typical) to red (half or less), magenta for a failed test, grey for not tested.
"""

from __future__ import annotations

import html
import io
from collections.abc import Sequence

from ibdiag.errors import NotSupportedError
from ibdiag.sweep.render import FAILED, MatrixGrid
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


def matrix_svg(grid: MatrixGrid, *, cell_px: int | None = None, title: str | None = None) -> str:
    """An ``<svg>`` element of the matrix, for inline use in an HTML page (no namespace, no external references)."""
    size = max(grid.size, 1)
    px = cell_px or max(
        6, min(24, 720 // size)
    )  # readable: at least 6 px a cell, up to 720 px a side
    margin = 40
    side = size * px
    label = f"rail {grid.rail}: rank x rank" + (
        f", cells of {grid.block} x {grid.block} ranks (worst pair)" if grid.block > 1 else ""
    )
    # wide enough for the caption (11 px text, ~6.5 px a character): never clipped
    width = max(side + margin + 4, margin + int(len(label) * 6.5) + 8)
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
    out.append("</g>")
    step = max(1, size // 8)
    for k in range(0, size, step):
        rank = k * grid.block
        out.append(
            f'<text x="{margin - 4}" y="{margin + k * px + px}" font-size="10" text-anchor="end">{rank}</text>'
        )
        out.append(f'<text x="{margin + k * px}" y="{margin - 6}" font-size="10">{rank}</text>')
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

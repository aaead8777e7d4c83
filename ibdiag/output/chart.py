"""Terminal charts: horizontal bars people can read over ssh, no plotting library needed; and the one
check that a PNG chart can be drawn (matplotlib, an extra) before a command does any work."""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence

from ibdiag.errors import CannotRunError


def need_matplotlib(flag: str, instead: str) -> None:
    """CannotRunError (exit 3) naming ``flag`` when matplotlib is not installed; ``instead`` is the
    alternative the hint offers."""
    if importlib.util.find_spec("matplotlib") is None:
        raise CannotRunError(
            f"{flag} needs matplotlib, which is not installed",
            hint=f"pip install 'ibdiag[chart]' (or matplotlib), or {instead}",
        )


_BLOCKS = " ▏▎▍▌▋▊▉█"


def hbar_chart(
    rows: Sequence[tuple[str, float | None]],
    *,
    unit: str,
    width: int = 50,
    maximum: float | None = None,
    marker: float | None = None,
    marker_label: str = "",
) -> str:
    """One bar per ``(label, value)``; ``None`` values show as ``n/a``.

    ``marker`` draws a ``|`` at that value on every bar (a line rate, a ceiling) and is explained
    under the chart with ``marker_label``.
    """
    values = [v for _, v in rows if v is not None]
    top = maximum if maximum is not None else max([*values, marker or 0.0, 0.0])
    if top <= 0:
        top = 1.0
    label_w = max((len(label) for label, _ in rows), default=0)
    lines = []
    mark_col = None if marker is None else min(width - 1, int(round(marker / top * width)))
    for label, value in rows:
        if value is None:
            lines.append(f"{label.rjust(label_w)} │ n/a")
            continue
        cells = max(0.0, min(value / top, 1.0)) * width
        full = int(cells)
        frac = int(round((cells - full) * 8))
        bar = "█" * full + (_BLOCKS[frac] if frac and full < width else "")
        bar = bar.ljust(width)
        if mark_col is not None and bar[mark_col] == " ":
            bar = bar[:mark_col] + "|" + bar[mark_col + 1 :]
        lines.append(f"{label.rjust(label_w)} │{bar} {value:.4g} {unit}")
    if marker is not None:
        lines.append(
            f"{'':>{label_w}}  {'|' + ' ' * 1}= {marker:.4g} {unit} {marker_label}".rstrip()
        )
    return "\n".join(lines)

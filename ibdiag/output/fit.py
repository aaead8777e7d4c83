"""Tables that stay readable in a narrow terminal: the names are never squeezed, free text folds,
and the least useful columns are left out (and said so) when the rest would not fit.

rich, given a table wider than the console, shrinks every column that may shrink: at 80 columns
``topo``'s GPU and adapter names went to nothing and the rows could no longer be told apart (issue
38). Here a table declares, per column, whether it may be dropped and in which order
(:class:`Col`), and :func:`fitted_table` keeps what fits in ``width``: names (``drop=0``) at their full
width, foldable text (``fold=True``) wrapped, then drops columns from the highest ``drop`` down. A
caption names what was left out. Off a terminal the layout width is wide enough for everything.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:  # rich only where a table is drawn
    from rich.console import RenderableType
    from rich.table import Table

#: What rich's default box adds to a table: one border before each column and after the last, and
#: one space of padding on each side of a cell.
BORDER_AND_PADDING = 3
#: A folded column keeps at least this many characters (or its header's, or its longest word's).
FOLD_MIN = 12


@dataclass(frozen=True)
class Col:
    header: str
    drop: int = 0
    """0: never left out (the names that tell the rows apart); n > 0: left out when the table does
    not fit, the highest n first."""
    fold: bool = False
    """Free text that may wrap onto several lines (a list of ports, a message) instead of being cut."""
    justify: Literal["left", "right"] = "left"


def _fold_min(col: Col, natural: int, longest_word: int) -> int:
    return min(natural, max(len(col.header), FOLD_MIN, longest_word))


def choose_columns(
    cols: Sequence[Col],
    natural: Sequence[int],
    longest_word: Sequence[int],
    width: int,
) -> list[int]:
    """Indices of the columns kept so that the table fits ``width`` (cells ``natural`` wide at most,
    a folded column at least its longest word); every ``drop=0`` column is kept even if it does not."""
    kept = list(range(len(cols)))

    def need(idx: list[int]) -> int:
        return 1 + sum(
            (_fold_min(cols[i], natural[i], longest_word[i]) if cols[i].fold else natural[i])
            + BORDER_AND_PADDING
            for i in idx
        )

    while need(kept) > width:
        droppable = [i for i in kept if cols[i].drop > 0]
        if not droppable:
            break
        victim = max(droppable, key=lambda i: (cols[i].drop, i))
        kept.remove(victim)
    return kept


def _plain(cell: RenderableType | str) -> str:
    from rich.text import Text  # lazy: rich, for the table output only

    return cell.plain if isinstance(cell, Text) else str(cell)


def fitted_table(
    title: str,
    cols: Sequence[Col],
    rows: Sequence[Sequence[RenderableType | str]],
    width: int | None,
    *,
    caption: str | None = None,
) -> Table:
    """A rich table of ``rows`` that fits ``width`` columns (None: no limit) as the module says."""
    from rich.table import Table  # lazy: rich, for the table output only

    texts = [[_plain(c) for c in row] for row in rows]
    natural = [
        max([len(col.header), *(max(map(len, t[i].split("\n")), default=0) for t in texts)])
        for i, col in enumerate(cols)
    ]
    words = [
        max([len(col.header), *(len(w) for t in texts for w in t[i].split())], default=0)
        for i, col in enumerate(cols)
    ]
    kept = list(range(len(cols))) if width is None else choose_columns(cols, natural, words, width)
    left_out = [cols[i].header for i in range(len(cols)) if i not in kept]
    notes = [caption] if caption else []
    if left_out:
        notes.append(
            f"at {width} columns, left out: {', '.join(left_out)} (a wider terminal or -o json shows them)"
        )
    t = Table(
        title=title,
        title_justify="left",
        caption="\n".join(notes) or None,
        caption_justify="left",
    )
    for i in kept:
        col = cols[i]
        t.add_column(
            col.header,
            justify=col.justify,
            no_wrap=not col.fold,
            overflow="fold",
            min_width=natural[i] if col.drop == 0 and not col.fold else None,
        )
    for row in rows:
        t.add_row(*(row[i] for i in kept))
    return t

"""The rich console of this run's stdout or stderr, laid out for its terminal or pipe, and printing on it.

rich is imported here and only when a table, a progress bar or a live view is drawn: ``ibdiag topo -o
json`` never loads it (tests/boundary/test_packaging.py).
"""

from __future__ import annotations

from typing import IO, TYPE_CHECKING, Literal

from ibdiag.cli.env import current

if TYPE_CHECKING:
    from rich.console import Console, RenderableType


def console(stream: Literal["stdout", "stderr"] | IO[str] = "stdout") -> Console:
    """A rich console on this run's ``stream`` ("stdout" or "stderr"; or a file, laid out as a pipe),
    laid out for its terminal (or pipe)."""
    from rich.console import Console  # lazy: rich (start-up time of the JSON and line outputs)

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            # rich exits 1 when the reader goes away; ibdiag keeps 1 for "failing finding".
            raise BrokenPipeError

    e = current().env
    if isinstance(stream, str):
        out = e.stdout if stream == "stdout" else e.stderr
        tty = e.stdout_isatty if stream == "stdout" else e.stderr_isatty
        width = e.width(stream)
    else:
        out, tty, width = stream, False, e.width("file")
    # Colour on a terminal only; NO_COLOR (non-empty) turns it off there, FORCE_COLOR (non-empty) on anywhere.
    no_color = bool(e.environ.get("NO_COLOR"))
    force = tty or (bool(e.environ.get("FORCE_COLOR")) and not no_color)
    # markup and emoji off: a string printed is data (a PCI address 0000:ab:00.0 must not become 0000🆎00.0,
    # a firmware string "[bold]" must not restyle the table); styling comes from Text styles only.
    return _Console(
        file=out,
        width=width,
        highlight=False,
        markup=False,
        emoji=False,
        soft_wrap=False,
        force_terminal=force,
        no_color=no_color or None,
        _environ=dict(e.environ),
    )


def console_print(con: Console, item: RenderableType) -> None:
    """Print ``item`` on ``con``. A Text marked no_wrap (a value to copy, a matrix) is written whole: the
    terminal folds it, a pipe keeps it. Off a terminal without $COLUMNS a table that does not fit the
    layout width is printed at its natural width: a file or a log never has a host name cut to ``gpu-no…``."""
    from rich.measure import Measurement  # lazy: rich, as above

    e = current().env
    width = None
    if not e.stdout_isatty and e.columns is None and not e.environ.get("COLUMNS"):
        need = Measurement.get(con, con.options.update_width(1 << 20), item)
        # rich's layout at the minimum still shortens some cells: a table that does not fit gets its
        # natural width, each row on one line
        width = need.maximum if need.minimum > con.width else None
    soft_wrap = getattr(item, "no_wrap", None) is True
    if width is None:
        con.print(item, soft_wrap=soft_wrap)
        return
    layout = con.width  # print(width=) is capped at the console's width: widen the console
    con.width = width
    try:
        con.print(item, soft_wrap=soft_wrap)
    finally:
        con.width = layout


def table_width() -> int:
    """Columns the table output will be printed in (the terminal's, else $COLUMNS, else wide enough to cut nothing)."""
    return int(console("stdout").width)

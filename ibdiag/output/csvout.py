"""CSV in long form: one header, one row per record, so ``pandas.read_csv`` loads it directly.

Every command's CSV comes through :func:`render_csv`, which keeps a spreadsheet from running a cell:
a text that begins with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return is a formula to Excel,
LibreOffice and Google Sheets (``=HYPERLINK(...)`` in a node description, a host name or a log line),
so it is written with a ``'`` in front, as OWASP's "CSV Injection" page advises. Numbers stay as they
are: a value ibdiag holds as a number (``-3``, ``-0.5``, ``-inf``), and a text that is a plain decimal
number (``-3``, ``+1.5e-3``: a sign, digits, one point, an exponent), which a spreadsheet reads as that
number and never as a formula.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

#: What starts a formula in a spreadsheet cell (OWASP, CSV Injection): the cell gets a leading ``'``.
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
#: A plain decimal number, written as text (``-3``, ``-0.25``, ``+1e-3``): kept, it is no formula.
_DECIMAL = re.compile(
    r"[+-]?(?:[0-9]{1,64}(?:\.[0-9]{0,64})?|\.[0-9]{1,64})(?:[eE][+-]?[0-9]{1,4})?"
)


def safe_cell(value: Any) -> Any:
    """``value`` as a CSV cell no spreadsheet evaluates: None is empty, a number is itself, a text that
    would start a formula gets a leading ``'`` (unless it is a plain decimal number)."""
    if value is None:
        return ""
    if isinstance(value, (int, float)):  # bool too: True, False
        return value
    text = value if isinstance(value, str) else str(value)
    if text.startswith(FORMULA_START) and not _DECIMAL.fullmatch(text):
        return "'" + text
    return text


def render_csv(header: Sequence[str], rows: Iterable[Mapping[str, Any]]) -> str:
    """The rows under ``header``, one line each (ending in ``\n``). A cell holding a line break of
    either kind is quoted: the writer's terminator is ``\r\n`` so that ``csv`` quotes a lone ``\r``
    too (with ``\n`` alone it would not, and a reader would split the row there)."""
    buf = io.StringIO()
    writer = csv.DictWriter(
        buf, fieldnames=list(header), extrasaction="raise", lineterminator="\r\n"
    )
    lines: list[str] = []

    def take() -> None:
        lines.append(buf.getvalue()[:-2] + "\n")
        buf.seek(0)
        buf.truncate()

    writer.writeheader()
    take()
    for row in rows:
        writer.writerow({k: safe_cell(v) for k, v in row.items()})
        take()
    return "".join(lines)

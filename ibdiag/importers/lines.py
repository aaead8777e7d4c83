"""Lines of a log as launchers leave them: prefixes stripped, and the tag that says which process wrote each.

* ``mpirun --tag-output`` (Open MPI): ``[1,0]<stdout>:`` -> tag ``1,0`` (job, rank)
* ``mpiexec -prepend-rank`` (MPICH, Intel MPI) and similar: ``[0] `` -> tag ``0``
* ``srun --label``: ``0: `` -> tag ``0``

A line without a prefix has tag None. Also the cell readers every table importer uses (:func:`number`,
:func:`whole`). Pure functions of text.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from ibdiag.errors import InputError

_OMPI = re.compile(r"^\[(\d+),(\d+)\]<(stdout|stderr|stddiag)>:\s?")
_RANK = re.compile(r"^\[(\d+)\]\s")
_SRUN = re.compile(r"^\s*(\d+):\s")


@dataclass(frozen=True)
class Line:
    number: int
    """1-based line number in the file."""
    text: str
    """The line without its prefix and line ending."""
    tag: str | None
    """Who wrote it, from the prefix (``1,0``, ``0``), or None."""
    raw: str


def split_lines(text: str) -> list[Line]:
    """Every line with its number, prefix removed. Tabs are kept (rows may contain them)."""
    out: list[Line] = []
    for i, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip("\r\n")
        tag: str | None = None
        m = _OMPI.match(line)
        if m:
            tag = f"{m.group(1)},{m.group(2)}"
            line = line[m.end() :]
        else:
            m = _RANK.match(line)
            if m:
                tag = m.group(1)
                line = line[m.end() :]
            else:
                m = _SRUN.match(line)
                if m:
                    tag = m.group(1)
                    line = line[m.end() :]
        out.append(Line(i, line.rstrip(), tag, raw))
    return out


def number(tok: object, where: str, col: str, hint: str) -> float:
    """A table cell (a token, or a JSON value) as a finite, non-negative number.

    InputError naming ``where`` (``file:line``) and the column: unreadable (``hint``), or NaN,
    infinite or negative ("the run printed no valid value here").
    """
    try:
        if isinstance(tok, bool):
            raise ValueError
        v = float(tok)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise InputError(f"{where}: cannot read {tok!r} in column {col!r} as a number", hint=hint) from None
    if not math.isfinite(v) or v < 0:
        raise InputError(f"{where}: column {col!r} holds {tok!r}", hint="the run printed no valid value here; rerun it")
    return v


def whole(tok: str, where: str, col: str, hint: str) -> int:
    """A table cell as a whole number (negative too: nccl-tests prints root ``-1``)."""
    try:
        return int(tok)
    except ValueError:
        raise InputError(f"{where}: cannot read {tok!r} in column {col!r} as a whole number", hint=hint) from None

"""Lines of a log as people capture them: cleaned, prefixes stripped, and the tag that says which process wrote each.

Cleaning (:func:`clean`), in this order, because that is how the layers were added:

* the line ending and carriage returns (CRLF files; a progress bar's ``\\r`` keeps the last overwrite);
* ANSI escape sequences (colours, cursor moves, terminal titles) and other control characters;
  tabs become single spaces (rows are split on whitespace, so a paste that turned tabs into spaces
  reads the same);
* a quote prefix ``> `` (an issue thread or a mail), nested ones too;
* launcher prefixes, which also name the writer:

  - ``mpirun --tag-output`` (Open MPI): ``[1,0]<stdout>:`` -> tag ``1,0`` (job, rank)
  - ``mpiexec -prepend-rank`` (MPICH, Intel MPI) and similar: ``[0] `` -> tag ``0``
  - ``srun --label``: ``0: `` -> tag ``0``

  Prefixes stack (a launcher's own prefix, then a rank label the program printed: ``0: [0] ``,
  ``[1,0]<stdout>:[0] ``): every one is stripped, the outermost names the writer. A label standing
  alone *inside* a row (two writers sharing a line) is dropped by :func:`row_tokens`.

* markdown emphasis around a number (``**5544.28**``, ``*12.3*``, ``__7__``, `` `42` ``): the number.

A line without a prefix has tag None. Also the cell readers every table importer uses (:func:`number`,
:func:`whole`). Pure functions of text.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from ibdiag.errors import InputError
from ibdiag.text import safe_excerpt

_OMPI = re.compile(r"^\[(\d+),(\d+)\]<(stdout|stderr|stddiag)>:\s?")
_RANK = re.compile(r"^\[(\d+)\]\s")
_SRUN = re.compile(r"^\s*(\d+):\s")
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_QUOTE = re.compile(r"^[ ]{0,3}>(?:[ ]|$)(?:[ ]{0,3}>(?:[ ]|$))*")
_EMPHASIS = re.compile(r"(?<![\w*`])(\*\*|__|\*|_|`)([-+]?\d[\d.]*(?:[eE][-+]?\d+)?%?)\1(?![\w*`])")
_LABEL_TOKEN = re.compile(r"^(?:\[\d+(?:,\d+)?\](?:<(?:stdout|stderr|stddiag)>:)?|\d+:)$")
_MAX_PREFIXES = 4


@dataclass(frozen=True)
class Line:
    number: int
    """1-based line number in the file."""
    text: str
    """The cleaned line without its prefix and line ending."""
    tag: str | None
    """Who wrote it, from the prefix (``1,0``, ``0``), or None."""
    truncated: bool = False
    """The line was longer than the reader keeps (see :mod:`ibdiag.bench.importers.source`): never a table row."""


def clean(raw: str) -> str:
    """``raw`` without line ending, CRs, ANSI escapes, control characters and quote prefixes; tabs as spaces."""
    s = raw.rstrip("\r\n")
    if "\r" in s:
        s = s.rstrip("\r")
        parts = [p for p in s.split("\r") if p.strip()]
        s = parts[-1] if parts else ""
    if "\x1b" in s:
        s = _ANSI.sub("", s)
    s = s.replace("\t", " ")
    s = _CONTROL.sub("", s)
    if s[:4].lstrip(" ").startswith(">"):
        s = _QUOTE.sub("", s)
    if "*" in s or "_" in s or "`" in s:
        s = _EMPHASIS.sub(r"\2", s)
    return s


def _prefix(text: str) -> tuple[str, str] | None:
    m = _OMPI.match(text)
    if m:
        return text[m.end() :], f"{m.group(1)},{m.group(2)}"
    m = _RANK.match(text)
    if m:
        return text[m.end() :], m.group(1)
    m = _SRUN.match(text)
    if m:
        return text[m.end() :], m.group(1)
    return None


def tagged(text: str) -> tuple[str, str | None]:
    """(text without its launcher prefixes, the tag the outermost one names, or None).

    Stacked prefixes (``0: [0] ``, ``[1,0]<stdout>:[0] ``) are all stripped."""
    tag: str | None = None
    for _ in range(_MAX_PREFIXES):
        got = _prefix(text)
        if got is None:
            break
        text, t = got
        tag = t if tag is None else tag
    return text, tag


def row_tokens(text: str) -> list[str]:
    """The cells of a table line, without rank labels that stand inside it (``[3]``, ``0:``,
    ``[1,2]<stdout>:``: two writers sharing one line)."""
    tokens = text.split()
    if any(t.endswith((":", "]")) for t in tokens):
        tokens = [t for t in tokens if not _LABEL_TOKEN.match(t)]
    return tokens


class Truncated(str):
    """A line the reader cut at its length limit (the rest was skipped unread)."""


def iter_lines(raw_lines: Iterable[str]) -> Iterator[Line]:
    """Every line with its number, cleaned and its prefix removed (lazily: a log is read in bounded memory)."""
    for i, raw in enumerate(raw_lines, start=1):
        text, tag = tagged(clean(raw))
        yield Line(i, text.rstrip(), tag, isinstance(raw, Truncated))


def split_lines(text: str) -> list[Line]:
    """Every line of ``text`` (see :func:`iter_lines`)."""
    return list(iter_lines(text.splitlines()))


def _quoted(tok: object) -> str:
    """A cell as messages show it: quoted, escaped and cut (a cell may be a 64 KiB token)."""
    return f"'{safe_excerpt(tok, 40)}'"


def number(tok: object, where: str, col: str, hint: str) -> float:
    """A table cell (a token, or a JSON value) as a finite, non-negative number.

    InputError naming ``where`` (``file:line``) and the column: unreadable (``hint``), or NaN,
    infinite or negative ("the run printed no valid value here").
    """
    try:
        if isinstance(tok, bool):
            raise ValueError
        v = float(tok)  # type: ignore[arg-type]  # any token or JSON value: the TypeError is caught below
    except (TypeError, ValueError):
        raise InputError(
            f"{where}: cannot read {_quoted(tok)} in column {col!r} as a number", hint=hint
        ) from None
    if not math.isfinite(v) or v < 0:
        raise InputError(
            f"{where}: column {col!r} holds {_quoted(tok)}",
            hint="the run printed no valid value here; rerun it",
        )
    return v


def whole(tok: str, where: str, col: str, hint: str) -> int:
    """A table cell as a whole number (negative too: nccl-tests prints root ``-1``)."""
    try:
        return int(tok)
    except ValueError:
        raise InputError(
            f"{where}: cannot read {_quoted(tok)} in column {col!r} as a whole number", hint=hint
        ) from None

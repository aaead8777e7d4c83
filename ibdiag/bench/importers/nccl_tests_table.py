"""nccl-tests' result table: its column header, its rows, and the columns of a table whose header was cut off.

Pure functions of text (facts: ``shared/reference/FORMATS.md``; nccl-tests ``src/util.cu``
``writeResultHeader``/``writeBenchmarkLine*``/``writePerIterReport``). The header line names the
columns: ``size count type redop [root]`` then, for out-of-place and in-place, ``time algbw busbw
#wrong`` (``error`` before 2022), with ``-I 1`` also ``i_min i_max i_p99 i_cv%``, and ``timestamp``
(``-S 1``) at the end. Columns are read from the header, so a column added or dropped in some version is
found where it is; a table pasted without its header is read from the rows' shape when that is
unambiguous (:func:`columns_from_row`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ibdiag.bench.importers.lines import Line, number, whole
from ibdiag.bench.results.model import CollectiveResult, IterStats
from ibdiag.errors import InputError

HINT = "ibdiag bench import reads nccl-tests *_perf output and perftest ib_* output; give --op when the log does not name the collective"

_TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_CLOCK = re.compile(r"^\d{2}:\d{2}:\d{2}$")
_INT = re.compile(r"^-?\d+$")
_FLOATISH = re.compile(r"^[0-9.]+(?:e[-+]?\d+)?$", re.IGNORECASE)
_PER_ITER = ("i_min", "i_max", "i_p99", "i_cv%")
#: The element types nccl-tests prints (``test_typenames``), for telling a row from other numbers.
DTYPES = frozenset(
    {
        "int8",
        "uint8",
        "int32",
        "uint32",
        "int64",
        "uint64",
        "half",
        "float",
        "double",
        "bfloat16",
        "f8e4m3",
        "f8e5m2",
        "char",
        "int",
        "fp8_e4m3",
        "fp8_e5m2",
    }
)


#: The reductions nccl-tests prints in the ``redop`` column (``test_opnames``), and ``none``.
REDOPS = frozenset({"sum", "prod", "max", "min", "avg", "mulsum", "premulsum", "none"})


@dataclass
class Columns:
    head: list[str]
    """The columns before the first half (size, count, type, redop, root)."""
    halves: list[list[str]]
    timestamp: bool
    line: int
    """The header's line; for a cut header, the first row's."""

    @property
    def width(self) -> int:
        return len(self.head) + sum(len(h) for h in self.halves)

    @property
    def per_iter(self) -> bool:
        return any("i_min" in h for h in self.halves)


def parse_columns(body: str, line_no: int, source: str) -> Columns:
    """The columns named by a header line (``body``: the line without ``#``)."""
    tokens = body.split()
    times = [i for i, t in enumerate(tokens) if t in ("time", "cputime")]
    if not times:
        raise InputError(f"{source}:{line_no}: a table header without a time column", hint=HINT)
    timestamp = tokens[-1] == "timestamp"
    if timestamp:
        tokens = tokens[:-1]
    head = tokens[: times[0]]
    halves = [tokens[a:b] for a, b in zip(times, [*times[1:], len(tokens)], strict=False)]
    for need in ("size", "count", "type"):
        if need not in head:
            raise InputError(
                f"{source}:{line_no}: table header without a {need!r} column", hint=HINT
            )
    for h in halves:
        if "algbw" not in h or "busbw" not in h:
            raise InputError(f"{source}:{line_no}: table header without algbw/busbw", hint=HINT)
    return Columns(head, halves, timestamp, line_no)


def row_shaped(tokens: list[str]) -> bool:
    """Starts like a result row: two whole numbers (size, count)."""
    return len(tokens) >= 2 and tokens[0].isdigit() and tokens[1].isdigit()


def _strip_timestamp(tokens: list[str]) -> tuple[list[str], bool]:
    if len(tokens) >= 2 and _TIMESTAMP.match(tokens[-2]) and _CLOCK.match(tokens[-1]):
        return tokens[:-2], True
    return tokens, False


def columns_from_row(tokens: list[str], line_no: int) -> Columns | None:
    """The columns of a row whose header was not in the paste, or None when its shape is not a table row.

    11 cells: ``size count type`` + 2 x (time algbw busbw error|#wrong) (all_gather, alltoall before
    2022); 12: ``size count type redop`` + 2 halves (all_reduce before 2022), or ``size count type root``
    when the fourth cell is a whole number (an empty ``redop`` cell, all-to-all); 13: ``redop`` and
    ``root`` (2022 on, and the rooted ops before); 21: with ``-I 1``'s four per-iteration cells per
    half. The last cell of a half says the era: ``2e-07`` (an error) or a whole number/``N/A``.
    """
    tokens, stamped = _strip_timestamp(tokens)
    if not row_shaped(tokens) or len(tokens) not in (11, 12, 13, 21) or tokens[2] not in DTYPES:
        return None
    if len(tokens) == 11:
        head = ["size", "count", "type"]
    elif len(tokens) == 12 and _INT.match(tokens[3]):
        head = ["size", "count", "type", "root"]
    else:
        head = ["size", "count", "type", "redop"] + (["root"] if len(tokens) >= 13 else [])
    n = len(head)
    if n == 5 and not _INT.match(tokens[4]):
        return None
    per_half = (len(tokens) - n) // 2
    check = tokens[n + 3]
    if _INT.match(check) or check.upper() == "N/A":
        last = "#wrong"
    elif _FLOATISH.match(check):
        last = "error"
    else:
        return None
    half = ["time", "algbw", "busbw", last, *(_PER_ITER if per_half == 8 else ())]
    for tok in tokens[n:]:
        if not (_FLOATISH.match(tok) or tok.upper() == "N/A" or tok == "-"):
            return None
    return Columns(head, [list(half), list(half)], stamped, line_no)


def _iter_stats(vals: dict[str, str], where: str) -> IterStats | None:
    if "i_min" not in vals:
        return None
    got = [number(vals[k], where, k, HINT) for k in _PER_ITER if k in vals]
    if len(got) != 4:
        raise InputError(
            f"{where}: per-iteration columns incomplete (need {', '.join(_PER_ITER)})", hint=HINT
        )
    return IterStats(min_us=got[0], max_us=got[1], p99_us=got[2], cv_pct=got[3])


def parse_row(
    line: Line, cols: Columns, source: str, tokens: list[str] | None = None
) -> list[CollectiveResult]:
    """One table row -> its out-of-place and in-place halves. InputError (naming the line) for a row
    that does not fit the header. ``tokens``: the row's cells when they are not the line's words (rank
    labels dropped, a split row joined)."""
    tokens = line.text.split() if tokens is None else list(tokens)
    if cols.timestamp:
        tokens, _ = _strip_timestamp(tokens)
    n = line.number
    where = f"{source}:{n}"
    halves = list(cols.halves)
    in_place_flags = [False, True][: len(halves)] if len(halves) > 1 else [False]
    if len(tokens) == cols.width - 1 and "redop" in cols.head:
        at = cols.head.index("redop")
        if at < len(tokens) and tokens[at].lower() not in REDOPS:
            tokens = [*tokens[:at], "none", *tokens[at:]]  # an empty redop cell (all-to-all)
    if len(tokens) != cols.width:
        if len(halves) == 2 and len(tokens) == len(cols.head) + len(halves[1]):
            halves, in_place_flags = (
                [halves[1]],
                [True],
            )  # out-of-place left blank (nccl-tests trace replay)
        else:
            raise InputError(
                f"{where}: expected {cols.width} columns as in the header (line {cols.line}), found {len(tokens)}",
                hint=HINT,
            )
    head = dict(zip(cols.head, tokens, strict=False))
    size = whole(head["size"], where, "size", HINT)
    count = whole(head["count"], where, "count", HINT)
    dtype = head["type"]
    redop = head.get("redop")
    if redop is not None and redop.lower() == "none":
        redop = None
    root_tok = head.get("root")
    root = None
    if root_tok is not None:
        r = whole(root_tok, where, "root", HINT)
        root = r if r >= 0 else None
    out: list[CollectiveResult] = []
    pos = len(cols.head)
    for names, in_place in zip(halves, in_place_flags, strict=False):
        vals = dict(zip(names, tokens[pos : pos + len(names)], strict=False))
        pos += len(names)
        if all(v == "-" for v in vals.values()):
            continue  # a half that was not measured (ibdiag prints '-', e.g. all_reduce out of place)
        time_us = number(vals[names[0]], where, names[0], HINT)
        algbw = number(vals["algbw"], where, "algbw", HINT)
        busbw = number(vals["busbw"], where, "busbw", HINT)
        wrong: int | None = None
        error: float | None = None
        if "#wrong" in vals:
            w = vals["#wrong"]
            if w.upper() != "N/A":
                wrong = int(round(number(w, where, "#wrong", HINT)))
        elif "error" in vals:
            e = vals["error"]
            if e.upper() != "N/A":
                error = number(e, where, "error", HINT)
        out.append(
            CollectiveResult(
                bytes=size,
                count=count,
                dtype=dtype,
                redop=redop,
                root=root,
                in_place=in_place,
                time_us=time_us,
                algbw_gbs=algbw,
                busbw_gbs=busbw,
                wrong=wrong,
                max_error=error,
                iter_us=_iter_stats(vals, where),
            )
        )
    return out

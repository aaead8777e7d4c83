"""Rows of records of one shape, held by column: a document's largest lists (a fabric's links and
adapters, tens of thousands of rows) without a dict made per row.

A :class:`Records` stands for the list of dicts it describes: read as a sequence, row ``i`` is
``{key: column[i], ...}`` (a nested :class:`Records` gives its own row, or None), and it equals that
list. The JSON writer (:mod:`ibdiag.output.jsonout`) writes it column by column, byte for byte what it
writes for the list of dicts; it also turns a list of dicts that share their keys into one
(:func:`records_of`) to write it the same way.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import compress
from operator import itemgetter
from typing import Any, overload

_NONE = type(None)
_STR_ONLY = frozenset((str,))


@dataclass(frozen=True, eq=False)
class Records(Sequence[Any]):
    keys: tuple[str, ...]
    columns: tuple[Sequence[Any], ...]
    """One per key, a value per record: a :class:`Records` where the values are records themselves."""
    length: int
    """Rows, records and nulls (``present``) together."""
    present: Sequence[bool] | None = None
    """Per row, whether it is a record (False: null); None: every row is. The columns hold values for
    the records alone."""
    _at: list[int] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        if len(self.keys) != len(self.columns) or not _STR_ONLY.issuperset(map(type, self.keys)):
            raise ValueError("Records: one column per key, and keys that are strings")
        if self.present is not None and len(self.present) != self.length:
            raise ValueError("Records: a presence flag per row")
        n = self.length if self.present is None else sum(self.present)
        if any(len(c) != n for c in self.columns):
            raise ValueError(f"Records: every column holds {n} values")

    def __len__(self) -> int:
        return self.length

    @overload
    def __getitem__(self, i: int) -> dict[str, Any] | None: ...

    @overload
    def __getitem__(self, i: slice) -> list[dict[str, Any] | None]: ...

    def __getitem__(self, i: int | slice) -> dict[str, Any] | None | list[dict[str, Any] | None]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self.length))]
        if not -self.length <= i < self.length:
            raise IndexError("Records index out of range")
        i %= self.length
        if self.present is not None:
            if not self._at:  # row -> value index, made on the first such read
                at, k = self._at, 0
                for p in self.present:
                    at.append(k if p else -1)
                    k += p
            i = self._at[i]
            if i < 0:
                return None
        return {k: c[i] for k, c in zip(self.keys, self.columns, strict=True)}

    def __iter__(self) -> Iterator[dict[str, Any] | None]:
        return (self[i] for i in range(self.length))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]

    def block(self, start: int, stop: int) -> Records:
        """Rows ``start`` to ``stop`` (a slice of every column)."""
        stop = min(stop, self.length)
        if self.present is None:
            lo, hi, present = start, stop, None
        else:
            lo = sum(self.present[:start])
            present = self.present[start:stop]
            hi = lo + sum(present)
        return Records(
            self.keys,
            tuple(c.block(lo, hi) if type(c) is Records else c[lo:hi] for c in self.columns),
            max(stop - start, 0),
            present,
        )


def records_of(rows: Sequence[Any]) -> Records | None:
    """``rows`` (dicts, or dicts and None) as :class:`Records`, nested dicts too; None where the dicts
    do not share their keys, in one order, all strings (or are not plain dicts)."""
    kinds = set(map(type, rows))
    present: list[bool] | None = None
    dicts: Sequence[dict[str, Any]]
    if kinds == {dict}:
        dicts = rows
    elif kinds == {dict, _NONE}:
        present = [r is not None for r in rows]
        dicts = list(compress(rows, present))
    else:
        return None
    keys = tuple(dicts[0])
    if len(set(map(tuple, dicts))) != 1 or not _STR_ONLY.issuperset(map(type, keys)):
        return None
    if not keys:
        columns: list[Sequence[Any]] = []
    elif len(keys) == 1:
        columns = [[d[keys[0]] for d in dicts]]
    else:
        columns = list(zip(*map(itemgetter(*keys), dicts), strict=True))
    for i, col in enumerate(columns):
        if set(map(type, col)) <= {dict, _NONE} and any(v is not None for v in col):
            nested = records_of(col)
            if nested is not None:
                columns[i] = nested
    return Records(keys, tuple(columns), len(rows), present)

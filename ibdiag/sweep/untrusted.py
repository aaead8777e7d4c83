"""Reading JSON that came from elsewhere: every value checked for type and range, every problem named.

A file another node wrote (``ibdiag report``'s inputs, a saved sweep) is untrusted until checked:
:class:`JsonReader` turns a value that is missing, of the wrong type, out of range, too long or not
printable into an :class:`~ibdiag.errors.InputError` naming the file and the path inside it
(``sweep.json: pairs.rows[17][5]: must be a number >= 0``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ibdiag.errors import InputError
from ibdiag.text import safe_value

_HINT = "give the file ibdiag wrote, unchanged (-o json or --save)"


class JsonReader:
    """Checks values of one document; ``source`` names it in errors."""

    def __init__(self, source: str) -> None:
        self.source = source

    def error(self, path: str, what: str) -> InputError:
        return InputError(f"{self.source}: {path}: {what}", hint=_HINT)

    def obj(self, value: Any, path: str) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            raise self.error(path, "must be an object")
        return value

    def items(self, value: Any, path: str, *, max_items: int) -> Sequence[Any]:
        if not isinstance(value, list):
            raise self.error(path, "must be a list")
        if len(value) > max_items:
            raise self.error(path, f"has {len(value)} items, more than the {max_items} allowed")
        return value

    def integer(
        self, value: Any, path: str, *, lo: int | None = None, hi: int | None = None
    ) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(path, "must be a whole number")
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            raise self.error(
                path,
                f"{value} is outside {lo if lo is not None else '-inf'}..{hi if hi is not None else 'inf'}",
            )
        return value

    def number(
        self, value: Any, path: str, *, lo: float | None = None, hi: float | None = None
    ) -> float:
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
        ):
            raise self.error(path, "must be a finite number")
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            raise self.error(
                path,
                f"{value} is outside {lo if lo is not None else '-inf'}..{hi if hi is not None else 'inf'}",
            )
        return float(value)

    def opt_number(
        self, value: Any, path: str, *, lo: float | None = None, hi: float | None = None
    ) -> float | None:
        return None if value is None else self.number(value, path, lo=lo, hi=hi)

    def opt_integer(
        self, value: Any, path: str, *, lo: int | None = None, hi: int | None = None
    ) -> int | None:
        return None if value is None else self.integer(value, path, lo=lo, hi=hi)

    def text(
        self, value: Any, path: str, *, max_len: int = 256, pattern: re.Pattern[str] | None = None
    ) -> str:
        if not isinstance(value, str):
            raise self.error(path, "must be a string")
        if len(value) > max_len:
            raise self.error(path, f"is {len(value)} characters long, more than {max_len}")
        if not value.isprintable():
            raise self.error(path, "holds control or non-printable characters")
        if pattern is not None and not pattern.match(value):
            raise self.error(path, f"{safe_value(value, 40)} is not of the expected form")
        return value

    def opt_text(
        self, value: Any, path: str, *, max_len: int = 256, pattern: re.Pattern[str] | None = None
    ) -> str | None:
        return None if value is None else self.text(value, path, max_len=max_len, pattern=pattern)

    def flag(self, value: Any, path: str) -> bool:
        if not isinstance(value, bool):
            raise self.error(path, "must be true or false")
        return value

    def choice(self, value: Any, path: str, choices: Sequence[str]) -> str:
        if value not in choices:
            raise self.error(path, f"must be one of {', '.join(choices)}")
        return str(value)

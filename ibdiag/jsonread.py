"""The one reader of JSON that came from outside: a ``--save`` file or a baseline from another node,
``ibdiag report``'s inputs, a peer's message, a value in the sweep's rendezvous store.

Every value is checked where it enters by one set of checks: type, range, length, and one printable
rule (:func:`ibdiag.text.is_printable`: no control, format or line-separator character a terminal or
a log would act on). Every problem is a :class:`JsonFieldError` that names the value's place in the
document (``pairs.rows[17][5]: must be a finite number``); callers turn it into an
:class:`~ibdiag.errors.InputError` with their hint, or name the file that held it (:class:`JsonReader`).

Every document is parsed by :func:`loads`, with a budget: at most :data:`MAX_DEPTH` levels of nesting,
:data:`MAX_OBJECT_BYTES` of Python objects (estimated from the text first), integers of at most :data:`MAX_INT_DIGITS` digits — so a hostile file or
store value costs bounded memory and time, and never a RecursionError or Python's int-digit error.

Two ways in, over the same checks: :class:`Fields` hands out an object's fields by key (the bench
results model reads itself this way), and :class:`JsonReader` checks values as a parser walks a
document of its own shape (a sweep's rows of numbers, a report input).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, TypeVar, overload

from ibdiag.errors import InputError
from ibdiag.text import is_printable, safe_value

T = TypeVar("T")

#: Longest text field accepted where no tighter bound applies (a host name, a warning line from a log).
MAX_TEXT = 4096
#: Most entries in one list (ranks, rows of a spread table, per-rank timings).
MAX_ITEMS = 1 << 20
#: Largest whole number accepted where no tighter bound applies (counts, bytes, pids).
MAX_INT = 2**62

#: Deepest nesting of arrays and objects accepted (ibdiag's own documents are under 10 levels deep).
MAX_DEPTH = 64
#: Most memory the objects of one document may cost, estimated from its text before anything is
#: built: an empty array costs 64 bytes for 3 of text (``[],``), so a 64 MiB file of them would
#: take 1.7 GB. A 16384-node sweep of 8 random rounds (73 MiB) is estimated at about 600 MB.
MAX_OBJECT_BYTES = 768 * 2**20
#: An array or object with the reference to it, and a short string with its reference (a float
#: costs 32, a small integer 8): the estimate's prices, each what the costliest value of its kind takes.
_CONTAINER_BYTES = 72
_VALUE_BYTES = 60
#: Largest JSON file read where no tighter bound applies (`report`'s default `--max-file-size`).
MAX_DOCUMENT_BYTES = 128 * 2**20
#: Longest integer accepted, in digits (a 64-bit counter has 20; Python refuses more than 4300): a
#: longer one is refused while parsing; shorter ones out of range are refused by the field's check.
MAX_INT_DIGITS = 100

Scalar = int | float | str | bool | None


class JsonFieldError(ValueError):
    """A value that is missing, of the wrong type, out of range, too long or not printable."""

    def __init__(self, where: str, problem: str) -> None:
        self.where = where
        self.problem = problem
        super().__init__(f"{where}: {problem}" if where else problem)


def _range(lo: float | None, hi: float | None) -> str:
    return f"{lo if lo is not None else '-inf'}..{hi if hi is not None else 'inf'}"


def _finite(bound: float) -> float | None:
    """An infinite bound is no bound."""
    return None if math.isinf(bound) else bound


def check_integer(value: Any, where: str, lo: int | None = None, hi: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise JsonFieldError(where, "must be a whole number")
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise JsonFieldError(where, f"{value} is outside {_range(lo, hi)}")
    return value


def check_number(value: Any, where: str, lo: float | None = None, hi: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise JsonFieldError(where, "must be a finite number")
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise JsonFieldError(where, f"{value} is outside {_range(lo, hi)}")
    return float(value)


def check_text(
    value: Any,
    where: str,
    *,
    max_len: int = MAX_TEXT,
    pattern: re.Pattern[str] | None = None,
    choices: Sequence[str] | None = None,
) -> str:
    if not isinstance(value, str):
        raise JsonFieldError(where, "must be a string")
    if len(value) > max_len:
        raise JsonFieldError(where, f"is {len(value)} characters long, more than {max_len}")
    if not is_printable(value):
        raise JsonFieldError(where, "holds control or non-printable characters")
    if pattern is not None and not pattern.match(value):
        raise JsonFieldError(where, f"{safe_value(value, 40)} is not of the expected form")
    if choices is not None and value not in choices:
        raise JsonFieldError(where, f"must be one of {', '.join(choices)}")
    return value


def check_flag(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise JsonFieldError(where, "must be true or false")
    return value


def check_list(value: Any, where: str, max_items: int = MAX_ITEMS) -> list[Any]:
    if not isinstance(value, list):
        raise JsonFieldError(where, "must be a list")
    if len(value) > max_items:
        raise JsonFieldError(where, f"has {len(value)} items, more than the {max_items} allowed")
    return value


def check_object(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise JsonFieldError(where, "must be an object")
    return value


def _integer(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise JsonFieldError("", f"an integer of {len(text)} digits (at most {MAX_INT_DIGITS})")
    return int(text)


def _no_constant(name: str) -> Any:
    raise JsonFieldError("", f"{name} is not a number JSON allows")


def depth(doc: Any, limit: int = MAX_DEPTH) -> int:
    """How deeply ``doc`` nests (a scalar: 0), counted without recursion; stops once past ``limit``."""
    deepest = 0
    stack = [(doc, 1)] if isinstance(doc, (dict, list)) else []
    while stack and deepest <= limit:
        node, d = stack.pop()
        deepest = max(deepest, d)
        children = node.values() if isinstance(node, dict) else node
        stack.extend((v, d + 1) for v in children if isinstance(v, (dict, list)))
    return deepest


def loads(
    text: str | bytes,
    *,
    max_depth: int = MAX_DEPTH,
    max_object_bytes: int = MAX_OBJECT_BYTES,
    nan: bool = True,
) -> Any:
    """Parse one JSON document within the budget. Raises :class:`JsonFieldError` (a ValueError) whose
    ``problem`` says what is wrong: not UTF-8, not JSON, objects that would cost more than
    ``max_object_bytes`` (an upper bound, counted in the text before anything is built), nested deeper than ``max_depth``, an
    integer longer than :data:`MAX_INT_DIGITS` digits; with ``nan=False`` also NaN and Infinity."""
    if isinstance(text, (bytes, bytearray, memoryview)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError:
            raise JsonFieldError("", "not UTF-8 text") from None
    # Every value but the last in a container is followed by a comma: upper bounds, in C.
    containers = text.count("[") + text.count("{")
    values = text.count(",") + 1
    estimate = containers * _CONTAINER_BYTES + values * _VALUE_BYTES
    if estimate > max_object_bytes:
        raise JsonFieldError(
            "",
            f"{containers} arrays or objects and {values} values would take about "
            f"{estimate >> 20} MiB of memory, more than the {max_object_bytes >> 20} MiB ibdiag "
            "spends on one document",
        )
    try:
        if nan:
            doc = json.loads(text, parse_int=_integer)
        else:
            doc = json.loads(text, parse_int=_integer, parse_constant=_no_constant)
    except json.JSONDecodeError as e:
        raise JsonFieldError("", f"not JSON ({e.msg} at line {e.lineno})") from None
    except RecursionError:
        raise JsonFieldError("", f"nested too deeply (more than {max_depth} levels)") from None
    if depth(doc, max_depth) > max_depth:
        raise JsonFieldError("", f"nested too deeply (more than {max_depth} levels)")
    return doc


class Fields:
    """The fields of one JSON object, read with checks; ``where`` names it in messages (``results[3]``).

    A missing field (or ``null``) is None unless it is required; a present one must pass its check.
    """

    def __init__(self, doc: Any, where: str) -> None:
        self.doc = check_object(doc, where or "document")
        self.where = where

    def has(self, key: str) -> bool:
        return key in self.doc

    def _name(self, key: str) -> str:
        return key if self.where in ("", "document") else f"{self.where}.{key}"

    def _get(self, key: str, required: bool) -> Any:
        value = self.doc.get(key)
        if value is None and required:
            raise JsonFieldError(self._name(key), "is missing")
        return value

    @overload
    def integer(
        self, key: str, lo: int = ..., hi: int = ..., *, required: Literal[True]
    ) -> int: ...
    @overload
    def integer(
        self, key: str, lo: int = ..., hi: int = ..., *, required: bool = ...
    ) -> int | None: ...
    def integer(
        self, key: str, lo: int = 0, hi: int = MAX_INT, *, required: bool = False
    ) -> int | None:
        v = self._get(key, required)
        return None if v is None else check_integer(v, self._name(key), lo, hi)

    @overload
    def number(
        self, key: str, lo: float = ..., hi: float = ..., *, required: Literal[True]
    ) -> float: ...
    @overload
    def number(
        self, key: str, lo: float = ..., hi: float = ..., *, required: bool = ...
    ) -> float | None: ...
    def number(
        self, key: str, lo: float = -math.inf, hi: float = math.inf, *, required: bool = False
    ) -> float | None:
        v = self._get(key, required)
        if v is None:
            return None
        return check_number(v, self._name(key), _finite(lo), _finite(hi))

    @overload
    def text(
        self, key: str, *, choices: tuple[str, ...] | None = ..., required: Literal[True]
    ) -> str: ...
    @overload
    def text(
        self, key: str, *, choices: tuple[str, ...] | None = ..., required: bool = ...
    ) -> str | None: ...
    def text(
        self, key: str, *, choices: tuple[str, ...] | None = None, required: bool = False
    ) -> str | None:
        v = self._get(key, required)
        return None if v is None else check_text(v, self._name(key), choices=choices)

    def flag(self, key: str, *, required: bool = False) -> bool | None:
        v = self._get(key, required)
        return None if v is None else check_flag(v, self._name(key))

    def object(self, key: str) -> Fields | None:
        v = self.doc.get(key)
        return None if v is None else Fields(v, self._name(key))

    def items(self, key: str, max_items: int = MAX_ITEMS) -> list[Any]:
        v = self.doc.get(key)
        return [] if v is None else check_list(v, self._name(key), max_items)

    def objects(
        self, key: str, parse: Callable[[Fields], T], max_items: int = MAX_ITEMS
    ) -> tuple[T, ...]:
        """Every object of list ``key``, each read by ``parse``."""
        return tuple(
            parse(Fields(item, f"{self._name(key)}[{i}]"))
            for i, item in enumerate(self.items(key, max_items))
        )

    def texts(self, key: str, max_items: int = MAX_ITEMS) -> tuple[str, ...]:
        return tuple(
            check_text(v, f"{self._name(key)}[{i}]")
            for i, v in enumerate(self.items(key, max_items))
        )

    def integers(self, key: str, lo: int = 0, hi: int = MAX_INT) -> tuple[int, ...]:
        return tuple(
            check_integer(v, f"{self._name(key)}[{i}]", lo, hi)
            for i, v in enumerate(self.items(key))
        )

    def numbers(self, key: str, lo: float = -math.inf, hi: float = math.inf) -> tuple[float, ...]:
        return tuple(
            check_number(v, f"{self._name(key)}[{i}]", _finite(lo), _finite(hi))
            for i, v in enumerate(self.items(key))
        )

    def scalars(self, key: str) -> dict[str, Scalar]:
        """An object of plain values (numbers, text, booleans, null), e.g. a tool's parameters."""
        sub = self.object(key)
        if sub is None:
            return {}
        out: dict[str, Scalar] = {}
        for k, v in sub.doc.items():
            name = check_text(k, f"{sub.where} key")
            if isinstance(v, str):
                v = check_text(v, f"{sub.where}.{name}")
            elif isinstance(v, float) and not math.isfinite(v):
                raise JsonFieldError(f"{sub.where}.{name}", "must be a finite number")
            elif v is not None and not isinstance(v, (bool, int, float)):
                raise JsonFieldError(f"{sub.where}.{name}", "must be a plain value")
            out[name] = v
        return out


class JsonReader:
    """Checks the values of one document as a parser walks it; ``source`` (a file name) goes in front
    of every problem, which is an :class:`InputError` (exit 2) with ``hint``."""

    def __init__(
        self,
        source: str,
        hint: str = "give the file ibdiag wrote, unchanged (-o json or --save)",
    ) -> None:
        self.source = source
        self.hint = hint

    def error(self, path: str, what: str) -> InputError:
        return InputError(f"{self.source}: {path}: {what}", hint=self.hint)

    def _checked(self, check: Callable[[], T]) -> T:
        try:
            return check()
        except JsonFieldError as e:
            raise self.error(e.where, e.problem) from None

    def obj(self, value: Any, path: str) -> Mapping[str, Any]:
        return self._checked(lambda: check_object(value, path))

    def items(self, value: Any, path: str, *, max_items: int) -> Sequence[Any]:
        return self._checked(lambda: check_list(value, path, max_items))

    def integer(
        self, value: Any, path: str, *, lo: int | None = None, hi: int | None = None
    ) -> int:
        return self._checked(lambda: check_integer(value, path, lo, hi))

    def number(
        self, value: Any, path: str, *, lo: float | None = None, hi: float | None = None
    ) -> float:
        return self._checked(lambda: check_number(value, path, lo, hi))

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
        return self._checked(lambda: check_text(value, path, max_len=max_len, pattern=pattern))

    def opt_text(
        self, value: Any, path: str, *, max_len: int = 256, pattern: re.Pattern[str] | None = None
    ) -> str | None:
        return None if value is None else self.text(value, path, max_len=max_len, pattern=pattern)

    def flag(self, value: Any, path: str) -> bool:
        return self._checked(lambda: check_flag(value, path))

    def choice(self, value: Any, path: str, choices: Sequence[str]) -> str:
        if value not in choices:
            raise self.error(path, f"must be one of {', '.join(choices)}")
        return str(value)

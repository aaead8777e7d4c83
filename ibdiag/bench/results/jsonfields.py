"""Reading one JSON object that came from outside (a ``--save`` file from another node, a peer's message).

:class:`Fields` wraps the object and hands out its fields one at a time, checked: a missing field (or
``null``) is None unless it is required, a present one must have the type and lie in the range asked
for, and text must be printable (no control characters a terminal would act on). Every problem is a
``ValueError`` naming the field, which the caller turns into an ibdiag error with a hint.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, Literal, TypeVar, overload

T = TypeVar("T")

#: Longest text field accepted (a host name, a device string, a warning line from a log).
MAX_TEXT = 4096
#: Most entries in one list (ranks, rows of a spread table, per-rank timings).
MAX_ITEMS = 1 << 20
#: Largest whole number accepted where no tighter bound applies (counts, bytes, pids).
MAX_INT = 2**62

Scalar = int | float | str | bool | None


def _printable(text: str) -> bool:
    return not any(ord(c) < 32 and c != "\t" or 127 <= ord(c) < 160 for c in text)


class Fields:
    """The fields of one JSON object, read with checks; ``where`` names it in messages (``results[3]``)."""

    def __init__(self, doc: Any, where: str) -> None:
        if not isinstance(doc, Mapping):
            raise ValueError(f"{where} is not an object")
        self.doc = doc
        self.where = where

    def has(self, key: str) -> bool:
        return key in self.doc

    def _name(self, key: str) -> str:
        return key if self.where in ("", "document") else f"{self.where}.{key}"

    def _get(self, key: str, required: bool) -> Any:
        value = self.doc.get(key)
        if value is None and required:
            raise ValueError(f"{self._name(key)} is missing")
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
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, int):
            raise ValueError(f"{self._name(key)} is not a whole number: {v!r}")
        if not lo <= v <= hi:
            raise ValueError(f"{self._name(key)} {v} is outside {lo}..{hi}")
        return v

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
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ValueError(f"{self._name(key)} is not a number: {v!r}")
        if not lo <= v <= hi:
            raise ValueError(f"{self._name(key)} {v:g} is outside {lo:g}..{hi:g}")
        return float(v)

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
        if v is None:
            return None
        return check_text(v, self._name(key), choices)

    def flag(self, key: str, *, required: bool = False) -> bool | None:
        v = self._get(key, required)
        if v is None:
            return None
        if not isinstance(v, bool):
            raise ValueError(f"{self._name(key)} is not true or false: {v!r}")
        return v

    def object(self, key: str) -> Fields | None:
        v = self.doc.get(key)
        return None if v is None else Fields(v, self._name(key))

    def items(self, key: str, max_items: int = MAX_ITEMS) -> list[Any]:
        v = self.doc.get(key)
        if v is None:
            return []
        if not isinstance(v, list):
            raise ValueError(f"{self._name(key)} is not a list")
        if len(v) > max_items:
            raise ValueError(f"{self._name(key)} has {len(v)} entries, more than {max_items}")
        return v

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
            Fields({"v": v}, f"{self._name(key)}[{i}]").integer("v", lo, hi, required=True)
            for i, v in enumerate(self.items(key))
        )

    def numbers(self, key: str, lo: float = -math.inf, hi: float = math.inf) -> tuple[float, ...]:
        return tuple(
            Fields({"v": v}, f"{self._name(key)}[{i}]").number("v", lo, hi, required=True)
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
                raise ValueError(f"{sub.where}.{name} is not a number: {v!r}")
            elif v is not None and not isinstance(v, (bool, int, float)):
                raise ValueError(f"{sub.where}.{name} is not a plain value")
            out[name] = v
        return out


def check_text(value: Any, name: str, choices: tuple[str, ...] | None = None) -> str:
    """``value`` if it is printable text of at most MAX_TEXT characters (and one of ``choices``)."""
    if not isinstance(value, str):
        raise ValueError(f"{name} is not text: {value!r}")
    if len(value) > MAX_TEXT:
        raise ValueError(f"{name} is longer than {MAX_TEXT} characters")
    if not _printable(value):
        raise ValueError(f"{name} holds control characters")
    if choices is not None and value not in choices:
        raise ValueError(f"{name} {value!r} is not one of {', '.join(choices)}")
    return value


def put(doc: dict[str, Any], key: str, value: Any) -> None:
    """``doc[key] = value`` unless the value is None or empty (fields a source may not have)."""
    if value is None or (isinstance(value, (list, tuple, dict)) and not value):
        return
    doc[key] = list(value) if isinstance(value, tuple) else value

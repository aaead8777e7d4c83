"""Slurm host lists (``gpu[01-04,07],login1``), the one reader ibdiag has, over python-hostlist.

A host list comes from outside (``--nodes``, ``$SLURM_JOB_NODELIST``, ``srun -w`` in a log): 1.6 KB of
``a[1-99999],b[1-99999],…`` names millions of hosts. python-hostlist (``expand_hostlist``,
``collect_hostlist``: Slurm's syntax, zero padding kept, duplicates dropped) caps each range at
100,000 names but not the list, turns a 5000-digit range end into Python's int-digit ValueError and
recurses once per bracket. So the text is first read here, in one linear pass that builds nothing
(:func:`count`): its length, every range (ASCII digits, at most :data:`MAX_DIGITS` each, ascending),
the brackets per name and the characters of names are checked, and the names are counted as the
product of each item's ranges. Only a list within :data:`MAX_NAMES` in all is then expanded.

Every problem is a :class:`HostListError` (a ValueError) saying what is wrong in words; the command
that took the list turns it into its usage error (exit 2) with a hint.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import hostlist

#: Most names one host list (or one set of lists read together) may stand for, duplicates counted.
MAX_NAMES = 100_000
#: Longest host list text read (a 16384-node job's list is a few KB; 100,000 plain names ~1.6 MB).
MAX_TEXT = 4 * 2**20
#: Most digits in a range's bound (Slurm's are 32-bit; 18 keeps every bound a 64-bit number).
MAX_DIGITS = 18
#: Most bracket groups in one name (``r[1-2]n[1-3]`` has 2; python-hostlist recurses once per group).
MAX_BRACKETS = 8
#: Longest host name (Linux's HOST_NAME_MAX).
MAX_NAME = 64
#: Characters of a host name besides the bracket syntax.
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
_DIGITS = frozenset("0123456789")


class HostListError(ValueError):
    """A host list that is malformed or too large; ``problem`` says what, in words."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem


def excerpt(text: str, limit: int = 60) -> str:
    """``text`` as a short printable quote for a message (no escape sequence reaches a terminal)."""
    cut = text[:limit]
    return repr(cut)[1:-1] + (
        f"… ({len(text) - limit} more characters)" if len(text) > limit else ""
    )


@dataclass(frozen=True)
class _Item:
    """One top-level item of a list: literal pieces around its bracket groups, each group's ranges."""

    pieces: tuple[str, ...]
    groups: tuple[tuple[tuple[str, str], ...], ...]
    """Per group, (low, high) as written (high == low for a single number)."""

    def count(self) -> int:
        n = 1
        for ranges in self.groups:
            n *= sum(int(hi) - int(lo) + 1 for lo, hi in ranges)
        return n

    def first(self) -> str:
        out = [self.pieces[0]]
        for ranges, piece in zip(self.groups, self.pieces[1:], strict=True):
            out += [ranges[0][0], piece]
        return "".join(out)

    def text(self) -> str:
        out = [self.pieces[0]]
        for ranges, piece in zip(self.groups, self.pieces[1:], strict=True):
            spec = ",".join(lo if lo == hi else f"{lo}-{hi}" for lo, hi in ranges)
            out += [f"[{spec}]", piece]
        return "".join(out)


def _bound(digits: str, spec: str) -> str:
    if not digits or not _DIGITS.issuperset(digits):
        raise HostListError(f"[{excerpt(spec, 40)}] is not a range of numbers (e.g. [01-08,17])")
    if len(digits) > MAX_DIGITS:
        raise HostListError(f"a range bound of {len(digits)} digits (at most {MAX_DIGITS})")
    return digits


def _ranges(spec: str) -> tuple[tuple[str, str], ...]:
    out: list[tuple[str, str]] = []
    for part in spec.split(","):
        lo, sep, hi = part.partition("-")
        lo = _bound(lo, spec)
        hi = _bound(hi, spec) if sep else lo
        if int(hi) < int(lo):
            raise HostListError(f"range {lo}-{hi} runs backwards")
        out.append((lo, hi))
    return tuple(out)


def _item(text: str) -> _Item:
    pieces: list[str] = []
    groups: list[tuple[tuple[str, str], ...]] = []
    rest = text
    while True:
        open_at = rest.find("[")
        close_at = rest.find("]")
        if open_at < 0:
            if close_at >= 0:
                raise HostListError("a ] with no [ before it")
            pieces.append(rest)
            break
        if close_at < 0:
            raise HostListError("a [ with no ] after it")
        if close_at < open_at:
            raise HostListError("a ] with no [ before it")
        inner = rest[open_at + 1 : close_at]
        if "[" in inner:
            raise HostListError("brackets inside brackets")
        pieces.append(rest[:open_at])
        groups.append(_ranges(inner))
        if len(groups) > MAX_BRACKETS:
            raise HostListError(f"more than {MAX_BRACKETS} bracket groups in one name")
        rest = rest[close_at + 1 :]
    for piece in pieces:
        if not _NAME_CHARS.issuperset(piece):
            bad = next(c for c in piece if c not in _NAME_CHARS)
            raise HostListError(
                f"{bad!r} cannot be in a host name (letters, digits, '.', '_', '-')"
            )
    longest = sum(len(p) for p in pieces) + sum(max(len(hi) for _, hi in g) for g in groups)
    if longest > MAX_NAME:
        raise HostListError(f"a host name of {longest} characters (at most {MAX_NAME})")
    if not any(pieces) and not groups:
        raise HostListError("an empty name")
    return _Item(tuple(pieces), tuple(groups))


def _split(text: str) -> list[str]:
    """The top-level items (commas outside brackets), stripped; empty ones dropped."""
    if len(text) > MAX_TEXT:
        raise HostListError(f"{len(text)} characters long (at most {MAX_TEXT})")
    items: list[str] = []
    depth = 0
    start = 0
    for i, c in enumerate(text):
        if c == "[":
            depth += 1
        elif c == "]":
            depth -= 1
        elif c == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    items.append(text[start:])
    return [s.strip() for s in items if s.strip()]


def _items(text: str) -> list[_Item]:
    items = [_item(s) for s in _split(text)]
    if not items:
        raise HostListError("no host in it")
    return items


def count(text: str) -> int:
    """How many names ``text`` stands for (a name listed twice counts twice), without building any."""
    return sum(item.count() for item in _items(text))


def first(text: str) -> str:
    """The first name of ``text``, without expanding the rest."""
    return _items(text)[0].first()


def expand(text: str, *, max_names: int = MAX_NAMES) -> list[str]:
    """The names of ``text`` in its order, duplicates dropped (``scontrol show hostnames``); refused
    before anything is built when it stands for more than ``max_names``."""
    items = _items(text)
    total = sum(item.count() for item in items)
    if total > max_names:
        raise HostListError(f"stands for {total} names, more than the {max_names} allowed")
    try:
        names: list[str] = hostlist.expand_hostlist(",".join(item.text() for item in items))
    except hostlist.BadHostlist as e:  # checked above; kept so a library change cannot crash us
        raise HostListError(str(e)) from None
    return names


def expand_all(texts: Iterable[str], *, max_names: int = MAX_NAMES) -> list[str]:
    """Several host lists read as one (a rank-order file, a list per line): one budget for all."""
    seen: dict[str, None] = {}
    left = max_names
    for text in texts:
        n = count(text)
        if n > left:
            raise HostListError(f"stand for more than the {max_names} names allowed")
        left -= n
        seen.update(dict.fromkeys(expand(text, max_names=max_names)))
    return list(seen)


def compress(names: Iterable[str]) -> str:
    """The shortest usual form (``scontrol show hostlist``): ``gpu01 gpu02 gpu03 gpu07`` ->
    ``gpu[01-03,07]``. Every name must be a plain host name of at most :data:`MAX_NAME` characters."""
    checked: list[str] = []
    for name in names:
        if not name or len(name) > MAX_NAME or not _NAME_CHARS.issuperset(name):
            raise HostListError(f"{excerpt(name)} is not a host name")
        checked.append(name)
        if len(checked) > MAX_NAMES:
            raise HostListError(f"more than {MAX_NAMES} names")
    result: str = hostlist.collect_hostlist(checked)
    return result

"""Slurm host lists: ``gpu[01-04,07],login1`` <-> the names, as ``scontrol show hostnames`` and
``scontrol show hostlist`` do. Brackets may repeat (``r[1-2]n[1-3]``); a range keeps its zero padding
(``[01-10]``); a list expands to at most :data:`MAX_NAMES` names.
"""

from __future__ import annotations

import re
from itertools import product

from ibdiag.errors import InputError
from ibdiag.text import safe_excerpt

MAX_NAMES = 100_000
HINT = "a Slurm host list: gpu[01-64], gpu[01-08,17],login1 (as $SLURM_JOB_NODELIST)"
_NAME = re.compile(r"[A-Za-z0-9._-]+")
_TAIL = re.compile(r"^(.*?)(\d+)$")


def _split_top(text: str) -> list[str]:
    """Split at commas outside brackets."""
    out: list[str] = []
    cur: list[str] = []
    depth = 0
    for c in text:
        if c == "[":
            depth += 1
            if depth > 1:
                raise InputError(f"host list {safe_excerpt(text, 80)}: nested brackets", hint=HINT)
        elif c == "]":
            depth -= 1
            if depth < 0:
                raise InputError(f"host list {safe_excerpt(text, 80)}: a ] with no [", hint=HINT)
        if c == "," and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(c)
    if depth:
        raise InputError(f"host list {safe_excerpt(text, 80)}: a [ with no ]", hint=HINT)
    out.append("".join(cur))
    return [x.strip() for x in out if x.strip()]


def _range(spec: str, where: str) -> list[str]:
    out: list[str] = []
    for part in spec.split(","):
        lo, sep, hi = part.strip().partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise InputError(
                f"host list {where}: [{safe_excerpt(spec, 40)}] is not a range", hint=HINT
            )
        if not sep:
            out.append(lo)
            continue
        a, b = int(lo), int(hi)
        if b < a or b - a >= MAX_NAMES:
            raise InputError(
                f"host list {where}: range {lo}-{hi} is backwards or too long", hint=HINT
            )
        width = len(lo) if lo.startswith("0") else 0
        out.extend(str(n).zfill(width) for n in range(a, b + 1))
    return out


def expand(text: str) -> list[str]:
    """The names, in the list's order, duplicates dropped."""
    seen: dict[str, None] = {}
    where = safe_excerpt(text, 80)
    for item in _split_top(text):
        pieces = re.split(r"\[([^\]]*)\]", item)
        choices: list[list[str]] = []
        for i, piece in enumerate(pieces):
            choices.append(_range(piece, where) if i % 2 else [piece])
        total = 1
        for c in choices:
            total *= len(c)
        if total + len(seen) > MAX_NAMES:
            raise InputError(f"host list {where}: more than {MAX_NAMES} names", hint=HINT)
        for combo in product(*choices):
            name = "".join(combo)
            if not _NAME.fullmatch(name):
                raise InputError(
                    f"host list {where}: {safe_excerpt(name, 40)} is not a host name", hint=HINT
                )
            seen.setdefault(name, None)
    if not seen:
        raise InputError("the host list is empty", hint=HINT)
    return list(seen)


def compress(names: list[str]) -> str:
    """The shortest usual form: names with a common prefix and digit width as one bracketed range."""
    groups: dict[tuple[str, int], list[int]] = {}
    plain: list[str] = []
    for name in sorted(set(names)):
        m = _TAIL.match(name)
        if m:
            groups.setdefault((m.group(1), len(m.group(2))), []).append(int(m.group(2)))
        else:
            plain.append(name)
    out = list(plain)
    for (prefix, width), nums in sorted(groups.items()):
        nums.sort()
        if len(nums) == 1:
            out.append(f"{prefix}{nums[0]:0{width}d}")
            continue
        runs: list[str] = []
        start = prev = nums[0]
        nxt: list[int | None] = [*nums[1:], None]
        for n in nxt:
            if n is not None and n == prev + 1:
                prev = n
                continue
            runs.append(
                f"{start:0{width}d}" if start == prev else f"{start:0{width}d}-{prev:0{width}d}"
            )
            if n is not None:
                start = prev = n
        out.append(f"{prefix}[{','.join(runs)}]")
    return ",".join(out)

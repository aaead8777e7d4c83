"""Sizes and counts as users type them, and as people read them back.

Message sizes follow nccl-tests and perftest: a bare suffix is binary (``64K`` = 65536 B,
``8G`` = 2**33 B), so is an IEC suffix (``25MiB``); an SI suffix with ``B`` is decimal
(``16GB`` = 16e9 B), because gradient sizes are quoted that way ("8e9 bf16 parameters = 16 GB").
Plain numbers are bytes. A lower-case ``b`` (``8Gb``, ``64Kib``) means bits, as in link rates
(``400 Gb/s``), and is refused. Bandwidth is always decimal (GB/s = 1e9 B/s, as nccl-tests prints).
"""

from __future__ import annotations

import math
import re
from datetime import datetime, timezone

from ibdiag.errors import UsageError

_BINARY = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40, "P": 2**50}
_DECIMAL = {"K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15}

#: Matched against the stripped text: no run of spaces next to another, so a try is linear.
_SIZE_RE = re.compile(
    r"(?P<num>\d{1,64}(?:\.\d{1,64})?(?:[eE][+-]?\d{1,4})?)\s{0,8}(?P<unit>[KMGTPkmgtp]?)(?P<suffix>(?:i?[Bb])?)"
)

#: Largest size a user may ask for anywhere (1 PiB): beyond it the number is surely a typo.
MAX_SIZE_BYTES = 2**50

#: Most sizes one size specification may expand to (nccl-tests' 8:16G doubling range is 32).
MAX_SIZES = 64


def parse_size(text: str, *, what: str = "size") -> int:
    """``"64K"`` -> 65536, ``"25MiB"`` -> 26214400, ``"16GB"`` -> 16e9, ``"512"`` -> 512 (bytes).

    Raises :class:`UsageError` for anything else, naming ``what`` was being parsed.
    """
    m = _SIZE_RE.fullmatch(str(text).strip())
    if not m:
        raise UsageError(
            f"cannot read {what} {text!r}",
            hint="write bytes as a number with an optional suffix: 4096, 64K, 25MiB, 8G (binary) or 16GB (decimal)",
        )
    num = float(m.group("num"))
    unit = m.group("unit").upper()
    suffix = m.group("suffix")
    if suffix.endswith("b"):
        # Gb/s, Mb/s are bits everywhere else in ibdiag (link rates): a size in bits is surely a slip
        n = m.group("num")
        raise UsageError(
            f"{what} {text!r}: a lower-case b means bits, and sizes are bytes",
            hint=f"write {n}{unit}B (decimal bytes) or {n}{unit}iB / {n}{unit} (binary bytes)"
            if unit
            else f"write {n} (bytes)",
        )
    if suffix == "B" and unit:
        scale = _DECIMAL[unit]
    else:
        scale = _BINARY[unit]
    value = num * scale
    if not math.isfinite(value) or value > MAX_SIZE_BYTES:
        raise UsageError(f"{what} {text!r} is absurdly large", hint="sizes above 1 PiB are refused")
    if value != int(value):
        raise UsageError(
            f"{what} {text!r} is not a whole number of bytes",
            hint="use a whole number of bytes, e.g. 4K",
        )
    return int(value)


def parse_size_spec(
    text: str, *, factor: float = 2.0, what: str = "--sizes", minimum: int = 1
) -> tuple[int, ...]:
    """A list (``"4K,64K,1M"``) or a range (``"4K:64M"``, multiplied by ``factor`` like nccl-tests' ``-f``).

    The range includes both ends when the steps land on the maximum; sizes come back ascending
    for a range and in the given order for a list.
    """
    text = str(text).strip()
    if not text:
        raise UsageError(
            f"{what} is empty", hint="give a list like 4K,64K,1M or a range like 4K:64M"
        )
    if ":" in text:
        parts = text.split(":")
        if len(parts) != 2:
            raise UsageError(f"cannot read {what} {text!r}", hint="a range is MIN:MAX, e.g. 4K:64M")
        lo, hi = (parse_size(p, what=what) for p in parts)
        if lo < minimum:
            raise UsageError(
                f"{what} {text!r} starts below {minimum} bytes", hint=f"start at {minimum} or more"
            )
        if hi < lo:
            raise UsageError(
                f"{what} {text!r} ends below its start", hint="write the range as MIN:MAX"
            )
        if not factor > 1:
            raise UsageError(
                f"size factor {factor} must be greater than 1",
                hint="use --factor 2 to double each step",
            )
        sizes: list[int] = []
        size = float(lo)
        while size <= hi * (1 + 1e-12):
            sizes.append(int(round(size)))
            if len(sizes) > MAX_SIZES:
                raise UsageError(
                    f"{what} {text!r} expands to more than {MAX_SIZES} sizes",
                    hint="narrow the range or raise --factor",
                )
            size *= factor
        return tuple(sizes)
    sizes = []
    for part in text.split(","):
        if not part.strip():
            raise UsageError(
                f"cannot read {what} {text!r}: empty item",
                hint="separate sizes with single commas: 4K,64K",
            )
        size = parse_size(part, what=what)
        if size < minimum:
            raise UsageError(
                f"{what} item {part!r} is below {minimum} bytes",
                hint=f"use sizes of {minimum} bytes or more",
            )
        sizes.append(size)
    if len(sizes) > MAX_SIZES:
        raise UsageError(
            f"{what} lists more than {MAX_SIZES} sizes", hint="measure fewer sizes per run"
        )
    return tuple(sizes)


def format_bytes(n: int | float | None) -> str:
    """Binary size for people: 4096 -> ``"4 KiB"``, 26214400 -> ``"25 MiB"``, 8 -> ``"8 B"``."""
    if n is None:
        return "-"
    n = float(n)
    for unit, scale in (
        ("PiB", 2**50),
        ("TiB", 2**40),
        ("GiB", 2**30),
        ("MiB", 2**20),
        ("KiB", 2**10),
    ):
        if abs(n) >= scale:
            value = n / scale
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.3g} {unit}"
    return f"{n:.0f} B"


def format_seconds(s: float | None) -> str:
    """Seconds for people, in the unit that keeps 3 significant digits: 0.000012 -> ``"12.0 µs"``."""
    if s is None:
        return "-"
    a = abs(s)
    if a >= 1:
        return f"{s:.3g} s" if a < 100 else f"{s:.0f} s"
    if a >= 1e-3:
        return f"{s * 1e3:.3g} ms"
    if a >= 1e-6:
        return f"{s * 1e6:.3g} µs"
    return f"{s * 1e9:.3g} ns"


def format_term_seconds(s: float | None) -> str:
    """:func:`format_seconds`, except that zero reads ``0 s``: a term of the verdict's arithmetic that
    is absent (no forward pass given), not a few nanoseconds."""
    return "0 s" if s == 0 else format_seconds(s)


def format_duration(seconds: float) -> str:
    """``10 s``, ``250 ms``, ``12.5 min``, ``3.2 h``: an interval as an operator says it (a counters
    sampling interval, a baseline's age)."""
    if seconds >= 7200:
        return f"{seconds / 3600:.3g} h"
    if seconds >= 120:
        return f"{seconds / 60:.3g} min"
    return format_seconds(seconds)


def gbs_to_gbps(gb_per_s: float) -> float:
    """GB/s (1e9 bytes/s) to Gb/s (1e9 bits/s): a measured bandwidth against a link rate."""
    return gb_per_s * 8.0


_DURATION_RE = re.compile(r"(?P<num>\d{1,9}(?:\.\d{1,9})?)\s{0,8}(?P<unit>[smhd]?)")
_DURATION_UNIT_S = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_hours(text: str, *, what: str, maximum_s: float) -> float:
    """A span as an operator types it, in seconds: ``6h``, ``2d``, ``90m``, ``30s``; a bare number is
    hours (as ``[history] window_hours``). Above 0 and at most ``maximum_s``; else a UsageError."""
    m = _DURATION_RE.fullmatch(text.strip())
    hint = f"e.g. {what} 6h, {what} 2d, {what} 90m (a bare number is hours)"
    if not m:
        raise UsageError(f"{what} {text!r} is not a span of time", hint=hint)
    seconds = float(m["num"]) * _DURATION_UNIT_S[m["unit"] or "h"]
    if not 0 < seconds <= maximum_s:
        raise UsageError(f"{what} {text!r} is outside (0, {format_duration(maximum_s)}]", hint=hint)
    return seconds


def parse_utc_time(text: str, *, what: str) -> float:
    """An ISO 8601 time (``2026-12-02T06:00Z``, ``2026-12-02 06:00:00+01:00``, a date alone) as Unix
    seconds; a time without a zone is UTC."""
    value = text.strip()
    if value.endswith(("Z", "z")):
        value = value[:-1] + "+00:00"
    try:
        if len(value) > 64:
            raise ValueError
        when = datetime.fromisoformat(value)
    except ValueError:
        raise UsageError(
            f"{what} {text!r} is not an ISO 8601 time",
            hint=f"e.g. {what} 2026-12-02T06:00Z (a time without a zone is UTC)",
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when.timestamp()

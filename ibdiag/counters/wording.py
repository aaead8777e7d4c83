"""How ``ibdiag counters`` writes times and shares, in findings and in every view."""

from __future__ import annotations

from datetime import datetime, timezone

from ibdiag.units import format_seconds


def iso_utc(epoch_s: float) -> str:
    """``2026-11-29T09:14:00.123456Z``: the precise time of a sample (the envelope's is to the second)."""
    return (
        datetime.fromtimestamp(epoch_s, timezone.utc)
        .isoformat(timespec="microseconds")
        .replace("+00:00", "Z")
    )


def duration_text(seconds: float) -> str:
    """``10 s``, ``250 ms``, ``12.5 min``, ``3.2 h``: an interval as an operator says it."""
    if seconds >= 7200:
        return f"{seconds / 3600:.3g} h"
    if seconds >= 120:
        return f"{seconds / 60:.3g} min"
    return format_seconds(seconds)


def pct(v: float | None) -> str:
    """A share in percent for people: ``12%``, ``0.5%``, ``<0.01%``; ``-`` when unknown."""
    if v is None:
        return "-"
    if v == 0:
        return "0%"
    if abs(v) < 0.01:
        return "<0.01%"
    return f"{v:.0f}%" if abs(v) >= 10 else f"{v:.2g}%"


def count_text(v: float | None) -> str:
    """A count or rate in a sentence: ``25``, ``2.5``, ``1234``; ``?`` when unknown."""
    if v is None:
        return "?"
    if v == int(v) and abs(v) < 1e15:
        return str(int(v))
    if abs(v) >= 100:
        return f"{v:.0f}"
    return f"{v:.3g}"

"""How ``ibdiag counters`` writes sample times, counts and shares, in findings and in every view.
Durations are written by :func:`ibdiag.units.format_duration`."""

from __future__ import annotations

from datetime import datetime, timezone


def iso_utc(epoch_s: float) -> str:
    """``2026-11-29T09:14:00.123456Z``: the precise time of a sample (the envelope's is to the second)."""
    return (
        datetime.fromtimestamp(epoch_s, timezone.utc)
        .isoformat(timespec="microseconds")
        .replace("+00:00", "Z")
    )


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

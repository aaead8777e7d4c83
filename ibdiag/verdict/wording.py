"""How the verdict writes times in its sentences and findings."""

from __future__ import annotations

from ibdiag.units import format_seconds as _format_seconds


def format_seconds(s: float | None) -> str:
    """:func:`ibdiag.units.format_seconds`, except that zero reads ``0 s``."""
    return "0 s" if s == 0 else _format_seconds(s)

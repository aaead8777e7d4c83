"""Writing the optional fields of a bench document (reading any JSON from outside: :mod:`ibdiag.jsonread`)."""

from __future__ import annotations

from typing import Any


def put(doc: dict[str, Any], key: str, value: Any) -> None:
    """``doc[key] = value`` unless the value is None or empty (fields a source may not have)."""
    if value is None or (isinstance(value, (list, tuple, dict)) and not value):
        return
    doc[key] = list(value) if isinstance(value, tuple) else value

"""Text from outside (sysfs values, archive members, peers' strings) made safe to put in a message.

A value ibdiag did not expect is shown, never echoed whole: :func:`safe_excerpt` caps its length and
escapes every character that could move the cursor, start a terminal escape sequence or forge a new
log line, so an error message stays one honest line whatever the input was.
"""

from __future__ import annotations

#: Characters of an excerpt by default: enough to recognise a value, too few to flood a log.
EXCERPT_CHARS = 64


def _escape(ch: str, *, ascii_only: bool = False) -> str:
    if ch == "\\":
        return "\\\\"
    if ch.isprintable() and not (ascii_only and ord(ch) > 0x7E):
        return ch
    code = ord(ch)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def safe_excerpt(value: object, limit: int = EXCERPT_CHARS, *, quote: bool = True) -> str:
    """``value`` as one printable line of at most ``limit`` characters of the original, quoted.

    Control characters (newlines, ESC, DEL, C1), Unicode separators and format characters (bidi
    overrides) become ``\\xNN``/``\\uNNNN`` escapes and a backslash is doubled, so the excerpt is
    unambiguous; in bytes every non-ASCII byte is escaped too (``b'\\xff'`` -> ``'\\xff'``). A longer
    value is cut and the cut is said: ``'abc…' (5000 characters)``. ``quote=False`` leaves out the
    quotes (for an error text that is not itself a value).
    """
    raw = isinstance(value, (bytes, bytearray, memoryview))
    text = bytes(value).decode("latin-1") if raw else str(value)  # type: ignore[arg-type]
    limit = max(1, int(limit))
    head = "".join(_escape(ch, ascii_only=raw) for ch in text[:limit])
    q = "'" if quote else ""
    if len(text) > limit:
        return f"{q}{head}…{q} ({len(text)} characters)"
    return f"{q}{head}{q}"


def safe_value(value: object, limit: int = EXCERPT_CHARS) -> str:
    """A value parsed from a file (JSON, TOML) for a message: a string as a quoted excerpt, anything
    else as its ``repr`` cut and escaped (``4``, ``nan``, ``[1, 2]``), so a number reads as a number."""
    if isinstance(value, str):
        return safe_excerpt(value, limit)
    try:
        text = repr(value)
    except RecursionError:
        text = f"<{type(value).__name__} nested too deeply>"
    return safe_excerpt(text, limit, quote=False)

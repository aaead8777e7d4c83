"""Text from outside (a peer's message, a sysfs value, a file) made safe to put in a log line or a terminal.

One helper, :func:`safe_excerpt`, used wherever a string ibdiag did not write itself reaches a
message: control characters (newlines, ESC and the rest of C0/C1, DEL) and invisible format
characters (bidirectional overrides, zero-width spaces: Unicode category Cf) are shown escaped, as
Python writes them in a string literal (``\\n``, ``\\x1b``, ``\\u202e``), so a value can neither
forge a log line nor move the cursor or recolour the terminal; and the result is capped, so a
60,000-character value costs one short line.
"""

from __future__ import annotations

import unicodedata

#: Default cap, in characters of the result (escapes included), before the "more characters" note.
DEFAULT_LIMIT = 120

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\\": "\\\\"}
#: Unicode categories a terminal or a log acts on: controls, format characters (bidirectional
#: overrides, zero-width spaces), surrogates, line and paragraph separators.
_UNSAFE_CATEGORIES = ("Cc", "Cf", "Cs", "Zl", "Zp")


def is_printable(text: str) -> bool:
    """The one printable rule for text from outside: no character :func:`safe_excerpt` would escape
    but the tab (log lines carry tabs)."""
    if text.isprintable():  # the common case, in C: nothing of those categories
        return True
    return not any(ch != "\t" and unicodedata.category(ch) in _UNSAFE_CATEGORIES for ch in text)


def _escaped(ch: str) -> str:
    named = _NAMED.get(ch)
    if named is not None:
        return named
    if unicodedata.category(ch) in _UNSAFE_CATEGORIES:
        code = ord(ch)
        if 0xDC80 <= code <= 0xDCFF:  # an undecodable byte (surrogateescape)
            return f"\\x{code - 0xDC00:02x}"
        if code < 0x100:
            return f"\\x{code:02x}"
        if code < 0x10000:
            return f"\\u{code:04x}"
        return f"\\U{code:08x}"
    return ch


def safe_excerpt(value: object, limit: int = DEFAULT_LIMIT) -> str:
    """``value`` as one printable line of at most ``limit`` characters (plus a note of what was cut).

    Bytes are decoded as UTF-8 with undecodable bytes shown as ``\\xNN``; anything else goes through
    ``str``. Backslashes are doubled so an escape in the output always means an escaped character.
    """
    if isinstance(value, (bytes, bytearray, memoryview)):
        text = bytes(value).decode("utf-8", errors="surrogateescape")
    else:
        text = value if isinstance(value, str) else str(value)
    out: list[str] = []
    used = 0
    for i, ch in enumerate(text):
        piece = _escaped(ch)
        if used + len(piece) > limit:
            rest = len(text) - i
            out.append(f"… ({rest} more character{'s' if rest != 1 else ''})")
            break
        out.append(piece)
        used += len(piece)
    return "".join(out)


def safe_value(value: object, limit: int = 64) -> str:
    """A value parsed from a file or a tree (JSON, TOML, a name or a sysfs value) for a message: a
    string quoted (``'mlx5_\\n0'``), anything else as its ``repr`` (``4``, ``nan``, ``[1, 2]``), so a
    number reads as a number and the end of a string is visible. Escaped and capped by :func:`safe_excerpt`."""
    if isinstance(value, str):
        return f"'{safe_excerpt(value, limit)}'"
    try:
        text = repr(value)
    except RecursionError:
        text = f"<{type(value).__name__} nested too deeply>"
    return safe_excerpt(text, limit)


def safe_path(value: object, limit: int = 64) -> str:
    """A file's path for a message, quoted and escaped as :func:`safe_value` shows a string, but a
    long one cut in the middle so the file's own name stays: ``'/srv/dumps/rack-…/ibnetdiscover.out'``
    (a name longer than ``limit`` alone is cut at its end, as any value)."""
    head, sep, name = str(value).rpartition("/")
    shown = safe_excerpt(name, limit)
    if not sep:
        return f"'{shown}'"
    room = limit - len(shown) - 1
    pieces: list[str] = []
    used = 0
    for ch in head:
        piece = _escaped(ch)
        if used + len(piece) > room:
            while pieces and used + 1 > room:
                used -= len(pieces.pop())
            pieces.append("…")
            break
        pieces.append(piece)
        used += len(piece)
    return f"'{''.join(pieces)}/{shown}'"

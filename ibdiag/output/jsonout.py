"""The JSON envelope every command shares, and the reader that checks one on the way back in."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from json.encoder import encode_basestring_ascii
from pathlib import Path
from typing import Any

from ibdiag.errors import InputError
from ibdiag.findings.model import Report, RunMeta
from ibdiag.infile import RefusedFile, read_regular
from ibdiag.jsonread import MAX_DOCUMENT_BYTES, JsonFieldError, loads
from ibdiag.text import safe_value

ENVELOPE_KEYS = ("schema", "version", "host", "generated_at", "status", "findings")


def envelope(report: Report, meta: RunMeta) -> dict[str, Any]:
    """``{"schema": "ibdiag.<command>/1", "version", "host", "generated_at", "status", "findings", ...data}``."""
    doc: dict[str, Any] = {
        "schema": report.schema,
        "version": meta.version,
        "host": meta.host,
        "generated_at": meta.generated_at,
        "status": report.status.value,
        "findings": [f.to_json() for f in report.findings],
    }
    for key, value in report.data.items():
        if key in doc:
            raise ValueError(f"command data key {key!r} collides with the envelope")
        doc[key] = value
    return doc


def _clean(value: Any) -> Any:
    # JSON has no NaN or Infinity; a value that is not a number is unknown, i.e. null.
    # The plain types first, by exact type (a document is thousands of them; the ABC check below
    # costs a few times more); subclasses and other mappings take the general path.
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return value
    if kind is float:
        return value if math.isfinite(value) else None
    if kind is dict:
        return {k if type(k) is str else str(k): _clean(v) for k, v in value.items()}
    if kind is list or kind is tuple:
        return [_clean(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def render_json(report: Report, meta: RunMeta) -> str:
    doc = envelope(report, meta)
    out: list[str] = []
    try:
        _indented(doc, out, "\n")
    except _Unusual:
        return json.dumps(_clean(doc), indent=2, allow_nan=False) + "\n"
    return "".join(out) + "\n"


class _Unusual(Exception):
    """A value of another type than the plain JSON ones: the general path writes the document."""


def _indented(value: Any, out: list[str], pad: str) -> None:
    """``json.dumps(_clean(value), indent=2)``, byte for byte, for plain dicts, lists, tuples, strings,
    ints, floats, bools and None, in one pass and about twice as fast (the standard library's encoder
    is pure Python when it indents: 56 ms against 27 for `ibdiag fabric`'s 1 MB document at 4096
    ports; tests/output/test_jsonout_fast.py checks the bytes)."""
    kind = type(value)
    if kind is str:
        out.append(encode_basestring_ascii(value))
    elif value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif kind is int:
        out.append(int.__repr__(value))
    elif kind is float:
        out.append(float.__repr__(value) if math.isfinite(value) else "null")
    elif kind is dict:
        if not value:
            out.append("{}")
            return
        inner = pad + "  "
        sep = "{" + inner
        for k, v in value.items():
            if (
                type(k) is not str
            ):  # _clean turns keys into strings and may merge two: its path decides
                raise _Unusual
            out.append(sep)
            out.append(encode_basestring_ascii(k))
            out.append(": ")
            _indented(v, out, inner)
            sep = "," + inner
        out.append(pad + "}")
    elif kind is list or kind is tuple:
        if not value:
            out.append("[]")
            return
        inner = pad + "  "
        sep = "[" + inner
        for v in value:
            out.append(sep)
            _indented(v, out, inner)
            sep = "," + inner
        out.append(pad + "]")
    else:
        raise _Unusual


def load_envelope(path: Path | str, *, schema: str | tuple[str, ...]) -> dict[str, Any]:
    """Read an ibdiag JSON document and check its envelope; ``schema`` is the accepted schema id(s).

    Raises :class:`InputError` (exit 2) for a missing, unreadable, non-JSON or foreign document.
    """
    schemas = (schema,) if isinstance(schema, str) else tuple(schema)
    p = Path(path)
    try:
        text = read_regular(p, MAX_DOCUMENT_BYTES)  # a device or FIFO is never opened
    except RefusedFile as e:
        raise InputError(
            f"{p}: {e.problem}", hint="give a file written by ibdiag ... -o json or --save"
        ) from None
    except FileNotFoundError:
        raise InputError(f"{p}: no such file", hint="check the path") from None
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(
            f"{p}: cannot read: {e}", hint="check the file's permissions and that it is text"
        ) from None
    try:
        doc = loads(text)
    except JsonFieldError as e:
        raise InputError(
            f"{p}: {e.problem}",
            hint="give a file written by ibdiag ... -o json or --save",
        ) from None
    if not isinstance(doc, dict) or "schema" not in doc:
        raise InputError(
            f"{p}: not an ibdiag JSON document (no schema)",
            hint="give a file written by ibdiag ... -o json or --save",
        )
    if doc["schema"] not in schemas:
        raise InputError(
            f"{p}: schema is {safe_value(doc['schema'])}, expected {' or '.join(schemas)}",
            hint="give the file the matching ibdiag command wrote",
        )
    return doc

"""The JSON envelope every command shares, and the reader that checks one on the way back in."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from json.encoder import encode_basestring_ascii
from pathlib import Path
from typing import Any

from ibdiag.errors import InputError
from ibdiag.findings.model import Report, RunMeta
from ibdiag.infile import RefusedFile, read_regular
from ibdiag.jsonread import MAX_DOCUMENT_BYTES, JsonFieldError, loads
from ibdiag.output.records import Records, records_of
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
    if kind is list or kind is tuple or kind is Records:
        return [_clean(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def render_json(report: Report, meta: RunMeta) -> str:
    """The document, indented as ``json.dumps(doc, indent=2)`` writes it, as one string."""
    out: list[str] = []
    write_json(report, meta, out.append)
    return "".join(out)


def write_json(report: Report, meta: RunMeta, write: Callable[[str], object]) -> None:
    """The document as :func:`render_json` writes it, handed to ``write`` in pieces (one join of about
    :data:`FLUSH_PIECES` strings each): a large document (a 100k-port fabric's tens of MB) is never held
    twice, as a list of pieces and their join."""
    writer = _Writer(write)
    writer.value(envelope(report, meta), "\n")
    writer.out.append("\n")
    writer.flush()


#: Pieces held before they are handed on (:func:`write_json`).
FLUSH_PIECES = 65536
#: A list of at least this many dicts is tried as a table (:meth:`_Writer.table`), and written this many
#: rows at a time (each block's column texts are held until its rows are joined).
TABLE_MIN_ROWS = 2
TABLE_BLOCK_ROWS = 4096
_STR_ONLY = frozenset((str,))
_NONE = type(None)
_STR_OR_NONE = frozenset((str, _NONE))
_INT_OR_NONE = frozenset((int, _NONE))
_SEQUENCES = frozenset((list, tuple))
_int_repr = int.__repr__
_float_repr = float.__repr__
_finite = math.isfinite


def _general(value: Any, pad: str) -> str:
    """What ``json.dumps(_clean(doc), indent=2)`` writes for ``value`` where it sits (its lines after the
    first indented by ``pad``): the standard library's encoder, for what the one-pass writer does not
    take (a mapping of another type, a key that is not a string, an enum). Strings are escaped there,
    so every newline of its output is one it put between lines."""
    return json.dumps(_clean(value), indent=2, allow_nan=False).replace("\n", pad)


class _Writer:
    """``json.dumps(_clean(value), indent=2)``, byte for byte, in one pass: the scalars of a container
    are written where it is walked (no call per value) and each key's ``,\n<indent>"key": `` is encoded
    once per depth (a document of 10,000 links repeats a dozen keys). Plain dicts (string keys), lists,
    tuples, strings, ints, floats, bools and None are written here, and :class:`Records` (rows held by
    column) as the list of dicts they stand for; a list of dicts that share their keys is written as
    such records, column by column (:meth:`table`). Anything else goes to the standard library's
    encoder where it sits (:func:`_general`), which writes what it would have written in the whole
    document. The standard library's indenting encoder is pure Python and about twice as slow;
    tests/output/test_jsonout_fast.py and test_records.py check the bytes."""

    def __init__(self, write: Callable[[str], object]) -> None:
        self.write = write
        self.out: list[str] = []
        self.keys: dict[str, dict[str, str]] = {}

    def flush(self) -> None:
        if self.out:
            self.write("".join(self.out))
            self.out.clear()

    def value(self, value: Any, pad: str) -> None:
        kind = type(value)
        if kind is dict:
            self.mapping(value, pad)
        elif kind is list or kind is tuple:
            self.sequence(value, pad)
        elif kind is Records:
            self.records(value, pad)
        else:
            self.out.append(self.scalar(value, pad))

    @staticmethod
    def scalar(value: Any, pad: str) -> str:
        kind = type(value)
        if kind is str:
            return encode_basestring_ascii(value)
        if value is None:
            return "null"
        if value is True:
            return "true"
        if value is False:
            return "false"
        if kind is int:
            return _int_repr(value)
        if kind is float:
            return _float_repr(value) if _finite(value) else "null"
        return _general(value, pad)

    def mapping(self, value: dict[Any, Any], pad: str) -> None:
        out = self.out
        if not value:
            out.append("{}")
            return
        if not _STR_ONLY.issuperset(map(type, value)):
            out.append(_general(value, pad))  # _clean turns keys into strings and may merge two
            return
        inner = pad + "  "
        keys = self.keys.get(inner)
        if keys is None:
            keys = self.keys[inner] = {}
        first = "{" + inner
        for k, v in value.items():
            if first:
                p = first + encode_basestring_ascii(k) + ": "
                first = ""
            else:
                p = keys.get(k)  # type: ignore[assignment]
                if p is None:
                    p = keys[k] = "," + inner + encode_basestring_ascii(k) + ": "
            kind = type(v)
            if kind is str:
                out.append(p + encode_basestring_ascii(v))
            elif kind is int:
                out.append(p + _int_repr(v))
            elif v is None:
                out.append(p + "null")
            elif kind is float:
                out.append(p + (_float_repr(v) if _finite(v) else "null"))
            elif v is True:
                out.append(p + "true")
            elif v is False:
                out.append(p + "false")
            else:
                out.append(p)
                self.value(v, inner)
        out.append(pad + "}")

    def sequence(self, value: list[Any] | tuple[Any, ...], pad: str) -> None:
        out = self.out
        if not value:
            out.append("[]")
            return
        inner = pad + "  "
        if len(value) >= TABLE_MIN_ROWS and type(value[0]) is dict and self.table(value, pad):
            return
        sep, nxt = "[" + inner, "," + inner
        for v in value:
            kind = type(v)
            if kind is str:
                out.append(sep + encode_basestring_ascii(v))
            elif kind is dict or kind is list or kind is tuple or kind is Records:
                out.append(sep)
                self.value(v, inner)
                if len(out) > FLUSH_PIECES:
                    self.flush()
            else:
                out.append(sep + self.scalar(v, inner))
            sep = nxt
        out.append(pad + "]")

    def table(self, rows: list[Any] | tuple[Any, ...], pad: str) -> bool:
        """A list of dicts that share their keys (:func:`records_of`), written as the
        :class:`Records` it is, :data:`TABLE_BLOCK_ROWS` rows at a time (a later block whose rows do
        not, row by row); False (nothing written) where the first block's rows are not such dicts."""
        inner = pad + "  "
        for start in range(0, len(rows), TABLE_BLOCK_ROWS):
            block = rows[start : start + TABLE_BLOCK_ROWS]
            recs = records_of(block)
            if recs is None and start == 0:
                return False
            texts = (
                self.records_text(recs, inner)
                if recs is not None
                else [self.text(v, inner) for v in block]
            )
            self.block(start, texts, inner)
        self.out.append(pad + "]")
        return True

    def records(self, recs: Records, pad: str) -> None:
        """:class:`Records` as the list of dicts it stands for, :data:`TABLE_BLOCK_ROWS` rows at a
        time: each column's values encoded by one C-level ``map`` where they are all of one plain
        type, each row one ``%`` of a template made once; the same bytes as :meth:`mapping` row by
        row."""
        if not len(recs):
            self.out.append("[]")
            return
        inner = pad + "  "
        for start in range(0, len(recs), TABLE_BLOCK_ROWS):
            self.block(
                start, self.records_text(recs.block(start, start + TABLE_BLOCK_ROWS), inner), inner
            )
        self.out.append(pad + "]")

    def block(self, start: int, texts: list[str], inner: str) -> None:
        """One block of a list's rows, the list opened before the first, handed on."""
        self.out.append(("[" if start == 0 else ",") + inner + ("," + inner).join(texts))
        self.flush()

    def records_text(self, recs: Records, pad: str) -> list[str]:
        """Each row of ``recs`` (written at ``pad``) as :meth:`value` writes it."""
        if recs.keys:
            template, texts = self.template(recs, pad)
            rows = list(map(template.__mod__, zip(*texts, strict=True)))
        else:
            rows = ["{}"] * (len(recs) if recs.present is None else sum(recs.present))
        if recs.present is None:
            return rows
        each = iter(rows)
        return [next(each) if p else "null" for p in recs.present]

    def template(self, recs: Records, pad: str) -> tuple[str, list[list[str]]]:
        """A row of ``recs`` (with keys) as a ``%`` template, and the texts that fill it, a list per
        ``%s``: records nested under a key on every row are spelled out in the template itself (one
        ``%`` a row for them all); nested records with null rows, and plain columns, are a ``%s``."""
        inner = pad + "  "
        parts: list[str] = []
        texts: list[list[str]] = []
        for k, c in zip(recs.keys, recs.columns, strict=True):
            key = encode_basestring_ascii(k).replace("%", "%%") + ": "
            if type(c) is Records and c.present is None and c.keys:
                nested, more = self.template(c, inner)
                parts.append(key + nested)
                texts += more
            else:
                parts.append(key + "%s")
                texts.append(
                    self.records_text(c, inner) if type(c) is Records else self.column(c, inner)
                )
        return "{" + inner + ("," + inner).join(parts) + pad + "}", texts

    def column(self, col: Sequence[Any], pad: str) -> list[str]:
        """The values of one key down a table's rows, each as :meth:`mapping` writes it (``pad``: the
        key's line's indent, where a nested value's lines are indented from)."""
        kinds = set(map(type, col))
        if kinds == _STR_ONLY:
            return list(map(encode_basestring_ascii, col))
        if kinds <= _STR_OR_NONE:
            return ["null" if v is None else encode_basestring_ascii(v) for v in col]
        if kinds <= _INT_OR_NONE:
            return ["null" if v is None else _int_repr(v) for v in col]
        if kinds == {float} and all(map(_finite, col)):
            return list(map(_float_repr, col))
        if kinds <= _SEQUENCES and not any(col):
            return ["[]"] * len(col)  # a column of empty lists (an adapter's GPUs, unknown)
        return [self.text(v, pad) for v in col]

    def text(self, value: Any, pad: str) -> str:
        """``value`` as :meth:`value` writes it at ``pad``, as one string."""
        kind = type(value)
        if kind is dict or kind is list or kind is tuple or kind is Records:
            parts: list[str] = []
            sub = _Writer(parts.append)
            sub.keys = self.keys
            sub.value(value, pad)
            sub.flush()
            return "".join(parts)
        return self.scalar(value, pad)


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

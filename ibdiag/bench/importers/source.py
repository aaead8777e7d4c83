"""Reading a benchmark log from a file, ``-`` (stdin) or a ``.gz``, in bounded memory.

A log is read line by line, never whole: a 1 GB job log with 10^6 rows costs the rows kept, not the
file. What is read is counted after decompression (a gzip bomb, ``/dev/zero`` or an endless stdin stop
at :data:`MAX_BYTES`); a line longer than :data:`MAX_LINE` is cut there and its rest skipped unread
(such a line is never a table row); NUL bytes mean a binary file. A JSON document (its first
non-blank character is ``{`` or ``[``) is read whole, up to :data:`MAX_JSON_BYTES`. Every refusal is an
:class:`~ibdiag.errors.InputError` (exit 2) naming the file.
"""

from __future__ import annotations

import gzip
import os
import re
import sys
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Protocol

from ibdiag.bench.importers.lines import Truncated
from ibdiag.errors import InputError
from ibdiag.infile import RefusedFile, open_regular
from ibdiag.text import safe_value

MAX_BYTES = 2 * 2**30
"""Most bytes read from one log, after decompression (2 GiB: a benchmark's log is far smaller)."""
MAX_LINE = 64 * 1024
"""Longest line kept (bytes); the rest of a longer line is skipped."""
MAX_JSON_BYTES = 64 * 2**20
"""Largest JSON document read (nccl-tests ``-J`` and perftest ``--out_json`` files are kilobytes)."""
_PEEK = 64 * 1024
_PREFIXED = re.compile(rb"^\[\d+(?:,\d+\]<\w+>:|\]\s)")
"""A line prefixed by mpirun --tag-output ([1,0]<stdout>:) or -prepend-rank ([0] ), not a JSON list."""
_JSON_LIST = re.compile(rb"^\[\s{0,64}(?:[\[{\]]|$)")
"""A JSON document that is a list holds lists or objects (or nothing): ``[2026-11-30 08:14:02,118]`` and
``[rank0]:`` start text logs."""
_BINARY_HINT = "give the text output of nccl-tests or perftest (or their JSON files)"


class _Stream(Protocol):
    """What a log is read from: a binary file, stdin's buffer, :class:`_TextAsBytes` or a GzipFile."""

    def read(self, n: int = -1, /) -> bytes: ...
    def readline(self, n: int = -1, /) -> bytes: ...


class _Counted:
    """A binary stream that refuses to give more than MAX_BYTES in all."""

    def __init__(self, raw: _Stream, source: str, limit: int) -> None:
        self.raw, self.source, self.limit, self.count = raw, source, limit, 0

    def _add(self, n: int) -> None:
        self.count += n
        if self.count > self.limit:
            raise InputError(
                f"{self.source}: more than {self.limit // 2**20} MiB (after decompression): not a benchmark log",
                hint="give the benchmark's own output, not a whole job log or a device",
            )

    def read(self, n: int) -> bytes:
        data = self.raw.read(n)
        self._add(len(data))
        return data

    def readline(self, n: int) -> bytes:
        data = self.raw.readline(n)
        self._add(len(data))
        return data


@dataclass
class LogInput:
    """An opened log: its name, the first bytes, and the stream of the rest."""

    source: str
    head: bytes
    stream: _GzipGuard

    @property
    def is_json(self) -> bool:
        stripped = self.head.lstrip()
        return stripped[:1] == b"{" or (
            stripped[:1] == b"["
            and not _PREFIXED.match(stripped)
            and bool(_JSON_LIST.match(stripped))
        )

    def json_text(self) -> str:
        """The whole document (up to MAX_JSON_BYTES)."""
        rest = self.stream.read(MAX_JSON_BYTES + 1 - len(self.head))
        data = self.head + rest
        if len(data) > MAX_JSON_BYTES:
            raise InputError(
                f"{self.source}: a JSON document over {MAX_JSON_BYTES // 2**20} MiB",
                hint="nccl-tests -J and perftest --out_json files are small; check the file",
            )
        _refuse_binary(data, self.source)
        return data.decode("utf-8", errors="replace")

    def lines(self) -> Iterator[str]:
        """Every line, decoded (UTF-8, undecodable bytes replaced); a cut line is a :class:`Truncated`."""
        pending = self.head
        number = 0
        while True:
            nl = pending.find(b"\n")
            while nl < 0 and len(pending) < MAX_LINE:
                more = self.stream.readline(MAX_LINE - len(pending))
                if not more:
                    break
                pending += more
                nl = pending.find(b"\n")
            if not pending:
                return
            number += 1
            if nl >= 0:
                line, pending = pending[: nl + 1], pending[nl + 1 :]
                yield _decode(line, self.source, number)
                continue
            if len(pending) < MAX_LINE:  # the last line, without a newline
                yield _decode(pending, self.source, number)
                return
            cut = pending[:MAX_LINE]
            pending = b""
            while True:  # skip the rest of the long line unread (in chunks)
                chunk = self.stream.readline(MAX_LINE)
                if not chunk or chunk.endswith(b"\n"):
                    break
            yield Truncated(_decode(cut, self.source, number))


def _decode(data: bytes, source: str, number: int) -> str:
    if b"\x00" in data:
        raise InputError(
            f"{source}:{number}: binary data (NUL bytes) in the log", hint=_BINARY_HINT
        )
    return data.decode("utf-8", errors="replace")


def _refuse_binary(data: bytes, source: str) -> None:
    if b"\x00" in data[:_PEEK]:
        raise InputError(f"{source}: a binary file, not a text log", hint=_BINARY_HINT)


def open_log(path: str | Path) -> LogInput:
    """The log at ``path`` (``-``: stdin), gzip opened transparently. InputError for what cannot be read."""
    if str(path) == "-":
        raw: _Stream = sys.stdin.buffer if hasattr(sys.stdin, "buffer") else _TextAsBytes(sys.stdin)
        source = "<stdin>"
    else:
        p = Path(path)
        source = str(p)
        try:
            # the type checked before the open: a FIFO (which would hang) or a device is never opened;
            # the caller reads it to the end, and it is closed with the process
            raw = os.fdopen(open_regular(p), "rb")
        except RefusedFile as e:
            hint = (
                "give the log file itself"
                if p.is_dir()
                else "give the log file itself, or - for stdin"
            )
            raise InputError(f"{safe_value(source)}: {e.problem}", hint=hint) from None
        except FileNotFoundError:
            raise InputError(f"{safe_value(source)}: no such file", hint="check the path") from None
        except PermissionError:
            raise InputError(
                f"{safe_value(source)}: permission denied", hint="check the file's permissions"
            ) from None
        except OSError as e:
            raise InputError(
                f"{safe_value(source)}: cannot read: {e.strerror}", hint="check the file"
            ) from None
    try:
        magic = raw.read(2)
        if magic == b"\x1f\x8b":
            raw = gzip.GzipFile(fileobj=_Prepend(magic, raw), mode="rb")  # type: ignore[call-overload]  # typeshed wants seek(): GzipFile only seeks to rewind, never done here
            counted = _Counted(raw, source, MAX_BYTES)
            head = counted.read(_PEEK)
        else:
            counted = _Counted(raw, source, MAX_BYTES)
            counted._add(len(magic))
            head = magic + counted.read(_PEEK - len(magic))
    except (OSError, EOFError, zlib.error) as e:
        raise InputError(f"{source}: a damaged gzip file ({e})", hint="check the file") from None
    _refuse_binary(head, source)
    if head.lstrip() == b"":
        rest = counted.readline(MAX_LINE) if len(head) == _PEEK else b""
        if not rest.strip():
            raise InputError(
                f"{source}: empty",
                hint="give the output of an nccl-tests *_perf or perftest ib_* run",
            )
        head += rest
    return LogInput(source, head, _GzipGuard(counted, source))


class _GzipGuard:
    """Turns a damaged gzip stream met while reading into an InputError."""

    def __init__(self, inner: _Counted, source: str) -> None:
        self.inner, self.source = inner, source

    def read(self, n: int) -> bytes:
        try:
            return self.inner.read(n)
        except (OSError, EOFError, zlib.error) as e:
            raise InputError(
                f"{self.source}: a damaged gzip file ({e})", hint="check the file"
            ) from None

    def readline(self, n: int) -> bytes:
        try:
            return self.inner.readline(n)
        except (OSError, EOFError, zlib.error) as e:
            raise InputError(
                f"{self.source}: a damaged gzip file ({e})", hint="check the file"
            ) from None


class _Prepend:
    """A binary stream with ``first`` put back in front (the bytes read to see the gzip magic)."""

    def __init__(self, first: bytes, raw: _Stream) -> None:
        self.first, self.raw = first, raw

    def read(self, n: int = -1) -> bytes:
        if self.first:
            head, self.first = self.first, b""
            if n is None or n < 0:
                return head + self.raw.read()
            return head + self.raw.read(max(0, n - len(head)))
        return self.raw.read(n)


class _TextAsBytes:
    """stdin without a binary buffer (a test's StringIO): its text as UTF-8 bytes."""

    def __init__(self, text: IO[str]) -> None:
        self.text = text

    def read(self, n: int = -1) -> bytes:
        return self.text.read(n).encode()

    def readline(self, n: int = -1) -> bytes:
        return self.text.readline(n).encode()

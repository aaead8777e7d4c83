"""Reading a file the user named, as untrusted: only a regular file, never more than a budget.

Every input file (a JSON document, a plan, an environment file, a host map, a rank order, a saved
fabric, a token, a benchmark log) comes through :func:`open_regular`: its type is checked by ``stat``
before it is opened — a device or FIFO is never opened (opening /dev/watchdog arms it) — and again
by ``fstat`` after; the open is non-blocking and never makes a terminal the controlling one.
:func:`read_regular` reads a whole file within a byte budget, :func:`iter_lines` its lines in chunks;
:func:`read_text_file` adds the user-facing error (exit 2, with a hint) and the decoding.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator

from ibdiag.errors import InputError, UsageError
from ibdiag.units import format_bytes

#: What a file that is not a regular one is, in words (also the output side's, ibdiag.outfile).
FILE_KINDS = {
    stat.S_IFDIR: "a directory",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
}
_OPEN_FILE = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class RefusedFile(ValueError):
    """The file is not a regular one, or larger than allowed; ``problem`` says which, in words."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem


def _not_regular(st: os.stat_result) -> RefusedFile | None:
    if stat.S_ISREG(st.st_mode):
        return None
    if stat.S_ISLNK(st.st_mode):
        return RefusedFile("a symbolic link, not a regular file")
    kind = FILE_KINDS.get(stat.S_IFMT(st.st_mode), "not a file")
    return RefusedFile(f"{kind}, not a regular file")


def open_regular(path: str | os.PathLike[str], *, follow_links: bool = True) -> int:
    """A descriptor open for reading on ``path`` (links followed) if it is a regular file: its type
    is checked by ``stat`` before the open (a FIFO or device is never opened) and by ``fstat`` after,
    and the open is non-blocking and never makes a terminal the controlling one. The caller closes
    it and bounds what it reads. ``follow_links=False``: a link is refused unopened (``lstat``, then
    ``O_NOFOLLOW``), as for the files inside a directory ibdiag was handed. Raises
    :class:`RefusedFile` (what it is) or OSError."""
    problem = _not_regular(os.stat(path) if follow_links else os.lstat(path))
    if problem is not None:
        raise problem
    fd = os.open(path, _OPEN_FILE if follow_links else _OPEN_FILE | os.O_NOFOLLOW)
    try:
        problem = _not_regular(os.fstat(fd))
    except BaseException:
        os.close(fd)
        raise
    if problem is not None:
        os.close(fd)
        raise problem
    return fd


def read_regular(
    path: str | os.PathLike[str], max_bytes: int, *, follow_links: bool = True
) -> bytes:
    """The bytes of the file ``path`` (links followed unless ``follow_links`` is False) if it is a
    regular file of at most ``max_bytes``. Raises :class:`RefusedFile` (what it is, or too long) or
    OSError."""
    fd = open_regular(path, follow_links=follow_links)
    try:
        size = os.fstat(fd).st_size
        if size > max_bytes:
            raise RefusedFile(f"{size} bytes, more than the {max_bytes} allowed")
        chunks: list[bytes] = []
        total = 0
        while True:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - total))
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            total += len(chunk)
            if total > max_bytes:
                raise RefusedFile(f"more than the {max_bytes} bytes allowed")
    finally:
        os.close(fd)


def iter_lines(
    path: str | os.PathLike[str], max_bytes: int, max_line: int
) -> Iterator[bytes | None]:
    """The lines of the regular file ``path`` (without their newline), read in chunks so a large log
    costs one chunk of memory; a line longer than ``max_line`` bytes is skipped and given as None (the
    caller counts it). The same checks as :func:`read_regular`: :class:`RefusedFile` when the file
    is not a regular one or grows past ``max_bytes``, OSError when it cannot be read."""
    fd = open_regular(path)
    try:
        total = 0
        pending = b""
        too_long = False
        while True:
            chunk = os.read(fd, 1 << 20)
            total += len(chunk)
            if total > max_bytes:
                raise RefusedFile(f"more than the {max_bytes} bytes allowed")
            if not chunk:
                if pending and not too_long:
                    yield pending
                elif too_long:
                    yield None
                return
            *lines, rest = (pending + chunk).split(b"\n")
            for line in lines:
                if too_long or len(line) > max_line:
                    yield None
                else:
                    yield line
                too_long = False
            too_long = too_long or len(rest) > max_line
            pending = b"" if too_long else rest
    finally:
        os.close(fd)


def read_text_file(
    path: str | os.PathLike[str],
    max_bytes: int,
    where: str,
    hint: str,
    *,
    utf8_only: bool = True,
    usage: bool = False,
) -> str:
    """The text of a small input file named by an option; ``where`` (e.g. ``--expect plan.csv``, already
    escaped) starts every error. An unreadable, special, oversized or (with ``utf8_only``) non-UTF-8 file
    is InputError, or UsageError with ``usage`` (the file is an option's value), with ``hint``."""
    error = UsageError if usage else InputError
    try:
        data = read_regular(path, max_bytes)
    except RefusedFile as e:
        if "allowed" in e.problem:
            raise error(f"{where}: larger than {format_bytes(max_bytes)}", hint=hint) from None
        raise error(f"{where}: {e.problem}", hint=hint) from None
    except OSError as e:
        raise error(f"{where}: cannot read: {e.strerror or e}", hint=hint) from None
    if not utf8_only:
        return data.decode("utf-8", errors="replace")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise error(f"{where}: not UTF-8 text", hint=hint) from None

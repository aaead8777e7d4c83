"""Open a snapshot archive without trusting it: every member is checked before anything is written.

A snapshot (``ibdiag snapshot``) only ever holds directories, regular files and relative symlinks
that stay inside ``sys/``, plus the manifest. :func:`extract_snapshot` refuses anything else, and
checks all members first — names, types, sizes, and every link target resolved against the
archive's own members (chains followed, never through the file system) — so nothing is written
for an archive it refuses. It then writes the members itself (directories, then files opened with
``O_EXCL|O_NOFOLLOW``, links last), so it does not depend on ``tarfile``'s extraction filters:
their PATH_MAX symlink bypass (CVE-2025-4517) cannot apply, and Python 3.11.0-3.11.3, which have
no ``filter=`` argument, work the same.

Resources are bounded while reading, after decompression: a gzip bomb stops at the size cap.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import tarfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from ibdiag.errors import InputError
from ibdiag.text import safe_excerpt, safe_value

#: Entries (files, directories, links) in one archive. A real node's snapshot has a few thousand.
MAX_ENTRIES = 100_000
#: Bytes of the whole tar stream after decompression (headers included). A real snapshot: a few MB.
MAX_UNCOMPRESSED_BYTES = 128 * 2**20
#: Bytes of one file: a sysfs attribute is at most a page (4 KiB); the manifest is a few KB.
MAX_FILE_BYTES = 2**20
#: Components of a member's path (``sys/devices/pci0000:00/...``): real sysfs paths have about 15.
MAX_DEPTH = 32
#: Characters of a member's path or a link's target, and bytes of one path component (NAME_MAX).
MAX_PATH_CHARS = 1024
MAX_COMPONENT_BYTES = 255
#: Links followed while resolving one target (the kernel's own limit, MAXSYMLINKS).
MAX_LINK_HOPS = 40
#: Most path components walked while resolving one archive's links, all links together (each link
#: is resolved once: a real snapshot's few thousand links take some tens of thousands).
MAX_LINK_STEPS = 1_000_000

_HINT = "make one with `ibdiag snapshot FILE.tar.gz`"
_CHUNK = 65536


class _TooLarge(Exception):
    pass


class _CappedStream:
    """A decompressed stream that refuses to read or seek past ``limit`` bytes."""

    def __init__(self, inner: BinaryIO, limit: int) -> None:
        self.inner = inner
        self.limit = limit

    def tell(self) -> int:
        return self.inner.tell()

    def read(self, size: int | None = -1) -> bytes:
        room = self.limit + 1 - self.inner.tell()
        want = room if size is None or size < 0 else min(size, room)
        data = self.inner.read(max(want, 0))
        if self.inner.tell() > self.limit:
            raise _TooLarge
        return data

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        target = (
            offset
            if whence == os.SEEK_SET
            else self.inner.tell() + offset
            if whence == os.SEEK_CUR
            else None
        )
        if target is None:
            raise io.UnsupportedOperation("seek from the end of a compressed stream")
        if target > self.limit:
            raise _TooLarge
        return self.inner.seek(target)


def _decompressed(raw: BinaryIO) -> BinaryIO:
    """The tar stream inside ``raw``: gzip, bzip2, xz or plain, told by the magic bytes."""
    magic = raw.read(6)
    raw.seek(0)
    if magic.startswith(b"\x1f\x8b"):
        return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]  # a BufferedIOBase, not typing.BinaryIO; read as one
    if magic.startswith(b"BZh"):
        return bz2.BZ2File(raw)  # type: ignore[return-value]  # a BufferedIOBase, not typing.BinaryIO; read as one
    if magic.startswith(b"\xfd7zXZ\x00"):
        return lzma.LZMAFile(raw)  # type: ignore[return-value]  # a BufferedIOBase, not typing.BinaryIO; read as one
    return raw


@dataclass(frozen=True)
class _Member:
    info: tarfile.TarInfo
    parts: tuple[str, ...]
    kind: str
    """``dir``, ``file`` or ``link``."""


_KINDS = {
    tarfile.DIRTYPE: "dir",
    tarfile.REGTYPE: "file",
    tarfile.AREGTYPE: "file",
    tarfile.SYMTYPE: "link",
}
_TYPE_NAMES = {
    tarfile.LNKTYPE: "a hard link",
    tarfile.CHRTYPE: "a character device",
    tarfile.BLKTYPE: "a block device",
    tarfile.FIFOTYPE: "a FIFO",
    tarfile.CONTTYPE: "a contiguous file",
    tarfile.GNUTYPE_SPARSE: "a sparse file",
}


class _Refused(Exception):
    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


def _check_path(text: str, what: str) -> tuple[str, ...]:
    """Components of a relative, clean path: no ``/`` at either end, no ``//``, ``.`` or ``..``."""
    if len(text) > MAX_PATH_CHARS:
        raise _Refused(f"{what} {safe_value(text)} is longer than {MAX_PATH_CHARS} characters")
    if not text.isprintable():
        raise _Refused(f"{what} {safe_value(text)} has control or non-UTF-8 characters")
    parts = tuple(text.split("/"))
    for part in parts:
        if part in ("", ".", ".."):
            raise _Refused(
                f"{what} {safe_value(text)} is not a plain relative path (no '/' at the start, no '..', '.' or '//')"
            )
        if len(part.encode("utf-8", "surrogateescape")) > MAX_COMPONENT_BYTES:
            raise _Refused(
                f"{what} {safe_value(text)} has a component longer than {MAX_COMPONENT_BYTES} bytes"
            )
    if len(parts) > MAX_DEPTH:
        raise _Refused(f"{what} {safe_value(text)} is deeper than {MAX_DEPTH} levels")
    return parts


def _member(info: tarfile.TarInfo, manifest: str) -> _Member:
    kind = _KINDS.get(info.type)
    name = info.name
    if kind is None:
        what = _TYPE_NAMES.get(info.type, f"of tar type '{safe_excerpt(info.type)}'")
        raise _Refused(
            f"entry {safe_value(name)} is {what}; a snapshot holds only directories, regular files and relative links"
        )
    parts = _check_path(name, "entry")
    if name == manifest:
        if kind != "file":
            raise _Refused(f"{manifest} is not a regular file")
    elif parts[0] != "sys":
        raise _NotSnapshot(name)
    if kind == "file" and info.size > MAX_FILE_BYTES:
        raise _Refused(
            f"entry {safe_value(name)} has {info.size} bytes, more than {MAX_FILE_BYTES} (a sysfs value is at most a page)"
        )
    if kind == "link":
        if len(parts) < 2:
            raise _Refused(f"link {safe_value(name)} is not inside sys/")
        if info.linkname.startswith("/"):
            raise _Refused(f"link {safe_value(name)} -> {safe_value(info.linkname)} is absolute")
        if (
            not info.linkname
            or len(info.linkname) > MAX_PATH_CHARS
            or not info.linkname.isprintable()
        ):
            raise _Refused(
                f"link {safe_value(name)} has a malformed target {safe_value(info.linkname)}"
            )
    return _Member(info, parts, kind)


class _NotSnapshot(Exception):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


class _Members:
    """The checked members of one archive, with link targets resolved against them."""

    def __init__(self) -> None:
        self.by_path: dict[tuple[str, ...], _Member] = {}
        self.implicit_dirs: set[tuple[str, ...]] = set()
        self.resolved: dict[tuple[str, ...], tuple[tuple[str, ...], int]] = {}
        """Each link member's resolution and its count of links, once found (a pass resolves it once)."""
        self.steps = 0

    def add(self, m: _Member) -> None:
        if m.parts in self.by_path:
            raise _Refused(f"entry {safe_value(m.info.name)} appears twice")
        self.by_path[m.parts] = m
        for i in range(1, len(m.parts)):
            self.implicit_dirs.add(m.parts[:i])

    def check_tree(self) -> None:
        """Every member's parents are directories (never a file or a link: nothing is written through a
        link), and every link resolves to a member inside ``sys/``."""
        for parent in self.implicit_dirs:
            m = self.by_path.get(parent)
            if m is not None and m.kind != "dir":
                raise _Refused(
                    f"entry {safe_value('/'.join(parent))} is a {m.kind} and also has entries below it"
                )
        for m in self.by_path.values():
            if m.kind == "link":
                self._link(m.parts, origin=m, active=frozenset())

    def _kind(self, parts: tuple[str, ...]) -> str | None:
        m = self.by_path.get(parts)
        if m is not None:
            return m.kind
        return "dir" if parts in self.implicit_dirs else None

    def _link(
        self, key: tuple[str, ...], *, origin: _Member, active: frozenset[tuple[str, ...]]
    ) -> tuple[tuple[str, ...], int]:
        """Where the link member ``key`` leads and how many links the kernel follows to get there
        (itself not counted): resolved once per pass, then remembered — links nested
        ``L_i -> L_{i-1}/../L_{i-1}/..`` cost one resolution each, not 3^i."""
        known = self.resolved.get(key)
        if known is not None:
            return known
        if key in active or len(active) >= MAX_LINK_HOPS:
            where = f"link {safe_value(origin.info.name)} -> {safe_value(origin.info.linkname)}"
            raise _Refused(f"{where} goes through more than {MAX_LINK_HOPS} links (a loop?)")
        found = self.resolve(
            key[:-1], self.by_path[key].info.linkname, origin=origin, active=active | {key}
        )
        self.resolved[key] = found
        return found

    def resolve(
        self,
        start: tuple[str, ...],
        target: str,
        *,
        origin: _Member,
        active: frozenset[tuple[str, ...]] = frozenset(),
    ) -> tuple[tuple[str, ...], int]:
        """Where ``target`` (relative to the directory ``start``) leads, following link members, and how
        many links that follows (as the kernel counts them: at most :data:`MAX_LINK_HOPS` in one
        lookup); it must stay inside sys/ at every step and end at a member. Every component walked
        in a pass counts against :data:`MAX_LINK_STEPS`."""
        where = f"link {safe_value(origin.info.name)} -> {safe_value(origin.info.linkname)}"
        parts = list(start)
        hops = 0
        comps = target.split("/")
        if len(comps) > 4 * MAX_DEPTH:
            raise _Refused(f"{where} has too many components")
        for comp in comps:
            self.steps += 1
            if self.steps > MAX_LINK_STEPS:
                raise _Refused(
                    f"resolving the archive's links takes more than {MAX_LINK_STEPS} steps ({where})"
                )
            if comp in ("", "."):
                continue
            if comp == "..":
                if len(parts) <= 1:
                    raise _Refused(f"{where} leads outside sys/")
                parts.pop()
                continue
            parts.append(comp)
            if len(parts) > MAX_DEPTH:
                raise _Refused(f"{where} leads deeper than {MAX_DEPTH} levels")
            key = tuple(parts)
            kind = self._kind(key)
            if kind == "link":
                inner, inner_hops = self._link(key, origin=origin, active=active)
                hops += 1 + inner_hops
                if hops > MAX_LINK_HOPS:
                    raise _Refused(
                        f"{where} goes through more than {MAX_LINK_HOPS} links (a loop?)"
                    )
                parts = list(inner)
            elif kind is None:
                raise _Refused(f"{where} points to nothing in the archive")
        if self._kind(tuple(parts)) is None:  # pragma: no cover - every step above was checked
            raise _Refused(f"{where} points to nothing in the archive")
        return tuple(parts), hops


def _scan(tar: tarfile.TarFile, manifest: str) -> _Members:
    members = _Members()
    count = 0
    while True:
        info = tar.next()
        if info is None:
            break
        count += 1
        if count > MAX_ENTRIES:
            raise _Refused(f"more than {MAX_ENTRIES} entries")
        members.add(_member(info, manifest))
    members.check_tree()
    return members


def _write_file(tar: tarfile.TarFile, m: _Member, path: Path) -> None:
    src = tar.extractfile(m.info)
    if src is None:  # pragma: no cover - regular members always have a reader
        raise _Refused(f"entry {safe_value(m.info.name)} has no data")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "wb") as out:
        left = m.info.size
        while left > 0:
            chunk = src.read(min(_CHUNK, left))
            if not chunk:
                raise tarfile.ReadError(f"unexpected end of data in {safe_value(m.info.name)}")
            out.write(chunk)
            left -= len(chunk)


def _extract(tar: tarfile.TarFile, members: _Members, dest: Path) -> None:
    ordered = sorted(members.by_path.values(), key=lambda m: m.info.offset)
    dirs = sorted(members.implicit_dirs | {m.parts for m in ordered if m.kind == "dir"}, key=len)
    for parts in dirs:
        os.mkdir(dest.joinpath(*parts), 0o755)
    for m in ordered:
        if m.kind == "file":
            _write_file(tar, m, dest.joinpath(*m.parts))
    for m in ordered:  # links last: nothing is ever written through one
        if m.kind == "link":
            os.symlink(m.info.linkname, dest.joinpath(*m.parts))


def extract_snapshot(archive: Path, dest: Path, *, manifest: str) -> None:
    """Check every member of ``archive``, then write them below the empty directory ``dest``.

    Raises :class:`InputError` (exit 2) naming the first member or limit that refuses the archive.
    """
    try:
        with open(archive, "rb") as raw, _decompressed(raw) as plain:
            stream: Any = _CappedStream(plain, MAX_UNCOMPRESSED_BYTES)
            with tarfile.open(fileobj=stream, mode="r:") as tar:
                members = _scan(tar, manifest)
                _extract(tar, members, dest)
    except _NotSnapshot as e:
        raise InputError(
            f"{archive}: not an ibdiag snapshot (unexpected entry {safe_value(e.name)})", hint=_HINT
        ) from None
    except _Refused as e:
        raise InputError(
            f"{archive}: cannot read snapshot: {e.what}",
            hint=f"{_HINT}; ibdiag refuses archives that could write outside their directory or exhaust the disk",
        ) from None
    except _TooLarge:
        raise InputError(
            f"{archive}: cannot read snapshot: more than {MAX_UNCOMPRESSED_BYTES // 2**20} MiB once decompressed",
            hint=f"a real snapshot is a few MB; {_HINT}",
        ) from None
    except (tarfile.TarError, EOFError, OSError, lzma.LZMAError, zlib.error, ValueError) as e:
        raise InputError(
            f"{archive}: cannot read snapshot: {safe_excerpt(e, 200)}", hint=_HINT
        ) from None

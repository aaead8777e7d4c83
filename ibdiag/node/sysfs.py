"""``SysfsRoot``: the only code that opens files under ``/sys`` (and the one procfs file topo needs,
``/proc/sys/kernel/osrelease``: :meth:`SysfsRoot.read_proc`).

Every reader takes a root (``/`` on a live node, a snapshot or fixture directory otherwise) and reads
``ROOT/sys/...`` through this class, so the code path for a fixture is the code path for ``/sys``.
Broken values never raise: a missing attribute, an empty file, a read that fails with EINVAL/EIO
(``/sys/class/net/lo/speed`` does that on every Linux box) or text a parser rejects all come back as
``None``, and all but the plainly missing ones are recorded in :attr:`SysfsRoot.problems` so the
caller can turn the ones that matter into findings.

A tree under ``--root`` is untrusted. Every file and directory is opened non-blocking and checked
*after* opening — by the path the kernel actually resolved (``/proc/self/fd``), so a link swapped in
between cannot fool the check — before a byte is read: it must lie inside ``ROOT/sys`` (the kernel's
own relative links such as ``../../devices/...`` do) and be a regular file or a directory. Anything
else (``fw_ver -> /etc/shadow``, a FIFO, a socket, a device node) is recorded as ``refused`` and never
read. A value with control characters, or more than :data:`MAX_VALUE_BYTES`, is ``malformed``.
"""

from __future__ import annotations

import fnmatch
import os
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from ibdiag.errors import InputError
from ibdiag.text import safe_excerpt, safe_value

T = TypeVar("T")

#: Bytes of one attribute: sysfs values fit one page (4 KiB, 64 KiB on some arm64/ppc64 kernels).
MAX_VALUE_BYTES = 65536

_OPEN_FILE = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
_OPEN_DIR = _OPEN_FILE | os.O_DIRECTORY
_KIND_NAMES = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
}


class Refused(Exception):
    """A path that is not a regular file or directory inside the allowed directory; never read."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


def _kind_name(mode: int) -> str:
    return _KIND_NAMES.get(stat.S_IFMT(mode), "not a regular file")


def _inside(real: str, base: str) -> bool:
    return real == base or real.startswith(base + os.sep) or base == os.sep


def _opened_path(fd: int, path: str) -> str:
    """Where the kernel resolved ``fd`` to; without /proc, where ``path`` resolves now."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return os.path.realpath(path)


_O_PATH = getattr(
    os, "O_PATH", 0
)  # Linux: a descriptor that only names the file, never opens it for I/O


def realpath(path: str | os.PathLike[str]) -> str:
    """``os.path.realpath(path)``, asked of the kernel where it can: one ``open(O_PATH)`` and one
    readlink of ``/proc/self/fd`` instead of an lstat (and a readlink) per path component. The same
    answer for a path that exists; O_PATH opens nothing for reading, so a FIFO or device is not
    touched. Anything else (a dangling link, a loop, a name too long, no O_PATH or /proc) is left to
    ``os.path.realpath``."""
    if _O_PATH:
        try:
            fd = os.open(path, _O_PATH | os.O_CLOEXEC)
        except OSError:
            return os.path.realpath(path)
        try:
            return os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            pass
        finally:
            os.close(fd)
    return os.path.realpath(path)


def open_inside(path: str | os.PathLike[str], base: str, *, directory: bool = False) -> int:
    """Open ``path`` read-only and non-blocking, and return the descriptor if it is a regular file
    (``directory``: a directory) that resolves inside the real directory ``base``.

    Raises :class:`Refused` (never opened, or closed unread) or ``OSError`` (``FileNotFoundError`` when
    it does not exist). A FIFO, socket or device is refused from ``stat`` before it is opened.
    """
    path = os.fspath(path)
    st = os.stat(path)
    want_dir = stat.S_ISDIR(st.st_mode)
    if not want_dir and not stat.S_ISREG(st.st_mode):
        raise Refused(f"{_kind_name(st.st_mode)}, not a regular file")
    if directory and not want_dir:
        raise NotADirectoryError(20, os.strerror(20))
    if not directory and want_dir:
        raise IsADirectoryError(21, os.strerror(21))
    fd = os.open(path, _OPEN_DIR if directory else _OPEN_FILE)
    try:
        st = os.fstat(fd)
        if not (stat.S_ISDIR(st.st_mode) if directory else stat.S_ISREG(st.st_mode)):
            raise Refused(f"{_kind_name(st.st_mode)}, not a regular file")
        real = _opened_path(fd, path)
        if not _inside(real, base):
            target = os.readlink(path) if os.path.islink(path) else real
            raise Refused(f"resolves outside {base} (-> {safe_value(target)})")
    except BaseException:
        os.close(fd)
        raise
    return fd


def _read_capped(fd: int, limit: int) -> bytes:
    """Read until end of file or until more than ``limit`` bytes came (then ``limit + 1`` of them)."""
    data = b""
    while len(data) <= limit:
        want = limit + 1 - len(data)
        chunk = os.read(fd, want)
        data += chunk
        # sysfs hands over a whole value in one read, and a regular file gives less than asked only
        # at its end: a short read is the end (no second read that returns nothing).
        if len(chunk) < want:
            break
    return data


def read_inside(path: str | os.PathLike[str], base: str, *, limit: int) -> bytes:
    """The bytes of the regular file ``path`` inside ``base`` (see :func:`open_inside`); more than
    ``limit`` bytes is :class:`Refused`."""
    fd = open_inside(path, base)
    try:
        data = _read_capped(fd, limit)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise Refused(f"more than {limit} bytes")
    return data


@dataclass(frozen=True)
class ReadProblem:
    path: str
    """Path under the sysfs root, e.g. ``class/infiniband/mlx5_0/ports/1/rate``; relative to it for a
    file beside sys/ (``../proc/sys/kernel/osrelease``, ``../ibdiag-snapshot.json``): :attr:`shown`."""
    kind: str
    """``unreadable`` (the read failed), ``empty``, ``malformed`` (not text the kernel prints, or a
    parser rejected it) or ``refused`` (outside the root, or not a regular file: never read)."""
    detail: str

    @property
    def shown(self) -> str:
        """The path as a person knows it: ``/sys/class/...``; ``/proc/sys/kernel/osrelease`` for one
        recorded as ``../proc/...`` (:meth:`SysfsRoot.read_proc`); a snapshot's ``ibdiag-snapshot.json``."""
        if self.path.startswith("../proc/"):
            return self.path[2:]
        return self.path[3:] if self.path.startswith("../") else f"/sys/{self.path}"


class SkippedPath(LookupError):
    """A path of a skipped adapter reached a method that has no "absent" answer: a bug, never a read."""


class SysfsRoot:
    """Reads ``<root>/sys``. Paths passed in are relative to ``sys/`` (``"class/infiniband"``)."""

    def __init__(
        self, root: str | os.PathLike[str] = "/", *, skip_adapters: Sequence[str] = ()
    ) -> None:
        """``skip_adapters``: adapter name patterns (``[ports] skip``) whose ``class/infiniband/NAME``
        is never listed, opened or followed: a restricted function whose reads flood the kernel log."""
        self.skip_adapters = tuple(skip_adapters)
        self.root = Path(root)
        self.sys = self.root / "sys"
        self._sys_str = str(self.sys)
        self.problems: list[ReadProblem] = []
        self._real_sys: str | None = None

    def check(self) -> SysfsRoot:
        """Raise :class:`InputError` unless ``<root>/sys`` is a directory inside ``<root>``."""
        if not self.sys.is_dir():
            raise InputError(
                f"{self.root}: no sys/ directory to read",
                hint="--root takes the directory that contains sys/ (an extracted snapshot), or a snapshot .tar.gz",
            )
        real_root = realpath(self.root)
        if not _inside(self.base, real_root) or self.base == real_root:
            raise InputError(
                f"{self.sys} is a link to {safe_value(self.base)}, outside {self.root}",
                hint="--root reads only what is inside the tree: give the directory that really contains sys/",
            )
        return self

    def __repr__(self) -> str:
        return f"SysfsRoot({str(self.root)!r})"

    @property
    def base(self) -> str:
        """The real path of ``<root>/sys``: every read must resolve inside it."""
        if self._real_sys is None:
            self._real_sys = realpath(self.sys)
        return self._real_sys

    # --- paths -----------------------------------------------------------------------------------

    def path(self, rel: str) -> Path:
        return Path(self._p(rel))

    def skipped(self, rel: str) -> bool:
        """``rel`` is a skipped adapter or below it (``class/infiniband/mlx5_4/ports/1/...``)."""
        if not self.skip_adapters:
            return False
        parts = rel.lstrip("/").removeprefix("sys/").split("/")
        return (
            len(parts) >= 3
            and parts[:2] == ["class", "infiniband"]
            and any(fnmatch.fnmatchcase(parts[2], pat) for pat in self.skip_adapters)
        )

    def _p(self, rel: str) -> str:
        if self.skipped(
            rel
        ):  # every path method goes through here: a skipped device is never touched
            raise SkippedPath(rel)
        rel = rel.lstrip("/")
        if rel.startswith("sys/"):
            rel = rel[4:]
        return f"{self._sys_str}/{rel}" if rel else self._sys_str

    def exists(self, rel: str) -> bool:
        return not self.skipped(rel) and os.path.lexists(self._p(rel))

    def is_dir(self, rel: str) -> bool:
        """A directory inside the root (one reached through a link out of the root is ``refused``)."""
        fd = self._open(rel, directory=True, quiet_kinds=(NotADirectoryError,))
        if fd is None:
            return False
        os.close(fd)
        return True

    def listdir(self, rel: str) -> list[str]:
        """Sorted entries of a directory; ``[]`` when it is missing, unreadable or refused."""
        fd = self._open(rel, directory=True)
        if fd is None:
            return []
        try:
            names = [n for n in os.listdir(fd) if not self.skipped(f"{rel.rstrip('/')}/{n}")]
        except OSError as e:
            self._problem(rel, "unreadable", e)
            return []
        finally:
            os.close(fd)
        # The kernel names its entries in printable ASCII-compatible text; a name with control
        # characters (or not UTF-8) would carry them into subjects and tables.
        bad = [n for n in names if not n.isprintable()]
        for name in bad:
            self._problem(
                rel,
                "malformed",
                f"entry {safe_value(name)} has control or non-UTF-8 characters; skipped",
            )
        return sorted(n for n in names if n.isprintable())

    def skipped_adapters(self) -> list[str]:
        """Adapters under ``class/infiniband`` that :attr:`skip_adapters` leaves out: named by listing the
        directory (with no skip), nothing of theirs opened."""
        names = SysfsRoot(self.root).listdir("class/infiniband") if self.skip_adapters else []
        return [n for n in names if self.skipped(f"class/infiniband/{n}")]

    def leads_outside(self, rel: str) -> bool:
        """True (and a ``refused`` problem recorded) when ``rel`` resolves outside ``<root>/sys``."""
        return self._outside(rel, realpath(self._p(rel)))

    def _outside(self, rel: str, real: str) -> bool:
        if _inside(real, self.base):
            return False
        p = self._p(rel)
        self._problem(
            rel,
            "refused",
            f"link points outside {self.sys}: {safe_value(os.readlink(p) if os.path.islink(p) else real)}",
        )
        return True

    def resolve(self, rel: str) -> str | None:
        """Follow symlinks and return the target relative to ``sys/`` (``devices/pci0000:15/...``).

        ``None`` when the link is dangling or points outside the root (an absolute link copied from
        another machine): never silently read the host's ``/sys`` through a snapshot.
        """
        if self.skipped(rel):
            return None
        p = self._p(rel)
        if not os.path.lexists(p):
            return None
        real = realpath(p)
        if self._outside(rel, real) or not os.path.exists(real):
            return None
        return os.path.relpath(real, self.base)

    # --- values ----------------------------------------------------------------------------------

    def _open(
        self, rel: str, *, directory: bool, quiet_kinds: tuple[type[OSError], ...] = ()
    ) -> int | None:
        if self.skipped(rel):
            return None
        try:
            return open_inside(self._p(rel), self.base, directory=directory)
        except FileNotFoundError:
            return None
        except Refused as e:
            self._problem(rel, "refused", f"{e.why}; not read")
        except quiet_kinds:
            pass
        except OSError as e:
            self._problem(rel, "unreadable", e)
        return None

    def read(self, rel: str) -> str | None:
        """The attribute's text without the trailing newline; ``None`` if missing, empty, unreadable,
        refused, or not text the kernel prints (control characters, not UTF-8, over 64 KiB)."""
        fd = self._open(rel, directory=False)
        if fd is None:
            return None
        return self._value(fd, rel)

    def read_bytes(self, rel: str, limit: int = 4096) -> bytes | None:
        """The raw bytes of a binary attribute (a PCI function's ``config``: 4096 bytes for root, 64 for
        others — drivers/pci/pci-sysfs.c ``pci_read_config``); at most ``limit`` bytes; None if missing,
        unreadable or refused (recorded as for :meth:`read`)."""
        fd = self._open(rel, directory=False)
        if fd is None:
            return None
        try:
            return _read_capped(fd, limit)[:limit]
        except OSError as e:
            self._problem(rel, "unreadable", e)
            return None
        finally:
            os.close(fd)

    def read_proc(self, rel: str) -> str | None:
        """``<root>/proc/<rel>`` (``sys/kernel/osrelease``) with every check of :meth:`read`, for the few
        facts the kernel keeps only in procfs. ``<root>/proc`` must be a directory inside the root (never
        a link to the host's ``/proc``) and the file must resolve inside it; a missing one is ``None``
        without a problem (a fixture or snapshot holds only sys/). Problems are recorded under
        ``../proc/<rel>``, the path relative to sys/."""
        rel = rel.strip("/")
        key = f"../proc/{rel}"
        real_root = os.path.realpath(self.root)
        proc = os.path.join(real_root, "proc")
        if not os.path.lexists(proc):
            return None
        base = os.path.realpath(proc)
        if not _inside(base, real_root) or base == real_root:
            self._problem(
                key,
                "refused",
                f"{self.root / 'proc'} leads outside {self.root} (-> {safe_value(base)}); not read",
            )
            return None
        try:
            fd = open_inside(os.path.join(proc, rel), base)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except Refused as e:
            self._problem(key, "refused", f"{e.why}; not read")
            return None
        except OSError as e:
            self._problem(key, "unreadable", e)
            return None
        return self._value(fd, key)

    def read_proc_as(self, rel: str, parser: Callable[[str], T]) -> T | None:
        """:meth:`read_proc` and parse; a parser's ``ValueError`` is recorded as ``malformed``."""
        text = self.read_proc(rel)
        if text is None:
            return None
        try:
            return parser(text)
        except ValueError as e:
            self._problem(f"../proc/{rel.strip('/')}", "malformed", str(e))
            return None

    def _value(self, fd: int, rel: str) -> str | None:
        """The checked text of the open file ``fd`` (closed here); problems recorded under ``rel``."""
        try:
            raw = _read_capped(fd, MAX_VALUE_BYTES)
        except OSError as e:
            # Reads the kernel fails on purpose (sources: the kernel's show functions):
            # EINVAL  no value now: net/core/net-sysfs.c speed_show (lo/speed on every box);
            #         drivers/infiniband/core/sysfs.c print_ndev (gid_attrs/ndevs of an IB GID), and its
            #         show_pma_counter when the PMA MAD fails (newer kernels return get_perf_mad()'s
            #         error where older ones printed "N/A (no PMA)"; ENOSYS without process_mad).
            # EIO     core/sysfs.c port_attr_show for an attribute without a show method, and hw_counters
            #         when the driver's get_hw_stats fails (mlx5: a failed firmware command,
            #         drivers/infiniband/hw/mlx5/counters.c).
            self._problem(rel, "unreadable", e)
            return None
        finally:
            os.close(fd)
        if len(raw) > MAX_VALUE_BYTES:
            self._problem(rel, "malformed", f"more than {MAX_VALUE_BYTES} bytes, not a sysfs value")
            return None
        try:
            text = raw.decode("utf-8").strip("\n").strip()
        except UnicodeDecodeError:
            self._problem(rel, "malformed", f"not UTF-8 text: '{safe_excerpt(raw)}'")
            return None
        if not text:
            self._problem(rel, "empty", "empty file")
            return None
        if not text.replace("\n", "").replace("\t", "").isprintable():
            self._problem(rel, "malformed", f"control characters in {safe_value(text)}")
            return None
        return text

    def read_as(self, rel: str, parser: Callable[[str], T]) -> T | None:
        """Read and parse; a parser's ``ValueError`` is recorded as ``malformed`` and gives ``None``."""
        text = self.read(rel)
        if text is None:
            return None
        try:
            return parser(text)
        except ValueError as e:
            self._problem(rel, "malformed", str(e))
            return None

    def record(self, rel: str, kind: str, detail: str) -> None:
        """Record a problem a reader found in a value it read (``malformed``: not what the kernel prints)."""
        self._problem(rel, kind, detail)

    def _problem(self, rel: str, kind: str, detail: object) -> None:
        if isinstance(detail, OSError):
            detail = os.strerror(detail.errno) if detail.errno else str(detail)
        self.problems.append(ReadProblem(rel.lstrip("/"), kind, str(detail)))

    def problems_under(self, prefix: str) -> list[ReadProblem]:
        return [p for p in self.problems if p.path.startswith(prefix)]

    # --- raw access for `ibdiag snapshot` ------------------------------------------------------------

    def readlink(self, rel: str) -> str | None:
        """The link text of a symlink (relative in real sysfs), or None if ``rel`` is not a link."""
        if self.skipped(rel):
            return None
        p = self.path(rel)
        try:
            return os.readlink(p)
        except OSError:
            return None

    def is_link(self, rel: str) -> bool:
        return not self.skipped(rel) and os.path.islink(self.path(rel))

    def walk_files(self, rel: str, *, max_depth: int = 6) -> list[str]:
        """Regular files below ``rel`` (not following symlinks), as paths relative to sys/; nothing when
        ``rel`` itself leads outside the root."""
        out: list[str] = []
        if not self.is_dir(rel):
            return out
        base = self.path(rel)
        base_depth = len(base.parts)
        for dirpath, dirnames, filenames in os.walk(base, followlinks=False):
            depth = len(Path(dirpath).parts) - base_depth
            if depth >= max_depth:
                dirnames[:] = []
            if (
                self.skip_adapters and Path(dirpath).name == "infiniband"
            ):  # devices/.../infiniband/NAME
                dirnames[:] = [
                    d
                    for d in dirnames
                    if not any(fnmatch.fnmatchcase(d, p) for p in self.skip_adapters)
                ]
            for name in filenames:
                full = Path(dirpath) / name
                # os.walk lists FIFOs and sockets as files too: read() refuses them and records why.
                if not full.is_symlink():
                    out.append(os.path.relpath(full, self.sys))
        return sorted(out)

"""``SysfsRoot``: the only code that opens files under ``/sys``.

Every reader takes a root (``/`` on a live node, a snapshot or fixture directory otherwise) and reads
``ROOT/sys/...`` through this class, so the code path for a fixture is the code path for ``/sys``.
Broken values never raise: a missing attribute, an empty file, a read that fails with EINVAL/EIO
(``/sys/class/net/lo/speed`` does that on every Linux box) or text a parser rejects all come back as
``None``, and all but the plainly missing ones are recorded in :attr:`SysfsRoot.problems` so the
caller can turn the ones that matter into findings.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from ibdiag.errors import InputError

T = TypeVar("T")


@dataclass(frozen=True)
class ReadProblem:
    path: str
    """Path under the sysfs root, e.g. ``class/infiniband/mlx5_0/ports/1/rate``."""
    kind: str
    """``unreadable`` (the read failed), ``empty`` or ``malformed`` (a parser rejected the text)."""
    detail: str


class SysfsRoot:
    """Reads ``<root>/sys``. Paths passed in are relative to ``sys/`` (``"class/infiniband"``)."""

    def __init__(self, root: str | os.PathLike[str] = "/") -> None:
        self.root = Path(root)
        self.sys = self.root / "sys"
        self.problems: list[ReadProblem] = []

    def check(self) -> SysfsRoot:
        """Raise :class:`InputError` unless ``<root>/sys`` is a directory."""
        if not self.sys.is_dir():
            raise InputError(
                f"{self.root}: no sys/ directory to read",
                hint="--root takes the directory that contains sys/ (an extracted snapshot), or a snapshot .tar.gz",
            )
        return self

    def __repr__(self) -> str:
        return f"SysfsRoot({str(self.root)!r})"

    # --- paths -----------------------------------------------------------------------------------

    def path(self, rel: str) -> Path:
        rel = rel.lstrip("/")
        if rel.startswith("sys/"):
            rel = rel[4:]
        return self.sys / rel

    def exists(self, rel: str) -> bool:
        return os.path.lexists(self.path(rel))

    def is_dir(self, rel: str) -> bool:
        return self.path(rel).is_dir()

    def listdir(self, rel: str) -> list[str]:
        """Sorted entries of a directory; ``[]`` when it is missing or unreadable."""
        try:
            return sorted(os.listdir(self.path(rel)))
        except FileNotFoundError:
            return []
        except OSError as e:
            self._problem(rel, "unreadable", e)
            return []

    def resolve(self, rel: str) -> str | None:
        """Follow symlinks and return the target relative to ``sys/`` (``devices/pci0000:15/...``).

        ``None`` when the link is dangling or points outside the root (an absolute link copied from
        another machine): never silently read the host's ``/sys`` through a snapshot.
        """
        p = self.path(rel)
        if not os.path.lexists(p):
            return None
        real = os.path.realpath(p)
        base = os.path.realpath(self.sys)
        if real != base and not real.startswith(base + os.sep):
            self._problem(rel, "unreadable", f"link points outside {self.sys}: {os.readlink(p) if os.path.islink(p) else real}")
            return None
        if not os.path.exists(real):
            return None
        return os.path.relpath(real, base)

    # --- values ----------------------------------------------------------------------------------

    def read(self, rel: str) -> str | None:
        """The attribute's text without the trailing newline; ``None`` if missing, empty or unreadable."""
        p = self.path(rel)
        try:
            with open(p, "rb") as fh:
                raw = fh.read(65536)
        except FileNotFoundError:
            return None
        except IsADirectoryError as e:
            self._problem(rel, "unreadable", e)
            return None
        except OSError as e:
            # EINVAL: attribute exists but has no value now (lo/speed, gid_attrs/ndevs of an IB GID).
            # EIO/EOPNOTSUPP: the driver refused (PMA counters on some firmware).
            self._problem(rel, "unreadable", e)
            return None
        text = raw.decode("utf-8", errors="replace").strip("\n").strip()
        if not text:
            self._problem(rel, "empty", "empty file")
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

    def _problem(self, rel: str, kind: str, detail: object) -> None:
        if isinstance(detail, OSError):
            detail = os.strerror(detail.errno) if detail.errno else str(detail)
        self.problems.append(ReadProblem(rel.lstrip("/"), kind, str(detail)))

    def problems_under(self, prefix: str) -> list[ReadProblem]:
        return [p for p in self.problems if p.path.startswith(prefix)]

    # --- raw access for `ibdiag snapshot` ------------------------------------------------------------

    def readlink(self, rel: str) -> str | None:
        """The link text of a symlink (relative in real sysfs), or None if ``rel`` is not a link."""
        p = self.path(rel)
        try:
            return os.readlink(p)
        except OSError:
            return None

    def is_link(self, rel: str) -> bool:
        return os.path.islink(self.path(rel))

    def walk_files(self, rel: str, *, max_depth: int = 6) -> list[str]:
        """Regular files below ``rel`` (not following symlinks), as paths relative to sys/."""
        out: list[str] = []
        base = self.path(rel)
        base_depth = len(base.parts)
        for dirpath, dirnames, filenames in os.walk(base, followlinks=False):
            depth = len(Path(dirpath).parts) - base_depth
            if depth >= max_depth:
                dirnames[:] = []
            for name in filenames:
                full = Path(dirpath) / name
                if not full.is_symlink():
                    out.append(os.path.relpath(full, self.sys))
        return sorted(out)

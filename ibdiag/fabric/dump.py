"""``ibdiag fabric --save DIR|FILE.tar.gz`` and the reading back of what it wrote (``--from``, ``--since``).

A dump is the tools' own text, unchanged, one ``<name>.out`` and ``<name>.err`` per run, plus
``capture.json`` (when, the command lines, exit statuses, tool versions). ``ibnetdiscover.out`` feeds
back into ibsim and into any tool that reads ibnetdiscover's format. A plain file is read as what it
holds (:mod:`.pastes`): ``ibnetdiscover`` output (the topology alone), or a paste of ``iblinkinfo``,
``ibqueryerrors``, ``perfquery`` or ``sminfo``.

Safety, as for snapshots: writing, a directory is created new (or must be empty) and every file is
created with ``O_EXCL|O_NOFOLLOW``; an archive is written atomically (:mod:`ibdiag.outfile`). Reading,
only regular files of the known names are read (never through a link, never a device or FIFO), each
within :data:`MAX_FILE_BYTES`; an archive is read in memory, member by member, and any other member
refuses it (exit 2): nothing from it is ever written to disk.
"""

from __future__ import annotations

import io
import json
import os
import stat
import tarfile
import time
from pathlib import Path

from ibdiag.errors import InputError, UsageError
from ibdiag.fabric import pastes
from ibdiag.fabric.capture import NAME_RE, Capture, ToolRun, read_meta
from ibdiag.fabric.toolerr import MAX_LINES_PER_TOOL
from ibdiag.infile import RefusedFile, open_regular
from ibdiag.jsonread import JsonFieldError, loads
from ibdiag.outfile import atomic_output, check_output_path
from ibdiag.text import safe_path, safe_value
from ibdiag.units import format_bytes

MAX_FILE_BYTES = 256 * 2**20
#: All the files of one dump together, as read (a 16,384-GPU fabric's dump holds some 50 MiB).
MAX_DUMP_BYTES = 512 * 2**20
#: ``capture.json`` (64 runs of a few hundred bytes each), parsed 8 levels deep at most.
MAX_META_BYTES = 2**20
#: Lines of one tool's output: ibroute's (``--routes``) 4,000,000 forwarding entries with room;
#: a 16,384-GPU fabric's ibnetdiscover output has 204,000.
MAX_OUT_LINES = 8_000_000
#: Lines of one tool's stderr, each classified (:mod:`.toolerr`).
MAX_ERR_LINES = MAX_LINES_PER_TOOL
MAX_MEMBERS = 64
#: What ``str.splitlines`` ends a line at.
_BREAKS = ("\n", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029")
#: Every byte that is not an ASCII line break (``bytes.translate`` deletes them).
_NOT_ASCII_BREAKS = bytes(b for b in range(128) if chr(b) not in _BREAKS) + bytes(range(128, 256))
META = "capture.json"
HINT = "give a directory or .tar.gz written by `ibdiag fabric --save`, or a file of `ibnetdiscover` output"


def _files(cap: Capture) -> dict[str, bytes]:
    out = {META: (json.dumps(cap.meta(), indent=2) + "\n").encode()}
    for r in cap.runs:
        out[f"{r.name}.out"] = r.stdout.encode()
        out[f"{r.name}.err"] = r.stderr.encode()
    return out


def is_archive(path: Path) -> bool:
    return path.name.endswith((".tar.gz", ".tgz"))


def save(cap: Capture, path: Path) -> None:
    files = _files(cap)
    if is_archive(path):
        check_output_path(path, "--save")
        now = time.time()
        with (
            atomic_output(path, "--save") as raw,
            tarfile.open(fileobj=raw, mode="w:gz", format=tarfile.PAX_FORMAT) as tar,
        ):
            for name, data in sorted(files.items()):
                info = tarfile.TarInfo(name)
                info.size, info.mode, info.mtime = len(data), 0o444, now
                tar.addfile(info, io.BytesIO(data))
        return
    try:
        os.mkdir(path, 0o755)
    except FileExistsError:
        st = os.lstat(path)
        if not stat.S_ISDIR(st.st_mode) or os.listdir(path):
            raise UsageError(
                f"--save {safe_path(path)}: exists and is not an empty directory",
                hint="name a new directory, or a FILE.tar.gz",
            ) from None
    except OSError as e:
        raise UsageError(
            f"--save {safe_path(path)}: {e.strerror}",
            hint="name a new directory in a writable place",
        ) from None
    for name, data in files.items():
        fd = os.open(path / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(data)


def load(path: Path) -> Capture:
    budget = Budget(str(path))
    try:
        st = os.stat(path)
    except OSError as e:
        raise InputError(f"{budget.source}: {e.strerror}", hint=HINT) from None
    if stat.S_ISDIR(st.st_mode):
        files = _read_dir(path, budget)
    elif not stat.S_ISREG(st.st_mode):
        raise InputError(f"{budget.source} is not a file or directory", hint=HINT)
    elif is_archive(path):
        files = _read_archive(path, budget)
    else:
        # A file of one tool's output, or several pasted together (pastes.py tells them apart).
        text = _read_file(path, budget, None, follow_links=True)
        budget.lines(None, text, MAX_OUT_LINES)
        return pastes.capture(str(path), text)
    return _capture(budget, files)


class Budget:
    """What one dump may cost, counted as it is read: :data:`MAX_DUMP_BYTES` for all its files
    together, :data:`MAX_FILE_BYTES` each (:data:`MAX_META_BYTES` for ``capture.json``), and the
    lines of each (:meth:`lines`). Past any of them the dump is refused (exit 2), naming the file."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.source = safe_path(path)
        """The path as messages show it."""
        self.left = MAX_DUMP_BYTES

    def _what(self, name: str | None) -> str:
        return self.source if name is None else f"{self.source}: {safe_value(name)}"

    def take(self, name: str | None, size: int) -> None:
        """Make room for ``size`` bytes of the dump's file ``name`` (None: the file named is the
        whole dump) before they are read."""
        limit = MAX_META_BYTES if name == META else MAX_FILE_BYTES
        if size > limit:
            raise InputError(f"{self._what(name)} is larger than {format_bytes(limit)}", hint=HINT)
        if size > self.left:
            raise InputError(
                f"{self.source}: more than {format_bytes(MAX_DUMP_BYTES)} in all (at {safe_value(name)})",
                hint=f"{HINT}; a dump of a 16,384-GPU fabric holds some 50 MiB",
            )
        self.left -= size

    def take_all(self, sizes: dict[str, int]) -> None:
        """:meth:`take` for each file, smallest first: the one named is the one that tips it over."""
        for name, size in sorted(sizes.items(), key=lambda kv: kv[1]):
            self.take(name, size)

    def lines(self, name: str | None, text: str, limit: int) -> None:
        """Refuse ``text`` when it has more than ``limit`` lines (as ``splitlines`` counts them),
        counted in C before any line is made."""
        if text.isascii():  # its breaks kept, in one pass a few MiB at a time (no copy of it all)
            step = 1 << 22
            breaks = sum(
                len(text[i : i + step].encode("ascii").translate(None, _NOT_ASCII_BREAKS))
                for i in range(0, len(text), step)
            )
        else:
            breaks = sum(text.count(c) for c in _BREAKS)
        count = breaks - text.count("\r\n")
        if count > limit:
            raise InputError(
                f"{self._what(name)} has more than {limit:,} lines",
                hint=f"{HINT}; no tool writes that many lines about a real fabric",
            )


def _read_file(path: Path, budget: Budget, name: str | None, *, follow_links: bool = False) -> str:
    """The dump's file ``name`` at ``path`` (never through a link), or the file named (``name`` None,
    links followed), within the budget: its type checked before it is opened (a FIFO or device is
    never opened), its size before it is read."""
    try:
        fd = open_regular(path, follow_links=follow_links)
    except RefusedFile as e:
        raise InputError(f"{safe_path(path)}: {e.problem}", hint=HINT) from None
    except OSError as e:
        raise InputError(f"{safe_path(path)}: {e.strerror or e}", hint=HINT) from None
    with os.fdopen(fd, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        budget.take(name, size)
        data = f.read(size + 1)
    if len(data) > size:
        raise InputError(f"{safe_path(path)}: grew while it was read", hint=HINT)
    return data.decode("utf-8", errors="replace")


def _read_dir(path: Path, budget: Budget) -> dict[str, str]:
    names = [
        name
        for name in os.listdir(path)[: MAX_MEMBERS * 4]
        if name == META
        or (name.endswith((".out", ".err")) and NAME_RE.match(name.rsplit(".", 1)[0]))
    ]
    # The sizes first (lstat: a link counts as itself), so a dump too large in all is refused
    # before anything is read; each file is counted again as it is read.
    try:
        sizes = {name: os.lstat(path / name).st_size for name in names}
    except OSError as e:
        raise InputError(f"{budget.source}: {e.strerror or e}", hint=HINT) from None
    Budget(budget.path).take_all(sizes)
    return {name: _read_file(path / name, budget, name) for name in names}


def _read_archive(path: Path, budget: Budget) -> dict[str, str]:
    files: dict[str, str] = {}
    try:
        fd = open_regular(path)
    except (RefusedFile, OSError) as e:
        why = e.problem if isinstance(e, RefusedFile) else e.strerror or str(e)
        raise InputError(f"{budget.source}: {why}", hint=HINT) from None
    try:
        with os.fdopen(fd, "rb") as raw, tarfile.open(fileobj=raw, mode="r:gz") as tar:
            for i, info in enumerate(tar):
                stem = info.name.rsplit(".", 1)[0]
                known = info.name == META or (
                    info.name.endswith((".out", ".err")) and NAME_RE.match(stem)
                )
                if i >= MAX_MEMBERS or not info.isreg() or not known:
                    raise InputError(
                        f"{budget.source}: not an ibdiag fabric dump (entry {safe_value(info.name)})",
                        hint=HINT,
                    )
                if info.name in files:
                    raise InputError(
                        f"{budget.source}: {safe_value(info.name)} is in the archive twice",
                        hint=f"{HINT}; which copy is the dump's cannot be told",
                    )
                budget.take(info.name, info.size)
                f = tar.extractfile(info)
                assert f is not None
                files[info.name] = f.read(info.size).decode("utf-8", errors="replace")
    except (tarfile.TarError, EOFError, OSError) as e:
        raise InputError(f"{budget.source}: unreadable archive ({e})", hint=HINT) from None
    return files


def _capture(budget: Budget, files: dict[str, str]) -> Capture:
    source = budget.source
    if META not in files:
        raise InputError(f"{source}: no {META}", hint=HINT)
    for name, text in files.items():
        budget.lines(name, text, MAX_ERR_LINES if name.endswith(".err") else MAX_OUT_LINES)
    try:
        doc = loads(files[META], max_depth=8)
    except JsonFieldError as e:
        raise InputError(f"{source}: {META}: {e.problem}", hint=HINT) from None
    taken, runs, versions = read_meta(doc, source)
    source = budget.path
    out = []
    for r in runs:
        out.append(
            ToolRun(
                r["name"],
                r["command"],
                files.get(f"{r['name']}.out", ""),
                files.get(f"{r['name']}.err", ""),
                r["rc"],
                r["elapsed_s"],
                r["taken_at_s"],
            )
        )
    return Capture(source, tuple(out), taken, versions)

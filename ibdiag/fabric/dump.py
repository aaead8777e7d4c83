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
from ibdiag.outfile import atomic_output, check_output_path
from ibdiag.text import safe_value

MAX_FILE_BYTES = 256 * 2**20
MAX_MEMBERS = 64
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
                f"--save {safe_value(str(path))}: exists and is not an empty directory",
                hint="name a new directory, or a FILE.tar.gz",
            ) from None
    except OSError as e:
        raise UsageError(
            f"--save {safe_value(str(path))}: {e.strerror}",
            hint="name a new directory in a writable place",
        ) from None
    for name, data in files.items():
        fd = os.open(path / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(data)


def load(path: Path) -> Capture:
    try:
        st = os.stat(path)
    except OSError as e:
        raise InputError(f"{safe_value(str(path))}: {e.strerror}", hint=HINT) from None
    if stat.S_ISDIR(st.st_mode):
        files = _read_dir(path)
    elif not stat.S_ISREG(st.st_mode):
        raise InputError(f"{safe_value(str(path))} is not a file or directory", hint=HINT)
    elif is_archive(path):
        files = _read_archive(path)
    else:
        # A file of one tool's output, or several pasted together (pastes.py tells them apart).
        return pastes.capture(str(path), _read_file(path))
    return _capture(str(path), files)


def _read_file(path: Path) -> str:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as e:
        raise InputError(f"{safe_value(str(path))}: {e.strerror}", hint=HINT) from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise InputError(f"{safe_value(str(path))} is not a regular file", hint=HINT)
        data = f.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise InputError(
            f"{safe_value(str(path))} is larger than {MAX_FILE_BYTES // 2**20} MiB", hint=HINT
        )
    return data.decode("utf-8", errors="replace")


def _read_dir(path: Path) -> dict[str, str]:
    files: dict[str, str] = {}
    for name in os.listdir(path)[: MAX_MEMBERS * 4]:
        stem = name.rsplit(".", 1)[0]
        if name == META or (name.endswith((".out", ".err")) and NAME_RE.match(stem)):
            files[name] = _read_file(path / name)
    return files


def _read_archive(path: Path) -> dict[str, str]:
    files: dict[str, str] = {}
    try:
        with tarfile.open(path, mode="r:gz") as tar:
            for i, info in enumerate(tar):
                stem = info.name.rsplit(".", 1)[0]
                known = info.name == META or (
                    info.name.endswith((".out", ".err")) and NAME_RE.match(stem)
                )
                if i >= MAX_MEMBERS or not info.isreg() or not known or info.size > MAX_FILE_BYTES:
                    raise InputError(
                        f"{safe_value(str(path))}: not an ibdiag fabric dump (entry {safe_value(info.name)})",
                        hint=HINT,
                    )
                f = tar.extractfile(info)
                assert f is not None
                files[info.name] = f.read(MAX_FILE_BYTES).decode("utf-8", errors="replace")
    except (tarfile.TarError, EOFError, OSError) as e:
        raise InputError(f"{safe_value(str(path))}: unreadable archive ({e})", hint=HINT) from None
    return files


def _capture(source: str, files: dict[str, str]) -> Capture:
    if META not in files:
        raise InputError(f"{safe_value(source)}: no {META}", hint=HINT)
    try:
        doc = json.loads(files[META])
    except ValueError as e:
        raise InputError(f"{safe_value(source)}: {META} is not JSON ({e})", hint=HINT) from None
    taken, runs, versions = read_meta(doc, source)
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

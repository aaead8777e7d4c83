"""Where the kernel log comes from (``--kernel-log SOURCE``): ``kmsg``, ``journal``, ``auto`` or a file.

* ``kmsg``: ``/dev/kmsg`` opened non-blocking and read record by record until the kernel says there is
  no more (EAGAIN): only what is buffered, never waiting for new messages. Needs root (or
  CAP_SYSLOG) where ``kernel.dmesg_restrict`` is 1. Timestamps are converted to wall clock with this
  node's boot time (``/proc/uptime``).
* ``journal``: ``journalctl -k -o short-iso --no-pager -q --since @<window start>``, with a timeout.
* ``auto``: kmsg, else the journal; neither is a warning, not an error (the node's other checks stand).
* anything else is a file for offline use, in any shape :mod:`~ibdiag.history.kernlines` reads
  (``dmesg``, ``dmesg -T``, syslog or ``/var/log/messages``, ``journalctl -k`` in its short, ISO and
  JSON forms, kmsg text): a regular file (its type is checked before it is opened: a FIFO or a device
  is never opened), of which the last :data:`MAX_FILE_BYTES` are read. Its modification time is kept:
  the latest a yearless syslog line can be.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from ibdiag.errors import InputError
from ibdiag.text import safe_excerpt

KEYWORDS = ("kmsg", "journal", "auto")
#: Most of a file read (a kernel ring buffer is 128 KiB to a few MiB).
MAX_FILE_BYTES = 32 * 2**20
#: Most kmsg records read (log_buf_len=16M holds ~150k of them).
MAX_RECORDS = 500_000
JOURNAL_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class KernelText:
    """The kernel log's lines and where they came from."""

    source: str
    """``/dev/kmsg``, ``journalctl -k``, or the file's path."""
    lines: tuple[str, ...]
    boot_epoch_s: float | None = None
    """Wall clock at boot, to place kmsg/dmesg times (only for this node's own log)."""
    problem: str | None = None
    """Why nothing could be read (``auto`` found neither source)."""
    modified_s: float | None = None
    """A file's modification time (the latest its yearless lines can be); None for a live source."""
    live: bool = False
    """This node's log now (kmsg, the journal): judged up to now, not up to its last line."""


def _boot_epoch(proc_uptime: Path) -> float | None:
    try:
        return time.time() - float(proc_uptime.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def read_kmsg(
    path: Path = Path("/dev/kmsg"), proc_uptime: Path = Path("/proc/uptime")
) -> KernelText:
    """Every record buffered in ``path`` now (a kmsg device: one record per read)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    lines: list[str] = []
    try:
        while len(lines) < MAX_RECORDS:
            try:
                chunk = os.read(fd, 8192)
            except BlockingIOError:
                break  # EAGAIN: everything buffered has been read
            except OSError as e:
                if e.errno == errno.EPIPE:
                    continue  # records were overwritten while reading: go on with the next
                raise
            if not chunk:
                break
            lines.extend(chunk.decode("utf-8", "replace").splitlines())
    finally:
        os.close(fd)
    return KernelText("/dev/kmsg", tuple(lines), _boot_epoch(proc_uptime), live=True)


def read_journal(since_s: float | None, journalctl: str | None = None) -> KernelText:
    exe = journalctl or shutil.which("journalctl") or "/usr/bin/journalctl"
    cmd = [exe, "-k", "-o", "short-iso", "--no-pager", "-q"]
    if since_s is not None:
        cmd += ["--since", f"@{int(since_s)}"]
    proc = subprocess.run(cmd, capture_output=True, timeout=JOURNAL_TIMEOUT_S, check=False)
    if proc.returncode != 0:
        said = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        raise OSError(f"journalctl exited {proc.returncode}: {said[-1] if said else ''}")
    return KernelText(
        "journalctl -k", tuple(proc.stdout.decode("utf-8", "replace").splitlines()), live=True
    )


def read_file(path: Path) -> KernelText:
    try:
        if not stat.S_ISREG(
            os.stat(path).st_mode
        ):  # checked before the open: a FIFO is never opened
            raise InputError(
                f"--kernel-log {safe_excerpt(str(path), 200)}: not a regular file",
                hint="for this node's live log use --kernel-log kmsg (or journal, auto)",
            )
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as e:
        raise InputError(
            f"--kernel-log {safe_excerpt(str(path), 200)}: {e.strerror}",
            hint="give a saved dmesg or journalctl -k output, or kmsg/journal/auto",
        ) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InputError(
                f"--kernel-log {safe_excerpt(str(path), 200)}: not a regular file",
                hint="for this node's live log use --kernel-log kmsg (or journal, auto)",
            )
        if st.st_size > MAX_FILE_BYTES:
            os.lseek(fd, st.st_size - MAX_FILE_BYTES, os.SEEK_SET)
        data = os.read(fd, MAX_FILE_BYTES)
    finally:
        os.close(fd)
    lines = data.decode("utf-8", "replace").splitlines()
    if st.st_size > MAX_FILE_BYTES and lines:
        lines = lines[1:]  # the first line is cut
    return KernelText(str(path), tuple(lines), modified_s=st.st_mtime)


def read_kernel_log(source: str, *, since_s: float | None = None) -> KernelText:
    """The lines of ``source`` (see the module). Unreadable live sources under ``auto`` give a
    :class:`KernelText` with ``problem`` set; an explicit one that fails raises."""
    if source not in KEYWORDS:
        return read_file(Path(source))
    tried: list[str] = []
    if source in ("kmsg", "auto"):
        try:
            return read_kmsg()
        except OSError as e:
            tried.append(f"/dev/kmsg: {e.strerror or e}")
            if source == "kmsg":
                raise InputError(
                    f"--kernel-log kmsg: {tried[-1]}",
                    hint="run as root, or use --kernel-log journal",
                ) from None
    try:
        return read_journal(since_s)
    except (OSError, subprocess.TimeoutExpired) as e:
        tried.append(f"journalctl: {e}")
        if source == "journal":
            raise InputError(
                f"--kernel-log journal: {tried[-1]}",
                hint="is systemd-journald running? else use --kernel-log kmsg",
            ) from None
    return KernelText("auto", (), problem="; ".join(tried))

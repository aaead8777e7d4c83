"""Writing an output file the user named (``--save``, ``--png``, ``snapshot FILE``) without destroying
anything: only over a regular file or nothing, atomically, and never leaving a temporary file behind.

* :func:`check_output_path` refuses, before a long run, a directory, device node, FIFO or socket (as
  root ``--save /dev/null`` would otherwise replace /dev/null with a JSON file), a missing or read-only
  directory. A symlink is followed — its final target is what gets written, the link stays — but only
  where the kernel's ``fs.protected_symlinks`` would follow it (:func:`resolve_output`): in a sticky
  world-writable directory (/tmp, a shared drop directory) only a link owned by the directory's owner
  or by the user running ibdiag. Another user's link there is refused (exit 2), whatever the sysctl
  says: the path is resolved here, in user space, where the kernel's rule does not reach.
* :func:`atomic_output` writes ``.NAME.PID.tmp`` beside the final target, fsyncs it and renames it over
  the target, so a reader sees the old file or the new one, never half of one. The temporary file is
  removed on every way out: an error, Ctrl-C (KeyboardInterrupt), SIGTERM or SIGHUP (which are caught
  while writing and then re-raised with their default action, so the process still dies by them).
  Only SIGKILL can leave it behind.
"""

from __future__ import annotations

import os
import signal
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from ibdiag.errors import CannotRunError, UsageError
from ibdiag.infile import FILE_KINDS

#: Signals whose default action ends the process: caught while a temporary file exists.
_CLEANUP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


#: Most symlinks followed in one path, as the kernel's limit (ELOOP).
_MAX_HOPS = 40


def _followable(directory: Path, link: os.stat_result) -> bool:
    """fs.protected_symlinks: in a sticky world-writable directory a symlink is followed only when its
    owner is the directory's owner or the follower (the effective uid)."""
    try:
        d = os.stat(directory)
    except OSError:
        return False
    sticky_shared = d.st_mode & stat.S_ISVTX and d.st_mode & stat.S_IWOTH
    return not sticky_shared or link.st_uid in (d.st_uid, os.geteuid())


def resolve_output(path: Path, option: str) -> Path:
    """``path`` with every symlink in it resolved, component by component, each followed only where
    :func:`_followable` allows (else :class:`UsageError`, exit 2). A missing component ends the walk:
    the rest is joined as written (the directory check reports it)."""
    todo = list(reversed(Path(path).parts))
    current = Path.cwd() if not Path(path).is_absolute() else Path("/")
    hops = 0
    while todo:
        part = todo.pop()
        if part in ("", "."):
            continue
        if part == "..":
            current = current.parent
            continue
        candidate = current / part
        try:
            st = os.lstat(candidate)
        except OSError:
            return candidate.joinpath(*reversed(todo))
        if not stat.S_ISLNK(st.st_mode):
            current = candidate
            continue
        hops += 1
        if hops > _MAX_HOPS:
            raise UsageError(
                f"{option} {path}: more than {_MAX_HOPS} symlinks", hint="give the real path"
            )
        if not _followable(current, st):
            raise UsageError(
                f"{option} {path}: {candidate} is a symlink owned by uid {st.st_uid} in the sticky "
                "world-writable directory "
                f"{current}; ibdiag follows it only where fs.protected_symlinks would (a link owned "
                "by the directory's owner or by you)",
                hint="give the real path of the file, or write in a directory only you can write",
            )
        target = Path(os.readlink(candidate))
        if target.is_absolute():
            current = Path("/")
        todo.extend(reversed(target.parts))
    return current


def _target(path: Path, option: str) -> tuple[Path, os.stat_result | None]:
    """The file that will really be written (the final target of a symlink) and its stat, or None when
    it does not exist yet. Raises :class:`UsageError` for anything but a regular file or nothing."""
    shown = f"{option} {path}"
    real = resolve_output(path, option)  # a link on the way (a directory) obeys the same rule
    linked = os.path.islink(path)
    try:
        st = os.lstat(real)  # resolved: a link here appeared since, and is refused as not a file
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise UsageError(
            f"{shown}: cannot check the path: {e.strerror}", hint="give a path you can write"
        ) from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        kind = FILE_KINDS.get(stat.S_IFMT(st.st_mode), "not a regular file")
        via = f" (the link leads to {real})" if linked else ""
        if stat.S_ISDIR(st.st_mode):
            raise UsageError(
                f"{shown}: is a directory{via}", hint="give a file name, e.g. run.json"
            )
        raise UsageError(
            f"{shown}: is {kind}{via}; ibdiag writes only over a regular file or a new one",
            hint="give the path of a regular file, e.g. run.json",
        )
    parent = real.parent if str(real.parent) else Path(".")
    if not parent.is_dir():
        raise UsageError(
            f"{shown}: directory {parent} does not exist",
            hint="create it first or give another path",
        )
    if not os.access(parent, os.W_OK):
        raise UsageError(
            f"{shown}: directory {parent} is not writable", hint="give a path you can write"
        )
    return real, st


def check_output_path(path: Path | None, option: str) -> None:
    """Refuse an output path that cannot be written safely, before a long run, not after."""
    if path is not None:
        _target(Path(path), option)


class _Terminated(BaseException):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@contextmanager
def _signals_raise() -> Iterator[None]:
    """While inside, SIGTERM/SIGHUP (if they would end the process) raise :class:`_Terminated`; after
    the cleanup the ``except`` below does, the signal is delivered again with its default action."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}
    for signum in _CLEANUP_SIGNALS:
        if signal.getsignal(signum) is signal.SIG_DFL:

            def raise_terminated(num: int, frame: object) -> None:
                raise _Terminated(num)

            previous[signum] = signal.signal(signum, raise_terminated)
    try:
        yield
    except _Terminated as e:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        previous = {}
        os.kill(
            os.getpid(), e.signum
        )  # the default action: the process ends by the signal, as it would have
        raise
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _open_temporary(name: str, mode: int | None, directory: int) -> int:
    """Create ``name`` in the open ``directory`` (never through a link: O_EXCL, O_NOFOLLOW)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(name, flags, 0o666, dir_fd=directory)
    except FileExistsError:
        # Left by an earlier process with this pid that was SIGKILLed: ours by name, replace it.
        if not stat.S_ISREG(os.lstat(name, dir_fd=directory).st_mode):
            raise
        os.unlink(name, dir_fd=directory)
        fd = os.open(name, flags, 0o666, dir_fd=directory)
    if mode is not None:
        os.fchmod(fd, mode)
    return fd


@contextmanager
def atomic_output(path: Path, option: str = "--save") -> Iterator[BinaryIO]:
    """A binary file to write ``path``'s new content into; renamed over ``path`` when the block ends
    without an error. The path is checked again here (it may have changed during a long run)."""
    real, st = _target(Path(path), option)
    tmp = f".{real.name}.{os.getpid()}.tmp"
    created = False
    try:
        with _signals_raise():
            # The directory is held open from here: the temporary file and the rename happen in it,
            # whatever its path is changed to meanwhile.
            directory = os.open(
                real.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
            )
            try:
                fd = _open_temporary(
                    tmp, None if st is None else stat.S_IMODE(st.st_mode), directory
                )
                created = True
                with os.fdopen(fd, "wb") as fh:
                    yield fh
                    fh.flush()
                    os.fsync(fh.fileno())
                # Checked once more: nothing but a regular file (or nothing) is ever replaced.
                _target(real, option)
                os.replace(tmp, real.name, src_dir_fd=directory, dst_dir_fd=directory)
                created = False
            finally:
                if created:
                    try:
                        os.unlink(tmp, dir_fd=directory)
                    except OSError:
                        pass
                os.close(directory)
    except OSError as e:
        raise CannotRunError(
            f"{option} {path}: cannot write: {e.strerror or e}",
            hint="check the path and free space",
        ) from None


def write_atomically(path: Path, data: str | bytes, option: str = "--save") -> None:
    """Write ``data`` to ``path`` through :func:`atomic_output`."""
    with atomic_output(path, option) as fh:
        fh.write(data.encode() if isinstance(data, str) else data)

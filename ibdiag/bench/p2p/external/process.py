"""The C tools' processes (perftest, iperf3, sockperf): started from an argv list in their own session,
killed and reaped, and who listens where (``/proc/net/tcp`` and a process's open sockets).

Every process started is in a registry until it is reaped, so :func:`kill_all` can end them all
when ibdiag is interrupted; the kernel kills them when ibdiag itself is killed
(:mod:`ibdiag.runtime.parentdeath`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import threading

from ibdiag.errors import CannotRunError
from ibdiag.runtime.parentdeath import die_with_parent

#: Most output kept from one process (bytes); perftest prints a few kilobytes, iperf3 -J -i 0 and sockperf
#: about as much.
MAX_OUTPUT = 256 * 1024


def listening_sockets(proc_net_tcp: str) -> dict[int, set[int]]:
    """Sockets in LISTEN state (``st`` 0A) in a ``/proc/net/tcp`` or ``tcp6`` table: port -> socket inodes."""
    out: dict[int, set[int]] = {}
    for line in proc_net_tcp.splitlines()[1:]:
        parts = line.split()
        if len(parts) < 10 or parts[3] != "0A":
            continue
        try:
            port, inode = int(parts[1].rsplit(":", 1)[1], 16), int(parts[9])
        except (IndexError, ValueError):
            continue
        out.setdefault(port, set()).add(inode)
    return out


def listening_ports(proc_net_tcp: str) -> set[int]:
    """Ports in LISTEN state in a ``/proc/net/tcp`` or ``tcp6`` table."""
    return set(listening_sockets(proc_net_tcp))


def socket_inodes(pid: int, proc_root: str = "/proc") -> set[int]:
    """The socket inodes process ``pid`` holds open (``/proc/PID/fd/N -> socket:[INODE]``)."""
    fd_dir = os.path.join(proc_root, str(pid), "fd")
    out: set[int] = set()
    try:
        names = os.listdir(fd_dir)
    except OSError:
        return out
    for name in names:
        try:
            target = os.readlink(os.path.join(fd_dir, name))
        except OSError:
            continue
        if target.startswith("socket:[") and target.endswith("]"):
            try:
                out.add(int(target[8:-1]))
            except ValueError:
                continue
    return out


def listens_on(pid: int, port: int, proc_root: str = "/proc") -> bool:
    """Whether process ``pid`` itself listens on TCP ``port`` (another program listening there does not count)."""
    inodes: set[int] = set()
    for name in ("net/tcp", "net/tcp6"):
        try:
            with open(os.path.join(proc_root, name)) as f:
                inodes |= listening_sockets(f.read()).get(port, set())
        except OSError:
            continue
    return bool(inodes) and bool(inodes & socket_inodes(pid, proc_root))


_live: set[ToolProcess] = set()


_live_lock = threading.Lock()


class ToolProcess:
    """One tool process: argv list, own session, output to a private temporary file, killed and reaped by :meth:`kill`.

    It gets SIGKILL from the kernel when this process dies (:func:`~ibdiag.runtime.parentdeath.die_with_parent`;
    strictly, when the thread that started it ends: the sides below start, wait for and kill their
    process in the same thread).
    """

    def __init__(self, argv: list[str], install_hint: str) -> None:
        """``install_hint``: what to do when the program cannot be started (CannotRunError, exit 3)."""
        self.argv = list(argv)
        self._out = tempfile.TemporaryFile()
        try:
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=self._out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
                shell=False,
                preexec_fn=die_with_parent(),  # only a prctl and a getppid between fork and exec
            )
        except OSError as e:
            self._out.close()
            raise CannotRunError(
                f"cannot start {self.argv[0]}: {e.strerror or e}", hint=install_hint
            ) from None
        with _live_lock:
            _live.add(self)

    @property
    def returncode(self) -> int | None:
        return self.proc.poll()

    def wait(self, timeout_s: float) -> int | None:
        """The exit status, or None when it is still running after ``timeout_s``."""
        try:
            return self.proc.wait(timeout=max(0.0, timeout_s))
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> None:
        """SIGKILL its process group (unless it has exited) and reap it."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        with _live_lock:
            _live.discard(self)

    def output(self) -> str:
        """What it printed (stdout and stderr), at most :data:`MAX_OUTPUT` bytes from the end."""
        try:
            size = self._out.seek(0, os.SEEK_END)
            self._out.seek(max(0, size - MAX_OUTPUT))
            return self._out.read(MAX_OUTPUT).decode("utf-8", "replace")
        except (OSError, ValueError):
            return ""

    def close(self) -> None:
        self.kill()
        self._out.close()

    @property
    def command(self) -> str:
        return " ".join(self.argv)


def kill_all() -> int:
    """Kill and reap every tool process this process started and still runs; returns how many."""
    with _live_lock:
        procs = list(_live)
    for p in procs:
        p.kill()
    return len(procs)


def live_count() -> int:
    with _live_lock:
        return len(_live)

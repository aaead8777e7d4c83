"""Helpers for the p2p tests (no tests here): real servers in a thread or a process, log watching.

Everything here is real: sockets on loopback, the library ``Server`` or the ``ibdiag`` console
script. The only stand-in is :class:`FakeRdmaEndpoint`, because this machine has no RDMA adapter;
it is named as such and is only used to test the logic of the RDMA loops, never to claim that the
RDMA data path works.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from ibdiag.bench.p2p.serve import ServeOptions, Server


class LogLines:
    """Thread-safe list of log lines with a wait."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._cond = threading.Condition()

    def __call__(self, line: str) -> None:
        with self._cond:
            self.lines.append(line)
            self._cond.notify_all()

    def wait_for(self, pattern: str, timeout: float = 10.0, start: int = 0) -> str:
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for line in self.lines[start:]:
                    if rx.search(line):
                        return line
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(
                        f"no log line matching {pattern!r} within {timeout} s; got:\n"
                        + "\n".join(self.lines)
                    )
                self._cond.wait(left)

    def text(self) -> str:
        with self._cond:
            return "\n".join(self.lines)


@contextmanager
def server_thread(**opts: object) -> Iterator[tuple[int, LogLines, Server]]:
    """The library server on 127.0.0.1 and a free port, in a thread; stopped and closed afterwards."""
    base = ServeOptions(bind="127.0.0.1", port=0, timeout_s=5.0)
    log = LogLines()
    server = Server(replace(base, **opts), log)  # type: ignore[arg-type]
    _, port = server.start()
    t = threading.Thread(target=server.serve, daemon=True)
    t.start()
    try:
        yield port, log, server
    finally:
        server.close()
        t.join(5)


class ServerProcess:
    """``ibdiag bench serve`` as a real process; its stderr is collected line by line."""

    def __init__(
        self, exe: str, *args: str, env: dict[str, str] | None = None, netns: str | None = None
    ) -> None:
        cmd = [exe, "bench", "serve", *args]
        if netns:
            cmd = ["ip", "netns", "exec", netns, *cmd]
        full_env = dict(os.environ)
        full_env.pop("IBDIAG_TOKEN", None)
        full_env.update(env or {})
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full_env
        )
        self.log = LogLines()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        line = self.log.wait_for(r"listening on ", timeout=20)
        self.port = int(re.search(r":(\d+) \(", line).group(1))  # type: ignore[union-attr]

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.log(line.rstrip("\n"))

    def signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def stop(self) -> int | None:
        """SIGKILL if still running (after SIGCONT, in case it was stopped); returns the exit status."""
        if self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signal.SIGCONT)
                os.kill(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            rc = self.proc.wait(10)
        finally:
            self._reader.join(5)
            for stream in (self.proc.stdout, self.proc.stderr):
                if stream is not None:
                    stream.close()
        return rc


def client_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("IBDIAG_TOKEN", None)
    env["COLUMNS"] = "200"
    env.update(extra or {})
    return env


def write_token(path: Path, text: str = "s3cret-token-for-tests") -> Path:
    path.write_text(text + "\n")
    path.chmod(0o600)
    return path


class FakeRdmaEndpoint:
    """STAND-IN for :class:`ibdiag.bench.p2p.rdma.endpoint.RdmaEndpoint` — this machine has no RDMA adapter.

    Implements the endpoint interface the RDMA loops use (``view``, ``send_offset``, ``tx_depth``,
    ``prepare``, ``prepare_chain``, ``post``, ``poll``) for WRITEs on one queue pair: a posted WRITE
    copies bytes into ``peer.view`` at once and, if signalled, queues a completion after
    ``delay_polls`` empty polls; a chain (a post list) posts its WRITEs in order, only the last one
    signalled, the earlier ones numbered before the id the chain was posted with. It checks the rules
    a real send queue enforces: never more than ``tx_depth`` outstanding work requests, and a request
    leaves the queue only when a signalled one at or after it completed. ``post_calls`` counts the
    ``ibv_post_send`` calls a real endpoint would make, ``poll_calls`` the ``ibv_poll_cq`` calls.
    """

    def __init__(self, half: int, tx_depth: int, *, delay_polls: int = 0) -> None:
        self.view = memoryview(bytearray(2 * half))
        self.send_offset = half
        self.tx_depth = tx_depth
        self.delay_polls = delay_polls
        self.peer: FakeRdmaEndpoint | None = None
        self.posted: list[tuple[int, bool]] = []
        self.outstanding = 0
        self.max_outstanding = 0
        self.post_calls = 0
        self.poll_calls = 0
        self._pending: list[int] = []
        self._completions: list[int] = []
        self._wait = 0
        self._lock = threading.Lock()

    def prepare(
        self, verb: str, length: int, *, signaled: bool, lane: int = 0, inline: bool = False
    ) -> tuple[int, int, bool]:
        assert verb == "write" and lane == 0, "this stand-in does WRITEs on one queue pair"
        return (length, 1, signaled)

    def prepare_chain(
        self, verb: str, length: int, count: int, *, lane: int = 0, inline: bool = False
    ) -> tuple[int, int, bool]:
        assert verb == "write" and lane == 0 and count >= 1
        return (length, count, True)

    def post(self, wr: tuple[int, int, bool], wr_id: int) -> None:
        length, count, signaled_last = wr
        self.post_calls += 1
        for k in range(count):
            self._post_one(length, signaled_last and k == count - 1, wr_id - count + 1 + k)

    def _post_one(self, length: int, signaled: bool, wr_id: int) -> None:
        with self._lock:
            self.outstanding += 1
            if self.outstanding > self.tx_depth:
                raise AssertionError(f"send queue overflow: {self.outstanding} > {self.tx_depth}")
            self.max_outstanding = max(self.max_outstanding, self.outstanding)
            self.posted.append((wr_id, signaled))
            if self.peer is not None:
                src = self.view[self.send_offset : self.send_offset + length]
                self.peer.view[0:length] = src
            self._pending.append(wr_id)
            if signaled:
                # An RC completion covers every earlier unsignalled WR of the same send queue.
                self._completions.append(wr_id)
                self._wait = self.delay_polls

    def poll(self, max_entries: int = 16) -> list[int]:
        with self._lock:
            self.poll_calls += 1
            if not self._completions:
                return []
            if self._wait > 0:
                self._wait -= 1
                return []
            done = self._completions[:max_entries]
            del self._completions[: len(done)]
            last = max(done)
            before = len(self._pending)
            self._pending = [w for w in self._pending if w > last]
            self.outstanding -= before - len(self._pending)
            return done


def perftest_processes(parent: int | None = None) -> list[str]:
    """Running perftest processes (``ib_*``), optionally only the children of ``parent``."""
    return tool_processes(("ib_",), parent)


def tool_processes(prefixes: tuple[str, ...], parent: int | None = None) -> list[str]:
    """Running processes whose name starts with one of ``prefixes`` (``iperf3``, ``sockperf``, ``ib_``),
    optionally only the children of ``parent``; kernel threads and zombies are not counted."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        try:
            user_space = bool(
                Path(f"/proc/{pid}/cmdline").read_bytes()
            )  # kernel threads (ib_mad, ib-comp-wq ...) have none
        except OSError:
            continue
        if (
            comm.startswith(prefixes)
            and user_space
            and fields[0] != "Z"
            and (parent is None or int(fields[1]) == parent)
        ):
            found.append(pid)
    return found

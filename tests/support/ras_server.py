"""A fake NCCL RAS service on 127.0.0.1: a real TCP server in a thread that speaks the client protocol
of NCCL's ``src/ras/client_support.cc`` (``CLIENT PROTOCOL`` -> ``SERVER PROTOCOL 2``, ``TIMEOUT`` and
``SET FORMAT`` -> ``OK``, ``STATUS`` -> the report, then close), with hostile variants.

A fake because a real RAS needs a running NCCL job on GPUs; everything else (sockets, timing, the
client) is real.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

#: Behaviours: ``normal``; ``old`` (NCCL < 2.28.7: no JSON); ``slow`` (drips the report a byte at a
#: time); ``endless`` (the report never ends); ``huge`` (a report of ``huge_bytes``); ``hang`` (sends
#: the report, never closes); ``silent`` (accepts, never answers); ``close`` (closes at once);
#: ``greeting`` (a wrong greeting); ``longline`` (a greeting with no newline, forever); ``garbage``
#: (STATUS answered with bytes that are no report); ``reset`` (closes half-way through the report).
BEHAVIOURS = (
    "normal",
    "old",
    "slow",
    "endless",
    "huge",
    "hang",
    "silent",
    "close",
    "greeting",
    "longline",
    "garbage",
    "reset",
)


@dataclass
class FakeRas:
    text: bytes = b""
    json: bytes = b""
    behaviour: str = "normal"
    huge_bytes: int = 8 << 20
    commands: list[str] = field(default_factory=list)
    port: int = 0

    def __post_init__(self) -> None:
        assert self.behaviour in BEHAVIOURS, self.behaviour
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(8)
        self._sock.settimeout(0.2)
        self.port = self._sock.getsockname()[1]
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._accept = threading.Thread(target=self._loop, daemon=True)
        self._accept.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except (TimeoutError, OSError):
                continue
            t = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            t.start()
            self._threads.append(t)

    def _send(self, conn: socket.socket, data: bytes) -> bool:
        try:
            conn.sendall(data)
            return True
        except OSError:
            return False

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(0.2)
        try:
            if self.behaviour == "close":
                return
            fmt = "text"
            buf = b""
            while not self._stop.is_set():
                try:
                    chunk = conn.recv(4096)
                except TimeoutError:
                    continue
                except OSError:
                    return
                if not chunk:
                    return
                buf += chunk
                while b"\n" in buf:
                    line, _, buf = buf.partition(b"\n")
                    command = line.decode().strip()
                    self.commands.append(command)
                    fmt = self._answer(conn, command, fmt)
                    if fmt == "done":
                        return
        finally:
            conn.close()

    def _answer(self, conn: socket.socket, command: str, fmt: str) -> str:
        upper = command.upper()
        b = self.behaviour
        if b == "silent":
            self._wait()
            return "done"
        if upper.startswith("CLIENT PROTOCOL"):
            if b == "greeting":
                self._send(conn, b"HTTP/1.1 400 Bad Request\r\n")
            elif b == "longline":
                while not self._stop.is_set() and self._send(conn, b"S" * 4096):
                    pass
                return "done"
            else:
                self._send(conn, b"SERVER PROTOCOL 2\n")
            return fmt
        if upper.startswith("TIMEOUT "):
            self._send(conn, b"OK\n")
            return fmt
        if upper.startswith("SET FORMAT "):
            if b == "old":
                self._send(conn, f"ERROR: Unknown command {command}\n".encode())
                return fmt
            self._send(conn, b"OK\n")
            return command.split()[-1].lower()
        if upper in ("STATUS", "VERBOSE STATUS"):
            self._report(conn, self.json if fmt == "json" else self.text)
            return "done"
        self._send(conn, f"ERROR: Unknown command {command}\n".encode())
        return fmt

    def _report(self, conn: socket.socket, data: bytes) -> None:
        b = self.behaviour
        if b == "slow":
            for i in range(len(data)):
                if self._stop.is_set() or not self._send(conn, data[i : i + 1]):
                    return
                time.sleep(0.05)
        elif b == "endless":
            while not self._stop.is_set() and self._send(
                conn, b"  Rank 1 -- [process information not found]\n"
            ):
                time.sleep(0.001)
        elif b == "huge":
            block = b"x" * 65536
            for _ in range(self.huge_bytes // len(block) + 1):
                if self._stop.is_set() or not self._send(conn, block):
                    return
        elif b == "hang":
            self._send(conn, data)
            self._wait()
        elif b == "garbage":
            self._send(conn, bytes(range(256)) * 4)
        elif b == "reset":
            self._send(conn, data[: len(data) // 2])
            conn.setsockopt(
                socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
            )
        else:
            self._send(conn, data)

    def _wait(self) -> None:
        while not self._stop.is_set():
            time.sleep(0.05)

    def close(self) -> None:
        self._stop.set()
        self._sock.close()
        self._accept.join(timeout=5)
        for t in self._threads:
            t.join(timeout=5)


@contextmanager
def fake_ras(**kw: object) -> Iterator[FakeRas]:
    server = FakeRas(**kw)  # type: ignore[arg-type]
    try:
        yield server
    finally:
        server.close()


def free_port() -> int:
    """A port nothing listens on (bound, then released)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port

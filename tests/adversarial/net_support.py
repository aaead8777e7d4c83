"""Helpers for the network-side adversarial tests (no tests here).

Everything is real: ``ibdiag bench serve`` and ``ibdiag bench p2p`` as processes (the console
script), raw sockets on loopback speaking (or abusing) the control protocol. Attackers use other
loopback source addresses (127.0.0.2 ...) when they play another host.
"""

from __future__ import annotations

import json
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

from tests.support.p2p import ServerProcess, client_env

QUICK = ["--sizes", "64K", "--iters", "20", "--warmup", "2", "-o", "json"]


def start_server(exe: str, *args: str, env: dict[str, str] | None = None) -> ServerProcess:
    return ServerProcess(exe, "--bind", "127.0.0.1", "--port", "0", *args, env=env)


def run_client(
    exe: str,
    port: int,
    *args: str,
    env: dict[str, str] | None = None,
    timeout: float = 60,
    host: str = "127.0.0.1",
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [exe, "bench", "p2p", host, "--port", str(port), *args],
        capture_output=True,
        text=True,
        env=client_env(env),
        timeout=timeout,
    )


def client_process(
    exe: str, port: int, *args: str, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [exe, "bench", "p2p", "127.0.0.1", "--port", str(port), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=client_env(env),
    )


def good_run(
    exe: str, port: int, *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> float:
    """A quick real run that must succeed; returns its bandwidth (GB/s)."""
    r = run_client(exe, port, *QUICK, *args, env=env, timeout=timeout)
    assert r.returncode == 0, r.stderr
    bw = json.loads(r.stdout)["results"][0]["bw_gbs"]
    assert bw > 0
    return bw


def client_against(
    exe: str, serve_one: Callable[[socket.socket], None], *args: str
) -> subprocess.CompletedProcess[str]:
    """Run the real client (quick sizes, --timeout 5) against a fake server: ``serve_one(conn)`` in a thread."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def accept_one() -> None:
        conn, _ = listener.accept()
        with conn:
            serve_one(conn)

    t = threading.Thread(target=accept_one, daemon=True)
    t.start()
    try:
        return run_client(
            exe, port, "--sizes", "64K", "--iters", "5", "--timeout", "5", *args, timeout=30
        )
    finally:
        t.join(10)
        listener.close()


def frame(obj: Any) -> bytes:
    body = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
    return struct.pack("!I", len(body)) + body


def read_frame(sock: socket.socket, timeout: float = 5.0) -> dict[str, Any] | None:
    """One framed message, or None when the peer closed first."""
    sock.settimeout(timeout)
    hdr = _read_n(sock, 4)
    if hdr is None:
        return None
    (n,) = struct.unpack("!I", hdr)
    body = _read_n(sock, n)
    return None if body is None else json.loads(body)


def _read_n(sock: socket.socket, n: int, timeout: float | None | bool = False) -> bytes | None:
    if timeout is not False:
        sock.settimeout(timeout)
    buf = b""
    while len(buf) < n:
        try:
            chunk = sock.recv(n - len(buf))
        except (TimeoutError, ConnectionResetError):
            return None
        if not chunk:
            return None
        buf += chunk
    return buf


def connect_from(source: str, port: int, timeout: float = 5.0) -> socket.socket:
    """A TCP connection to 127.0.0.1:``port`` from loopback address ``source`` (another "host")."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.bind((source, 0))
    s.connect(("127.0.0.1", port))
    return s


def wait_gone(pid: int, timeout: float) -> bool:
    """True when process ``pid`` has exited (or is a zombie) within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                state = fh.read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


def token_env(token: str = "adversarial-test-token") -> dict[str, str]:
    return {"IBDIAG_TOKEN": token}


class ControlProxy:
    """An on-path attacker on the control channel: a TCP relay between a real client and a real
    server that reads the (unencrypted) frames going to the client and calls ``on_server_message``
    with each decoded message before forwarding it. Data connections do not pass through it."""

    def __init__(self, upstream_port: int, on_server_message) -> None:  # a callable(dict)
        self.upstream_port = upstream_port
        self.on_server_message = on_server_message
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self._threads: list[threading.Thread] = []
        self._socks: list[socket.socket] = []
        t = threading.Thread(target=self._accept, daemon=True)
        t.start()
        self._threads.append(t)

    def _accept(self) -> None:
        try:
            down, _ = self.listener.accept()
        except OSError:
            return
        up = socket.create_connection(("127.0.0.1", self.upstream_port))
        self._socks += [down, up]
        for target in (lambda: self._pump(down, up), lambda: self._frames(up, down)):
            t = threading.Thread(target=target, daemon=True)
            t.start()
            self._threads.append(t)

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while chunk := src.recv(65536):
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            _shut(dst)

    def _frames(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                hdr = _read_n(src, 4, timeout=None)
                if hdr is None:
                    break
                body = _read_n(src, struct.unpack("!I", hdr)[0], timeout=None)
                if body is None:
                    break
                self.on_server_message(json.loads(body))
                dst.sendall(hdr + body)
        except OSError:
            pass
        finally:
            _shut(dst)

    def close(self) -> None:
        self.listener.close()
        for s in self._socks:
            s.close()
        for t in self._threads:
            t.join(2)


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass

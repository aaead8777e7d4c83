"""The data connections of a TCP run: opened by the client, each introducing itself to the server.

Each data connection proves first that it belongs to the authenticated session: magic, its stream
index and data_mac(session key, the run's nonce, index) (protocol.data_mac). The server reads these
introductions from all pending connections at once, each within its own short deadline, so a
stranger that connects and stays silent delays nobody; strangers are dropped and logged.
"""

from __future__ import annotations

import hmac
import os
import selectors
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass

from ibdiag.bench.p2p.control.channel import PeerClosedError, describe_peer, socket_error
from ibdiag.bench.p2p.control.protocol import data_mac
from ibdiag.bench.p2p.control.sockio import close_all, tune_data_socket
from ibdiag.errors import PeerTimeoutError

DATA_MAGIC = b"IBD2"
DATA_NONCE_BYTES = 16
_DATA_HELLO = struct.Struct("!4sI32s")
#: Connections waiting to introduce themselves at once; beyond, the oldest is dropped.
MAX_PENDING_DATA = 64
#: Strangers logged one by one per run; the rest are counted in one line.
MAX_LOGGED_STRANGERS = 8


def new_data_nonce() -> bytes:
    return os.urandom(DATA_NONCE_BYTES)


def data_hello(key: bytes, nonce: bytes, index: int) -> bytes:
    """The introduction data connection ``index`` sends first."""
    return _DATA_HELLO.pack(DATA_MAGIC, index, data_mac(key, nonce, index))


def connect_streams(
    host: str,
    port: int,
    n: int,
    key: bytes,
    nonce: bytes,
    timeout_s: float,
    socket_buffer: int | None = None,
) -> list[socket.socket]:
    """Open ``n`` data connections to the server and introduce each as stream ``i`` of this session."""
    socks: list[socket.socket] = []
    try:
        for i in range(n):
            try:
                s = socket.create_connection((host, port), timeout=timeout_s)
            except OSError as e:
                raise socket_error(
                    e, f"{host}:{port}", f"data connection {i + 1} of {n} to be accepted", timeout_s
                ) from None
            socks.append(s)
            tune_data_socket(s, timeout_s, socket_buffer)
            try:
                s.sendall(data_hello(key, nonce, i))
            except OSError as e:
                raise socket_error(
                    e, f"{host}:{port}", f"data connection {i + 1} to be accepted", timeout_s
                ) from None
    except BaseException:
        close_all(socks)
        raise
    return socks


@dataclass
class _Pending:
    conn: socket.socket
    peer: str
    deadline: float
    buf: bytearray


class _Acceptor:
    """The state of one :func:`accept_streams`: the streams accepted, the strangers pending and dropped."""

    def __init__(
        self,
        listener: socket.socket,
        n: int,
        key: bytes,
        nonce: bytes,
        timeout_s: float,
        log: Callable[[str], None],
        socket_buffer: int | None,
        hello_s: float,
    ) -> None:
        self.listener, self.n, self.key, self.nonce = listener, n, key, nonce
        self.timeout_s, self.log, self.socket_buffer, self.hello_s = (
            timeout_s,
            log,
            socket_buffer,
            hello_s,
        )
        self.got: dict[int, socket.socket] = {}
        self.pending: dict[socket.socket, _Pending] = {}
        self.dropped = 0
        self.sel = selectors.DefaultSelector()

    def drop(self, p: _Pending, why: str) -> None:
        self.sel.unregister(p.conn)
        del self.pending[p.conn]
        p.conn.close()
        self.dropped += 1
        if self.dropped <= MAX_LOGGED_STRANGERS:
            self.log(f"data connection from {p.peer}: dropped: {why}")

    def accept(self) -> None:
        """A connection on the listener: pending until it introduces itself (the oldest goes when full)."""
        try:
            conn, addr = self.listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        if len(self.pending) >= MAX_PENDING_DATA:
            self.drop(
                next(iter(self.pending.values())),
                f"{MAX_PENDING_DATA} connections waited to introduce themselves",
            )
        conn.setblocking(False)
        p = _Pending(conn, describe_peer(addr), time.monotonic() + self.hello_s, bytearray())
        self.pending[conn] = p
        self.sel.register(conn, selectors.EVENT_READ)

    def read_hello(self, p: _Pending) -> None:
        """More of ``p``'s introduction; once whole, a stream of this run's session, or dropped."""
        try:
            chunk = p.conn.recv(_DATA_HELLO.size - len(p.buf))
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            self.drop(p, f"connection error before its introduction: {e.strerror or e}")
            return
        if not chunk:
            self.drop(p, "closed before its introduction")
            return
        p.buf += chunk
        if len(p.buf) < _DATA_HELLO.size:
            return
        magic, index, mac = _DATA_HELLO.unpack(bytes(p.buf))
        if (
            magic != DATA_MAGIC
            or index >= self.n
            or not hmac.compare_digest(mac, data_mac(self.key, self.nonce, index))
        ):
            self.drop(p, "its introduction does not belong to this run's session")
            return
        if index in self.got:
            self.drop(p, f"a second connection for stream {index + 1}")
            return
        self.sel.unregister(p.conn)
        del self.pending[p.conn]
        p.conn.setblocking(True)
        tune_data_socket(p.conn, self.timeout_s, self.socket_buffer)
        self.got[index] = p.conn

    def close(self) -> None:
        """Drop whoever is still pending, close the selector, count the strangers not logged."""
        for p in list(self.pending.values()):
            self.drop(p, "no introduction before the run's own connections were all there")
        self.sel.close()
        if self.dropped > MAX_LOGGED_STRANGERS:
            self.log(
                f"data connections: {self.dropped - MAX_LOGGED_STRANGERS} more strangers dropped during this run's set-up"
            )


def accept_streams(
    listener: socket.socket,
    n: int,
    key: bytes,
    nonce: bytes,
    timeout_s: float,
    log: Callable[[str], None],
    socket_buffer: int | None = None,
    *,
    hello_timeout_s: float = 2.0,
    control: socket.socket | None = None,
) -> list[socket.socket]:
    """Accept the run's ``n`` data connections within ``timeout_s``; strangers are dropped and logged.

    Every pending connection must introduce itself within ``hello_timeout_s`` (capped at
    ``timeout_s``); connections are read side by side, so a silent one delays nobody. The client
    says nothing on the ``control`` connection meanwhile: when it does, or hangs up, it has given
    up, and so does this wait (PeerClosedError) instead of running into the timeout.
    """
    hello_s = min(hello_timeout_s, timeout_s)
    deadline = time.monotonic() + timeout_s
    acc = _Acceptor(listener, n, key, nonce, timeout_s, log, socket_buffer, hello_s)
    listener.setblocking(False)
    acc.sel.register(listener, selectors.EVENT_READ)
    if control is not None:
        acc.sel.register(control, selectors.EVENT_READ)
    try:
        while len(acc.got) < n:
            now = time.monotonic()
            for p in [p for p in acc.pending.values() if p.deadline <= now]:
                acc.drop(p, f"no introduction within {hello_s:g} s")
            if now >= deadline:
                raise PeerTimeoutError(
                    f"only {len(acc.got)} of {n} data connections arrived within {timeout_s:g} s",
                    hint="a firewall may block the data port the server chose; see the client's error",
                )
            wake = min([deadline, *(p.deadline for p in acc.pending.values())])
            for ready, _ in acc.sel.select(max(0.0, wake - now)):
                if ready.fileobj is control:
                    raise PeerClosedError(
                        f"the client gave up (closed or wrote to the control connection) with {len(acc.got)} of {n} data connections set up",
                        hint="see the client's error",
                    )
                if ready.fileobj is listener:
                    acc.accept()
                    continue
                acc.read_hello(acc.pending[ready.fileobj])  # type: ignore[index]  # a registered socket: the selector hands back the objects it was given
    except BaseException:
        close_all(list(acc.got.values()))
        raise
    finally:
        acc.close()
    return [acc.got[i] for i in range(n)]

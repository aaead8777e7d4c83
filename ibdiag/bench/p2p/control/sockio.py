"""Blocking TCP sockets with kernel timeouts, and sends that keep one deadline per wait.

Sockets stay blocking with kernel timeouts (``SO_RCVTIMEO``/``SO_SNDTIMEO``) rather than Python
socket timeouts, which would add a ``poll`` system call to every send and receive. A receive fails
after ``timeout`` seconds without data. A blocking send wakes up every :func:`send_slice_s` (at most
0.1 s) when the peer takes nothing; the time a send spent blocked counts towards one deadline per
wait — ``timeout`` seconds after the peer last took a byte, whichever message or slice it was in — so
a hung peer is noticed within ``timeout`` + one slice of the last byte its kernel accepted.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Callable, Sequence


def _timeval(seconds: float) -> bytes:
    sec = int(seconds)
    return struct.pack("ll", sec, int(round((seconds - sec) * 1e6)))


#: Longest a blocked send sleeps in the kernel (SO_SNDTIMEO) before the deadline is looked at.
SEND_SLICE_MAX_S = 0.1


def send_slice_s(timeout_s: float) -> float:
    """How long one blocking send may wait (SO_SNDTIMEO) before :func:`send_rest` looks at the clock."""
    return max(0.01, min(timeout_s / 10, SEND_SLICE_MAX_S))


def set_kernel_timeouts(sock: socket.socket, timeout_s: float) -> None:
    """Blocking socket: receives fail after ``timeout_s`` without data (SO_RCVTIMEO), sends wake up
    every :func:`send_slice_s` (SO_SNDTIMEO) so :func:`send_rest` can enforce ``timeout_s``."""
    sock.settimeout(None)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, _timeval(timeout_s))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, _timeval(send_slice_s(timeout_s)))


def send_rest(sock: socket.socket, data: memoryview | bytes, sent: int, timeout_s: float) -> None:
    """Finish sending ``data`` after a first ``send`` moved ``sent`` bytes; ``socket.timeout``
    ``timeout_s`` seconds after the peer last took a byte.

    A first ``send`` that moved nothing (``sent == 0``) was blocked for a whole slice already: that
    slice counts towards the deadline, so the wait is one deadline, not a fresh clock per send.
    """
    view = memoryview(data)
    n = len(view)
    slice_s = send_slice_s(timeout_s)
    now = time.monotonic()
    last = now - slice_s if sent == 0 else now
    shortened = False
    try:
        while sent < n:
            try:
                k = sock.send(view[sent:])
            except BlockingIOError:
                left = timeout_s - (time.monotonic() - last)
                if left <= 0:
                    raise TimeoutError("send timed out") from None
                if left < slice_s:
                    # the last sleep ends at the deadline, not up to a slice after it
                    sock.setsockopt(
                        socket.SOL_SOCKET, socket.SO_SNDTIMEO, _timeval(max(left, 0.001))
                    )
                    shortened = True
                continue
            sent += k
            last = time.monotonic()
    finally:
        if shortened:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, _timeval(slice_s))


def make_send_all(sock: socket.socket, timeout_s: float) -> Callable[[memoryview | bytes], None]:
    """``sendall`` with the no-progress deadline of :func:`send_rest` (for headers and markers)."""
    send = sock.send

    def send_all(data: memoryview | bytes) -> None:
        try:
            k = send(data)
        except BlockingIOError:
            k = 0
        if k != len(data):
            send_rest(sock, data, k, timeout_s)

    return send_all


def tune_data_socket(
    sock: socket.socket, timeout_s: float, socket_buffer: int | None = None
) -> None:
    """Kernel timeouts, and fixed SO_SNDBUF/SO_RCVBUF only when asked (``--socket-buffer``).

    By default the kernel's buffer autotuning is left on: a fixed size is capped by
    net.core.[rw]mem_max and switches autotuning off (tcp(7)), which measured slower on loopback.
    """
    set_kernel_timeouts(sock, timeout_s)
    if socket_buffer:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, socket_buffer)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, socket_buffer)


def set_nodelay(sock: socket.socket, on: bool) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1 if on else 0)


#: ``SO_BUSY_POLL`` (Linux ``asm-generic/socket.h``; the socket module of Python 3.11 does not name it).
SO_BUSY_POLL = getattr(socket, "SO_BUSY_POLL", 46)


def set_busy_poll(sock: socket.socket, usec: int) -> bool:
    """Ask the kernel to busy-poll the device queue for up to ``usec`` µs in a blocking receive on ``sock``
    (``SO_BUSY_POLL``; it acts on NICs whose driver polls with NAPI, not on loopback). False when the
    kernel refuses: raising it above ``net.core.busy_read`` needs CAP_NET_ADMIN (EPERM)."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_BUSY_POLL, usec)
    except OSError:
        return False
    return True


def close_all(socks: Sequence[socket.socket]) -> None:
    for s in socks:
        try:
            s.close()
        except OSError:
            pass

"""The TCP data path: streaming bandwidth over one or more connections, and ping-pong latency.

Bandwidth: the sender writes messages of ``size`` bytes from one preallocated buffer, one blocking
``send`` of a memoryview per message (looped like ``sendall`` when the kernel takes less); the
receiver reads with ``recv_into`` into preallocated memory: a per-stream 4 MiB buffer — NCCL's
socket transport stages through 4 MiB buffers too (NCCL_BUFFSIZE) — taking whatever has arrived,
up to the end of the current batch, per call. (Reading at most one message per call, as iperf3
reads its block length, measured up to 20% slower at 1 MiB on loopback when the scheduler moves the
two ends between CPUs: more wake-ups, not a property of the link.) The byte stream is self-describing so that neither side ever waits on a second
socket: batches of messages, each preceded by an 8-byte count, and a zero count ending the warm-up
and then the measured phase. The sender looks at the clock once per batch (~4 MiB), not per message.
Bandwidth is what the receiver saw: bytes between the end of the warm-up and the end of the
measured phase over that time (iperf3's "receiver" line).

Latency: ping-pong of ``size``-byte messages with ``TCP_NODELAY`` on the first connection;
one-way latency = round trip / 2 (``qperf tcp_lat``).

Sockets stay blocking with kernel timeouts (``SO_RCVTIMEO``/``SO_SNDTIMEO``) rather than Python
socket timeouts, which would add a ``poll`` system call to every send and receive. A receive fails
after ``timeout`` seconds without data. A blocking send wakes up every :func:`send_slice_s` (at most
0.1 s) when the peer takes nothing; the time a send spent blocked counts towards one deadline per
wait — ``timeout`` seconds after the peer last took a byte, whichever message or slice it was in — so
a hung peer is noticed within ``timeout`` + one slice of the last byte its kernel accepted.
"""

from __future__ import annotations

import hmac
import os
import socket
import struct
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from ibdiag.bench.p2p.protocol import PeerClosedError, data_mac, describe_peer, socket_error
from ibdiag.errors import CannotRunError, IbdiagError, PeerTimeoutError

HEADER = struct.Struct("!Q")
#: Bytes per batch of messages: the sender checks the clock once per batch.
BATCH_BYTES = 4 * 2**20
#: Receive buffer per stream (NCCL_BUFFSIZE's default, 4 MiB).
RECV_RING_MAX = 4 * 2**20

T = TypeVar("T")


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
                    raise socket.timeout("send timed out") from None
                if left < slice_s:
                    # the last sleep ends at the deadline, not up to a slice after it
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, _timeval(max(left, 0.001)))
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


def tune_data_socket(sock: socket.socket, timeout_s: float, socket_buffer: int | None = None) -> None:
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


# --- data connections ----------------------------------------------------------------------------
#
# Each data connection proves first that it belongs to the authenticated session: magic, its stream
# index and data_mac(session key, the run's nonce, index) (protocol.data_mac). The server reads these
# introductions from all pending connections at once, each within its own short deadline, so a
# stranger that connects and stays silent delays nobody; strangers are dropped and logged.

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


def connect_streams(host: str, port: int, n: int, key: bytes, nonce: bytes, timeout_s: float, socket_buffer: int | None = None) -> list[socket.socket]:
    """Open ``n`` data connections to the server and introduce each as stream ``i`` of this session."""
    socks: list[socket.socket] = []
    try:
        for i in range(n):
            try:
                s = socket.create_connection((host, port), timeout=timeout_s)
            except OSError as e:
                raise socket_error(e, f"{host}:{port}", f"data connection {i + 1} of {n} to be accepted", timeout_s) from None
            socks.append(s)
            tune_data_socket(s, timeout_s, socket_buffer)
            try:
                s.sendall(data_hello(key, nonce, i))
            except OSError as e:
                raise socket_error(e, f"{host}:{port}", f"data connection {i + 1} to be accepted", timeout_s) from None
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
    import selectors

    hello_s = min(hello_timeout_s, timeout_s)
    deadline = time.monotonic() + timeout_s
    got: dict[int, socket.socket] = {}
    pending: dict[socket.socket, _Pending] = {}
    dropped = 0

    def drop(p: _Pending, why: str) -> None:
        nonlocal dropped
        sel.unregister(p.conn)
        del pending[p.conn]
        p.conn.close()
        dropped += 1
        if dropped <= MAX_LOGGED_STRANGERS:
            log(f"data connection from {p.peer}: dropped: {why}")

    sel = selectors.DefaultSelector()
    listener.setblocking(False)
    sel.register(listener, selectors.EVENT_READ)
    if control is not None:
        sel.register(control, selectors.EVENT_READ)
    try:
        while len(got) < n:
            now = time.monotonic()
            for p in [p for p in pending.values() if p.deadline <= now]:
                drop(p, f"no introduction within {hello_s:g} s")
            if now >= deadline:
                raise PeerTimeoutError(
                    f"only {len(got)} of {n} data connections arrived within {timeout_s:g} s",
                    hint="a firewall may block the data port the server chose; see the client's error",
                )
            wake = min([deadline, *(p.deadline for p in pending.values())])
            for ready, _ in sel.select(max(0.0, wake - now)):
                if ready.fileobj is control:
                    raise PeerClosedError(
                        f"the client gave up (closed or wrote to the control connection) with {len(got)} of {n} data connections set up",
                        hint="see the client's error",
                    )
                if ready.fileobj is listener:
                    try:
                        conn, addr = listener.accept()
                    except (BlockingIOError, InterruptedError):
                        continue
                    if len(pending) >= MAX_PENDING_DATA:
                        drop(next(iter(pending.values())), f"{MAX_PENDING_DATA} connections waited to introduce themselves")
                    conn.setblocking(False)
                    p = _Pending(conn, describe_peer(addr), time.monotonic() + hello_s, bytearray())
                    pending[conn] = p
                    sel.register(conn, selectors.EVENT_READ)
                    continue
                p = pending[ready.fileobj]  # type: ignore[index]
                try:
                    chunk = p.conn.recv(_DATA_HELLO.size - len(p.buf))
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError as e:
                    drop(p, f"connection error before its introduction: {e.strerror or e}")
                    continue
                if not chunk:
                    drop(p, "closed before its introduction")
                    continue
                p.buf += chunk
                if len(p.buf) < _DATA_HELLO.size:
                    continue
                magic, index, mac = _DATA_HELLO.unpack(bytes(p.buf))
                if magic != DATA_MAGIC or index >= n or not hmac.compare_digest(mac, data_mac(key, nonce, index)):
                    drop(p, "its introduction does not belong to this run's session")
                    continue
                if index in got:
                    drop(p, f"a second connection for stream {index + 1}")
                    continue
                sel.unregister(p.conn)
                del pending[p.conn]
                p.conn.setblocking(True)
                tune_data_socket(p.conn, timeout_s, socket_buffer)
                got[index] = p.conn
    except BaseException:
        close_all(list(got.values()))
        raise
    finally:
        for p in list(pending.values()):
            drop(p, "no introduction before the run's own connections were all there")
        sel.close()
        if dropped > MAX_LOGGED_STRANGERS:
            log(f"data connections: {dropped - MAX_LOGGED_STRANGERS} more strangers dropped during this run's set-up")
    return [got[i] for i in range(n)]


def close_all(socks: Sequence[socket.socket]) -> None:
    for s in socks:
        try:
            s.close()
        except OSError:
            pass


# --- bandwidth -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class StreamStats:
    """One direction of one connection in the measured phase (perf_counter seconds)."""

    messages: int
    bytes: int
    t_start: float
    t_end: float


class SendWindow:
    """Lines the sender threads of one side up after their warm-up, then starts the clock once.

    The barrier action records the start, the duration deadline and (through ``on_start``) starts
    the CPU meter, so every stream measures the same window.
    """

    def __init__(self, streams: int, duration_s: float | None, timeout_s: float, on_start: Callable[[], None] | None = None) -> None:
        self.duration_s = duration_s
        self.timeout_s = timeout_s
        self.t_start = 0.0
        self.deadline = 0.0
        self._on_start = on_start
        self.barrier = threading.Barrier(streams, action=self._start)

    def _start(self) -> None:
        if self._on_start is not None:
            self._on_start()
        self.t_start = time.perf_counter()
        self.deadline = self.t_start + (self.duration_s or 0.0)

    def wait(self) -> None:
        try:
            self.barrier.wait(self.timeout_s)
        except threading.BrokenBarrierError:
            raise CannotRunError("another stream failed during the warm-up") from None

    def abort(self) -> None:
        self.barrier.abort()


def _send_messages(sock: socket.socket, view: memoryview, count: int, timeout_s: float) -> None:
    """``count`` times the whole of ``view``: one ``send`` each when the kernel takes it at once."""
    send = sock.send
    size = len(view)
    for _ in range(count):
        try:
            k = send(view)
        except BlockingIOError:
            k = 0
        if k != size:
            send_rest(sock, view, k, timeout_s)


def _send_batches(sock: socket.socket, view: memoryview, count: int, per_batch: int, timeout_s: float) -> None:
    send_all = make_send_all(sock, timeout_s)
    pack = HEADER.pack
    while count > 0:
        k = per_batch if count > per_batch else count
        send_all(pack(k))
        _send_messages(sock, view, k, timeout_s)
        count -= k


def send_stream(
    sock: socket.socket,
    view: memoryview,
    *,
    warmup: int,
    iters: int | None,
    window: SendWindow,
    peer: str,
    what: str,
) -> StreamStats:
    """Send ``warmup`` messages, wait for the other streams, then ``iters`` messages or until the deadline.

    ``view`` is exactly one message. Returns the measured phase only.
    """
    size = len(view)
    per_batch = max(1, BATCH_BYTES // size)
    timeout_s = window.timeout_s
    send_all = make_send_all(sock, timeout_s)
    pack = HEADER.pack
    end = pack(0)
    try:
        set_nodelay(sock, False)
        _send_batches(sock, view, warmup, per_batch, timeout_s)
        send_all(end)
        window.wait()
        sent = 0
        if iters is not None:
            _send_batches(sock, view, iters, per_batch, timeout_s)
            sent = iters
        else:
            deadline = window.deadline
            clock = time.perf_counter
            header = pack(per_batch)
            while clock() < deadline:
                send_all(header)
                _send_messages(sock, view, per_batch, timeout_s)
                sent += per_batch
        # TCP_NODELAY pushes the end marker out now instead of after the last ACK (Nagle).
        set_nodelay(sock, True)
        send_all(end)
        t_end = time.perf_counter()
    except OSError as e:
        window.abort()
        raise socket_error(e, peer, f"it to take {what}", window.timeout_s) from None
    except BaseException:
        window.abort()
        raise
    return StreamStats(messages=sent, bytes=sent * size, t_start=window.t_start, t_end=t_end)


def recv_stream(
    sock: socket.socket,
    ring: memoryview,
    size: int,
    *,
    on_measure_start: Callable[[], None],
    peer: str,
    what: str,
    timeout_s: float,
) -> StreamStats:
    """Read one sender's warm-up and measured phase (see the module docstring for the framing).

    ``ring`` is this stream's receive buffer (:data:`RECV_RING_MAX` bytes); each ``recv_into``
    takes what has arrived, up to the end of the ring or of the batch. ``on_measure_start`` runs
    when the warm-up's end marker arrives.
    """
    ring_len = len(ring)
    hdr = bytearray(HEADER.size)
    hview = memoryview(hdr)
    ri = sock.recv_into
    off = 0
    measured = False
    messages = 0
    t_start = 0.0
    try:
        while True:
            got = 0
            while got < HEADER.size:
                k = ri(hview[got:], HEADER.size - got)
                if k == 0:
                    raise PeerClosedError(f"{peer} closed the connection while we were waiting for {what}", hint="the peer process ended or was killed; see its log")
                got += k
            (count,) = HEADER.unpack(hdr)
            if count == 0:
                if not measured:
                    t_start = time.perf_counter()
                    on_measure_start()
                    measured = True
                    continue
                t_end = time.perf_counter()
                break
            if count > 2**40 // max(size, 1):
                raise CannotRunError(f"{peer} sent a corrupt batch header ({count} messages)", hint="both sides must run the same ibdiag version")
            remaining = count * size
            while remaining:
                want = ring_len - off
                if remaining < want:
                    want = remaining
                k = ri(ring[off:] if off else ring, want)
                if k == 0:
                    raise PeerClosedError(f"{peer} closed the connection while we were waiting for {what}", hint="the peer process ended or was killed; see its log")
                remaining -= k
                off += k
                if off == ring_len:
                    off = 0
            if measured:
                messages += count
    except OSError as e:
        raise socket_error(e, peer, what, timeout_s) from None
    return StreamStats(messages=messages, bytes=messages * size, t_start=t_start, t_end=t_end)


def window_of(stats: Sequence[StreamStats]) -> tuple[int, int, float]:
    """(messages, bytes, seconds) of several streams' measured phases: first start to last end."""
    if not stats:
        return 0, 0, 0.0
    start = min(s.t_start for s in stats)
    end = max(s.t_end for s in stats)
    return sum(s.messages for s in stats), sum(s.bytes for s in stats), max(0.0, end - start)


def run_parallel(jobs: Sequence[Callable[[], T]], on_error: Callable[[], None]) -> list[T]:
    """Run ``jobs`` in threads; on the first failure call ``on_error`` (to unblock the others), re-raise it."""
    results: list[T | None] = [None] * len(jobs)
    errors: list[BaseException] = []
    lock = threading.Lock()

    def runner(i: int, job: Callable[[], T]) -> None:
        try:
            results[i] = job()
        except BaseException as e:  # noqa: BLE001 - handed to the caller's thread below
            with lock:
                first = not errors
                errors.append(e)
            if first:
                on_error()

    if len(jobs) == 1:
        runner(0, jobs[0])
    else:
        threads = [threading.Thread(target=runner, args=(i, job), name=f"ibdiag-stream-{i}", daemon=True) for i, job in enumerate(jobs)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    if errors:
        # Prefer an ibdiag error that explains the cause over the echo errors of the other streams.
        primary = next((e for e in errors if isinstance(e, IbdiagError) and not isinstance(e, PeerClosedError)), errors[0])
        raise primary
    return results  # type: ignore[return-value]


# --- latency -------------------------------------------------------------------------------------


def _finish_recv(ri: Callable[..., int], view: memoryview, got: int, size: int, peer: str, what: str) -> None:
    while got < size:
        k = ri(view[got:], size - got)
        if k == 0:
            raise PeerClosedError(f"{peer} closed the connection while we were waiting for {what}", hint="the peer process ended or was killed; see its log")
        got += k


def ping(sock: socket.socket, send_view: memoryview, recv_view: memoryview, n: int, *, peer: str, what: str, timeout_s: float) -> list[int]:
    """``n`` round trips of ``len(send_view)`` bytes; their times in nanoseconds."""
    size = len(send_view)
    recv_view = recv_view[:size]
    samples = [0] * n
    send = sock.send
    ri = sock.recv_into
    clock = time.perf_counter_ns
    try:
        for i in range(n):
            t0 = clock()
            try:
                k = send(send_view)
            except BlockingIOError:
                k = 0
            if k != size:
                send_rest(sock, send_view, k, timeout_s)
            got = ri(recv_view, size)
            if got != size:
                if got == 0:
                    raise PeerClosedError(f"{peer} closed the connection while we were waiting for {what}", hint="the peer process ended or was killed; see its log")
                _finish_recv(ri, recv_view, got, size, peer, what)
            samples[i] = clock() - t0
    except OSError as e:
        raise socket_error(e, peer, what, timeout_s) from None
    return samples


def pong(sock: socket.socket, view: memoryview, n: int, *, peer: str, what: str, timeout_s: float) -> None:
    """Answer ``n`` pings of ``len(view)`` bytes with the same bytes."""
    size = len(view)
    send = sock.send
    ri = sock.recv_into
    try:
        for _ in range(n):
            got = ri(view, size)
            if got != size:
                if got == 0:
                    raise PeerClosedError(f"{peer} closed the connection while we were waiting for {what}", hint="the peer process ended or was killed; see its log")
                _finish_recv(ri, view, got, size, peer, what)
            try:
                k = send(view)
            except BlockingIOError:
                k = 0
            if k != size:
                send_rest(sock, view, k, timeout_s)
    except OSError as e:
        raise socket_error(e, peer, what, timeout_s) from None

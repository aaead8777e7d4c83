"""The TCP data path's bandwidth: streaming over one or more connections.

Bandwidth: the sender writes messages of ``size`` bytes from one preallocated buffer, one blocking
``send`` of a memoryview per message (looped like ``sendall`` when the kernel takes less); the
receiver reads with ``recv_into`` into a preallocated 1 MiB buffer per stream, taking whatever has
arrived, up to the end of the buffer or of the current batch, per call. (1 MiB is iperf3's buffer
at ``-l 1M``; a 4 MiB buffer — NCCL's staging size — cost the receiver 1.2 x the CPU per GB on
loopback, its copies leaving the caches: benchmarks/p2p_vs_iperf3.py, docs/bench-p2p.md. Reading
at most one message per call, as iperf3 reads its block length, measured up to 20% slower at 1 MiB
when the scheduler moves the two ends between CPUs: more wake-ups.) The byte stream is
self-describing so that neither side ever waits on a second socket: batches of messages, each
preceded by an 8-byte count, and a zero count ending the warm-up and then the measured phase. The
sender looks at the clock once per batch (~4 MiB), not per message. Bandwidth is what the receiver
saw: bytes between the end of the warm-up and the end of the measured phase over that time
(iperf3's "receiver" line).

Ping-pong latency is :mod:`.latency`; sockets, timeouts and sends that keep one deadline per wait
are :mod:`.sockio`; the data connections' set-up is :mod:`.streams`.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TypeVar

from ibdiag.bench.p2p.control.channel import PeerClosedError, peer_closed, socket_error
from ibdiag.bench.p2p.control.sockio import make_send_all, send_rest, set_nodelay
from ibdiag.errors import CannotRunError, IbdiagError

HEADER = struct.Struct("!Q")
#: Bytes per batch of messages: the sender checks the clock once per batch.
BATCH_BYTES = 4 * 2**20
#: Receive buffer per stream, bytes: iperf3's at ``-l 1M`` (4 MiB cost 1.2 x the CPU per GB, see above).
RECV_RING_MAX = 2**20

T = TypeVar("T")


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

    def __init__(
        self,
        streams: int,
        duration_s: float | None,
        timeout_s: float,
        on_start: Callable[[], None] | None = None,
    ) -> None:
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


def send_messages(sock: socket.socket, view: memoryview, count: int, timeout_s: float) -> None:
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


def send_batches(
    sock: socket.socket, view: memoryview, count: int, per_batch: int, timeout_s: float
) -> None:
    send_all = make_send_all(sock, timeout_s)
    pack = HEADER.pack
    while count > 0:
        k = per_batch if count > per_batch else count
        send_all(pack(k))
        send_messages(sock, view, k, timeout_s)
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
        send_batches(sock, view, warmup, per_batch, timeout_s)
        send_all(end)
        window.wait()
        sent = 0
        if iters is not None:
            send_batches(sock, view, iters, per_batch, timeout_s)
            sent = iters
        else:
            deadline = window.deadline
            clock = time.perf_counter
            header = pack(per_batch)
            while clock() < deadline:
                send_all(header)
                send_messages(sock, view, per_batch, timeout_s)
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


def send_jobs(
    socks: Sequence[socket.socket],
    view: memoryview,
    warmup: int,
    iters: int | None,
    window: SendWindow,
    peer: str,
    what_of: Callable[[int], str],
) -> list[Callable[[], StreamStats]]:
    """One :func:`send_stream` job per stream, for :func:`run_parallel`; ``what_of(i)`` names stream ``i``."""
    return [
        partial(
            send_stream,
            s,
            view,
            warmup=warmup,
            iters=iters,
            window=window,
            peer=peer,
            what=what_of(i),
        )
        for i, s in enumerate(socks)
    ]


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
                    raise peer_closed(peer, what)
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
                raise CannotRunError(
                    f"{peer} sent a corrupt batch header ({count} messages)",
                    hint="both sides must run the same ibdiag version",
                )
            remaining = count * size
            while remaining:
                want = ring_len - off
                if remaining < want:
                    want = remaining
                k = ri(ring[off:] if off else ring, want)
                if k == 0:
                    raise peer_closed(peer, what)
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
        except BaseException as e:  # handed to the caller's thread below
            with lock:
                first = not errors
                errors.append(e)
            if first:
                on_error()

    if len(jobs) == 1:
        runner(0, jobs[0])
    else:
        threads = [
            threading.Thread(target=runner, args=(i, job), name=f"ibdiag-stream-{i}", daemon=True)
            for i, job in enumerate(jobs)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    if errors:
        # Prefer an ibdiag error that explains the cause over the echo errors of the other streams.
        primary = next(
            (
                e
                for e in errors
                if isinstance(e, IbdiagError) and not isinstance(e, PeerClosedError)
            ),
            errors[0],
        )
        raise primary
    return results  # type: ignore[return-value]  # no errors: every job filled its slot

"""TCP ping-pong latency: one-way latency = round trip / 2 (``qperf tcp_lat``, ``sockperf ping-pong``).

Ping-pong of ``size``-byte messages with ``TCP_NODELAY`` on the first data connection. Each side waits for the other's message by
busy-polling (``recv_into`` with ``MSG_DONTWAIT``) for up to ``--busy-poll`` microseconds before it
blocks in ``recv``, as perftest polls its completion queue: a blocking receive sleeps and is woken
by the peer's packet, a wake-up that costs more than the whole round trip on a virtual machine.
A side whose spins keep running out (its peer shares its CPU, or the round trip is longer than the
budget) blocks for the rest of the phase (:class:`Spin`). ``--busy-poll 0`` blocks from the start,
as qperf and sockperf do by default.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

from ibdiag.bench.p2p.control.channel import peer_closed, socket_error
from ibdiag.bench.p2p.control.sockio import send_rest

_DONTWAIT = socket.MSG_DONTWAIT
#: Receives per window after which a spinning side looks at how often its spins ran out.
SPIN_WINDOW = 64
#: More spins than this in one window ran out of budget: the side blocks for the rest of the phase.
SPIN_MAX_MISSES = SPIN_WINDOW // 2


class Spin:
    """How one side waits for the peer's next message through one phase: spin, or block.

    Spinning polls ``recv_into(..., MSG_DONTWAIT)`` until the message is there or ``budget_ns`` has
    passed, then blocks. After every :data:`SPIN_WINDOW` receives the side keeps spinning only if at
    most :data:`SPIN_MAX_MISSES` of them ran out of budget: a peer on the same CPU cannot answer
    while this side spins, and a round trip longer than the budget gains nothing from it.
    ``spinning`` after the phase says how the measured receives waited.
    """

    __slots__ = ("budget_ns", "spinning", "misses")

    def __init__(self, budget_ns: int) -> None:
        self.budget_ns = budget_ns
        self.spinning = budget_ns > 0
        self.misses = 0

    def window_done(self) -> None:
        if self.misses > SPIN_MAX_MISSES:
            self.spinning = False
        self.misses = 0


def _spin_recv(ri: Callable[..., int], view: memoryview, size: int, until_ns: int) -> int:
    """``recv_into`` without sleeping until data is there (its count) or the clock passes ``until_ns`` (-1)."""
    clock = time.perf_counter_ns
    while True:
        try:
            return ri(view, size, _DONTWAIT)
        except BlockingIOError:
            if clock() > until_ns:
                return -1


def _finish_recv(
    ri: Callable[..., int], view: memoryview, got: int, size: int, peer: str, what: str
) -> None:
    while got < size:
        k = ri(view[got:], size - got)
        if k == 0:
            raise peer_closed(peer, what)
        got += k


def ping(
    sock: socket.socket,
    send_view: memoryview,
    recv_view: memoryview,
    n: int,
    *,
    peer: str,
    what: str,
    timeout_s: float,
    spin: Spin | None = None,
) -> list[int]:
    """``n`` round trips of ``len(send_view)`` bytes; their times in nanoseconds.

    ``spin``: wait for each answer by busy-polling first (:class:`Spin`); None blocks.
    """
    size = len(send_view)
    recv_view = recv_view[:size]
    samples = [0] * n
    send = sock.send
    ri = sock.recv_into
    clock = time.perf_counter_ns
    sp = spin if spin is not None else Spin(0)
    spinning = sp.spinning
    budget = sp.budget_ns
    try:
        for i in range(n):
            t0 = clock()
            try:
                k = send(send_view)
            except BlockingIOError:
                k = 0
            if k != size:
                send_rest(sock, send_view, k, timeout_s)
            got = _spin_recv(ri, recv_view, size, t0 + budget) if spinning else -1
            if got < 0:
                if spinning:
                    sp.misses += 1
                got = ri(recv_view, size)
            if got != size:
                if got == 0:
                    raise peer_closed(peer, what)
                _finish_recv(ri, recv_view, got, size, peer, what)
            samples[i] = clock() - t0
            if spinning and i % SPIN_WINDOW == SPIN_WINDOW - 1:
                sp.window_done()
                spinning = sp.spinning
    except OSError as e:
        raise socket_error(e, peer, what, timeout_s) from None
    return samples


def pong(
    sock: socket.socket,
    view: memoryview,
    n: int,
    *,
    peer: str,
    what: str,
    timeout_s: float,
    spin: Spin | None = None,
) -> None:
    """Answer ``n`` pings of ``len(view)`` bytes with the same bytes (``spin``: as :func:`ping`)."""
    size = len(view)
    send = sock.send
    ri = sock.recv_into
    clock = time.perf_counter_ns
    sp = spin if spin is not None else Spin(0)
    spinning = sp.spinning
    budget = sp.budget_ns
    try:
        for i in range(n):
            got = _spin_recv(ri, view, size, clock() + budget) if spinning else -1
            if got < 0:
                if spinning:
                    sp.misses += 1
                got = ri(view, size)
            if got != size:
                if got == 0:
                    raise peer_closed(peer, what)
                _finish_recv(ri, view, got, size, peer, what)
            try:
                k = send(view)
            except BlockingIOError:
                k = 0
            if k != size:
                send_rest(sock, view, k, timeout_s)
            if spinning and i % SPIN_WINDOW == SPIN_WINDOW - 1:
                sp.window_done()
                spinning = sp.spinning
    except OSError as e:
        raise socket_error(e, peer, what, timeout_s) from None

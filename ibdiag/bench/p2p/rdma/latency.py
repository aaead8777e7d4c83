"""ibdiag's own RDMA latency loops: WRITE ping-pong (both ends), SEND ping-pong, READ round trips.

Each side marks its messages so the other can tell a fresh answer from an old one (:func:`marker`);
a round trip is timed from the post to the answer's arrival (:func:`_round_trips`). The bandwidth
loop, the receive queue and the data patterns are in :mod:`.loops`.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

from ibdiag.bench.p2p.rdma.loops import _POLLS_PER_CLOCK, POLL_BATCH, Endpoint, Receiver, prepare
from ibdiag.errors import PeerTimeoutError


def marker(i: int) -> int:
    """The value the last byte of the ``i``-th latency message carries: 1..255, never 0."""
    return i % 255 + 1


def lat_signal_interval(tx_depth: int) -> int:
    """Latency: signal every n-th WRITE or SEND; at most n are outstanding, so n <= the send queue
    (half of it, as in the bandwidth loop, and at most 64)."""
    return max(1, min(64, tx_depth // 2))


def _signal_every(ep: Any, signal_every: int | None) -> int:
    return (
        signal_every
        if signal_every is not None
        else lat_signal_interval(int(getattr(ep, "tx_depth", 1)))
    )


class _Patience:
    """The timeout of one wait, started at its first look at the clock: the waits look at it only
    every so many empty spins or polls, so a wait that ends at once never reads the clock."""

    __slots__ = ("timeout_s", "start")

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.start: float | None = None

    def spent(self) -> bool:
        now = time.monotonic()
        if self.start is None:
            self.start = now
            return False
        return now - self.start > self.timeout_s


def _spin_until(view: memoryview, pos: int, value: int, timeout_s: float, what: str) -> None:
    """Wait until ``view[pos] == value`` (the peer's WRITE landed), with the timeout; the latency loops
    spin inline first and call it only for a wait longer than ``_INLINE_SPINS`` spins."""
    patience = _Patience(timeout_s)
    spins = 0
    while view[pos] != value:
        spins += 1
        if spins & 0xFFFF == 0 and patience.spent():
            raise PeerTimeoutError(
                f"no RDMA WRITE from the peer for {timeout_s:g} s while waiting for {what}",
                hint="the peer process died or the path is down",
            )


def _await_completion(
    ep: Endpoint, wr_id: int, timeout_s: float, what: str = "an RDMA work request"
) -> None:
    """Poll until the completion of ``wr_id`` (or a later one) came."""
    poll = ep.poll
    patience = _Patience(timeout_s)
    empty = 0
    while True:
        done = poll(POLL_BATCH)
        if done and max(done) >= wr_id:
            return
        empty += 1
        if empty % _POLLS_PER_CLOCK == 0 and patience.spent():
            raise PeerTimeoutError(
                f"no completion for {what} within {timeout_s:g} s",
                hint="the peer's port or the path is down; check ibdiag counters",
            )


def _poster(ep: Any, wr: Any) -> Callable[[], Any]:
    """A call without arguments that posts ``wr`` as it is (its id not set again): the endpoint's
    ``poster`` (the bare ``ibv_post_send``) where it has one, else ``ep.post(wr, 0)``. For unsignalled
    latency requests, whose id nobody reads; a failure is posted again through ``ep.post``, which raises
    the endpoint's own error."""
    fast = getattr(ep, "poster", None)
    return fast(wr) if fast is not None else functools.partial(ep.post, wr, 0)


#: Spins on the marker byte inside a latency loop before the wait goes to :func:`_spin_until` (which
#: keeps the timeout). The loops spin inline: a call and a ``_Patience`` per wait cost about 2.7 us
#: in the emulated test bed, and the client spins in most round trips (its answer lands about 3 us
#: after its own post returns), so the call sat between the answer's arrival and its detection.
_INLINE_SPINS = 4096


def _schedule(first: int, n: int, every: int) -> tuple[list[int], int]:
    """The marker of each of ``n`` iterations from ``first`` and the index of the first signalled one
    (every ``every``-th, and the last)."""
    return [marker(first + k) for k in range(n)], min(every, n) - 1


def write_lat_initiator(
    ep: Endpoint,
    size: int,
    first: int,
    n: int,
    *,
    timeout_s: float,
    inline: bool = False,
    signal_every: int | None = None,
) -> list[int]:
    """``n`` WRITE ping-pongs starting at iteration ``first``; round trips in ns (the client's side).

    One clock read per round trip, as perftest does: the loop stamps the arrival of each answer, and
    a sample runs from the previous stamp (or, after a signalled request, from after its reaped
    completion) to this one. What runs between a post's return and the next post is kept to a few
    bytecodes: the spin is inline, the markers are computed beforehand, samples after the loop."""
    view = ep.view
    last = size - 1
    mine = ep.send_offset + last
    every = _signal_every(ep, signal_every)
    plain = prepare(ep, "write", size, signaled=False, inline=inline)
    signaled = prepare(ep, "write", size, signaled=True, inline=inline)
    post = ep.post
    post_plain = _poster(ep, plain)
    clock = time.perf_counter_ns
    marks, nxt = _schedule(first, n, every)
    stamps = [0] * n
    resumed: dict[int, int] = {}  # signalled iteration -> the clock after its completion was reaped
    start = clock()
    for k in range(n):
        m = marks[k]
        view[mine] = m
        if k != nxt:
            try:
                post_plain()
            except Exception:  # the endpoint's post raises its own error, with a hint
                post(plain, first + k)
        else:
            post(signaled, first + k)
        if view[last] != m:
            spins = 0
            while view[last] != m:
                spins += 1
                if spins > _INLINE_SPINS:
                    _spin_until(view, last, m, timeout_s, f"the answer to WRITE {first + k}")
                    break
        stamps[k] = clock()
        if k == nxt:
            _await_completion(ep, first + k, timeout_s)
            resumed[k] = clock()
            nxt = min(nxt + every, n - 1)
    return _round_trips(start, stamps, resumed)


def _round_trips(start: int, stamps: list[int], resumed: dict[int, int]) -> list[int]:
    """Each round trip from the loop's stamps: from the previous answer's stamp (the start, for the
    first; after a signalled request, the clock after its completion was reaped) to this answer's."""
    samples = [0] * len(stamps)
    prev = start
    for k, stamp in enumerate(stamps):
        samples[k] = stamp - prev
        prev = resumed.get(k, stamp)
    return samples


def write_lat_responder(
    ep: Endpoint,
    size: int,
    first: int,
    n: int,
    *,
    timeout_s: float,
    inline: bool = False,
    signal_every: int | None = None,
) -> None:
    """Answer ``n`` WRITE pings starting at iteration ``first`` (the server's side); spins inline,
    like :func:`write_lat_initiator`."""
    view = ep.view
    last = size - 1
    mine = ep.send_offset + last
    every = _signal_every(ep, signal_every)
    plain = prepare(ep, "write", size, signaled=False, inline=inline)
    signaled = prepare(ep, "write", size, signaled=True, inline=inline)
    post = ep.post
    post_plain = _poster(ep, plain)
    marks, nxt = _schedule(first, n, every)
    for k in range(n):
        m = marks[k]
        if view[last] != m:
            spins = 0
            while view[last] != m:
                spins += 1
                if spins > _INLINE_SPINS:
                    _spin_until(view, last, m, timeout_s, f"WRITE {first + k} from the client")
                    break
        view[mine] = m
        if k != nxt:
            try:
                post_plain()
            except Exception:  # see write_lat_initiator
                post(plain, first + k)
        else:
            post(signaled, first + k)
            _await_completion(ep, first + k, timeout_s)
            nxt = min(nxt + every, n - 1)


def _await_receive(rx: Receiver, want: int, timeout_s: float, what: str) -> None:
    drain = rx.drain
    patience = _Patience(timeout_s)
    empty = 0
    while rx.received < want:
        if drain():
            continue
        empty += 1
        if empty % _POLLS_PER_CLOCK == 0 and patience.spent():
            raise PeerTimeoutError(
                f"no RDMA SEND from the peer for {timeout_s:g} s while waiting for {what}",
                hint="the peer process died or the path is down",
            )


def send_lat(
    ep: Any,
    rx: Receiver,
    size: int,
    first: int,
    n: int,
    *,
    initiator: bool,
    timeout_s: float,
    inline: bool = False,
    signal_every: int | None = None,
) -> list[int]:
    """``n`` SEND ping-pongs (``ib_send_lat``); ``rx`` keeps receives posted. Round trips in ns on the
    initiator, one clock read per round trip (stamped when the answer arrived, as in
    :func:`write_lat_initiator`); the wait for a receive polls inline before it falls back to
    :func:`_await_receive`, which keeps the timeout."""
    every = _signal_every(ep, signal_every)
    plain = prepare(ep, "send", size, signaled=False, inline=inline)
    signaled = prepare(ep, "send", size, signaled=True, inline=inline)
    post = ep.post
    drain = rx.drain
    clock = time.perf_counter_ns
    stamps = [0] * n
    resumed: dict[int, int] = {}
    nxt = min(every, n) - 1
    start = clock()
    for k in range(n):
        want = rx.received + 1
        if initiator:
            post(signaled if k == nxt else plain, first + k)
        if rx.received < want:
            polls = 0
            while rx.received < want:
                if not drain():
                    polls += 1
                    if polls > _INLINE_SPINS:
                        _await_receive(
                            rx,
                            want,
                            timeout_s,
                            f"the answer to SEND {first + k}"
                            if initiator
                            else f"SEND {first + k} from the client",
                        )
                        break
        if initiator:
            stamps[k] = clock()
        else:
            post(signaled if k == nxt else plain, first + k)
        if k == nxt:
            _await_completion(ep, first + k, timeout_s)
            if initiator:
                resumed[k] = clock()
            nxt = min(nxt + every, n - 1)
    return _round_trips(start, stamps, resumed) if initiator else []


def read_lat(ep: Endpoint, size: int, first: int, n: int, *, timeout_s: float) -> list[int]:
    """``n`` RDMA READs one at a time (``ib_read_lat``); each READ's time in ns, x 2 so that the
    one-way statistics (round trip / 2) report the READ's whole time, as ib_read_lat does."""
    wr = prepare(ep, "read", size, signaled=True)
    post = ep.post
    poll = ep.poll
    clock = time.perf_counter_ns
    samples = [0] * n
    for k in range(n):
        i = first + k
        t0 = clock()
        post(wr, i)
        done = poll(POLL_BATCH)
        if not done or max(done) < i:
            _await_completion(ep, i, timeout_s)
        samples[k] = 2 * (clock() - t0)
    return samples

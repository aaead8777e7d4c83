"""The RDMA loops: bandwidth (WRITE, READ, SEND over one or more queue pairs) and latency ping-pongs.

What perftest's ``ib_{write,read,send}_{bw,lat}`` do, in the same shape:

* bandwidth: the active side keeps up to ``tx_depth`` work requests outstanding on each queue pair
  (``--qps``, perftest ``-q``) and asks for a completion only every ``cq_mod``-th one (selective
  signalling); a completion for work request ``k`` means all earlier ones on the same RC send queue
  completed. The clock is looked at only at signalled boundaries, so the last work request of each
  queue pair is always signalled. Bandwidth = bytes of the measured requests / time from the end of
  the warm-up to the last completion. Work-request ids interleave the queue pairs:
  ``wr_id = seq * qps + qp``. SEND needs receives posted on the other side (:func:`serve_receives`).
* latency: WRITE — each side WRITEs ``size`` bytes into the other's buffer, the last byte carrying an
  iteration marker (1..255); the other side spins on that byte, then answers; one-way = round trip / 2.
  SEND — the same over send/receive (each side keeps one receive posted). READ — the client READs
  ``size`` bytes; the latency is the READ's whole time, as ``ib_read_lat`` reports it.

The loops take any endpoint with ``view``/``send_offset``/``post``/``poll`` and ``prepare`` (or the
older ``prepare_write``), so their logic is tested without a device (tests/test_p2p_support.py).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from ibdiag.errors import PeerTimeoutError


class Endpoint(Protocol):
    view: memoryview
    """The registered buffer: receive half at 0, send half at ``send_offset``."""
    send_offset: int

    def prepare_write(self, length: int, *, signaled: bool) -> Any: ...

    def post(self, wr: Any, wr_id: int) -> None: ...

    def poll(self, max_entries: int = 16) -> list[int]: ...


@dataclass(frozen=True)
class WriteStats:
    messages: int
    bytes: int
    seconds: float


#: Empty CQ polls between two looks at the clock (a deadline check costs ~50 ns, a poll ~0.5 µs).
_POLLS_PER_CLOCK = 1024


def prepare(ep: Any, verb: str, length: int, *, signaled: bool, lane: int = 0, inline: bool = False) -> Any:
    """A reusable work request of ``verb`` on queue pair ``lane`` (endpoints without ``prepare``: WRITE on one QP)."""
    if hasattr(ep, "prepare"):
        return ep.prepare(verb, length, signaled=signaled, lane=lane, inline=inline)
    if verb != "write" or lane or inline:
        raise ValueError(f"this endpoint only does plain WRITEs on one queue pair, not {verb}")
    return ep.prepare_write(length, signaled=signaled)


def _post_and_complete(
    ep: Endpoint,
    wrs: list[tuple[Any, Any]],
    *,
    total: int | None,
    deadline: float | None,
    tx_depth: int,
    cq_mod: int,
    timeout_s: float,
    heartbeat: Callable[[], None] | None,
    heartbeat_s: float,
    idle: Callable[[], None] | None = None,
    verb: str = "write",
) -> int:
    """Post work requests on every queue pair (``total`` in all, or until ``deadline``) keeping ``tx_depth``
    in flight on each; wait for all; returns how many completed. ``idle`` runs whenever nothing completed
    (the receive side of a bidirectional SEND)."""
    lanes = len(wrs)
    clock = time.perf_counter
    posted = [0] * lanes
    completed = [0] * lanes
    # Lane k carries messages k, k + lanes, ...: total // lanes each, the first total % lanes one more.
    stop: list[int | None] = [None if total is None else total // lanes + (1 if k < total % lanes else 0) for k in range(lanes)]
    last_progress = clock()
    next_beat = last_progress + heartbeat_s
    empty = 0
    while True:
        for k in range(lanes):
            plain, signaled = wrs[k]
            while posted[k] - completed[k] < tx_depth and (stop[k] is None or posted[k] < stop[k]):  # type: ignore[operator]
                nxt = posted[k] + 1
                boundary = nxt % cq_mod == 0 or (stop[k] is not None and nxt == stop[k])
                ep.post(signaled if boundary else plain, posted[k] * lanes + k)
                posted[k] = nxt
                if boundary:
                    now = clock()
                    if stop[k] is None and deadline is not None and now >= deadline:
                        # Time is up: every lane ends on its next signalled boundary (this one ends here).
                        stop = [p if s is None and p % cq_mod == 0 else (-(-p // cq_mod) * cq_mod if s is None else s) for p, s in zip(posted, stop, strict=True)]
                    if heartbeat is not None and now >= next_beat:
                        heartbeat()
                        next_beat = now + heartbeat_s
        if all(s is not None and c >= s for s, c in zip(stop, completed, strict=True)):
            return sum(completed)
        done = ep.poll(16)
        if done:
            for w in done:
                k, seq = w % lanes, w // lanes
                completed[k] = max(completed[k], seq + 1)
            empty = 0
            last_progress = clock()
            continue
        if idle is not None:
            idle()
        empty += 1
        if empty % _POLLS_PER_CLOCK == 0:
            now = clock()
            if now - last_progress > timeout_s:
                raise PeerTimeoutError(
                    f"no RDMA {verb.upper()} completion for {timeout_s:g} s ({sum(completed)} of {sum(posted)} completed)",
                    hint="the peer's port or the path is down, or the peer process died; check ibdiag counters on both ends",
                )
            if heartbeat is not None and now >= next_beat:
                heartbeat()
                next_beat = now + heartbeat_s


#: Most bytes between two signalled work requests: the completion timeout counts from one completion
#: to the next, so on a slow link (Soft-RoCE under emulation moves ~15 MB/s) 64 unsignalled 4 MiB
#: WRITEs would look like a dead peer. 1 MiB keeps a completion at least every ~70 ms there.
SIGNAL_BYTES = 2**20


def signal_interval(tx_depth: int, size: int = 1) -> int:
    """Signal every ``cq_mod``-th request: half the send queue (so one signalled batch is always in
    flight), and at least every :data:`SIGNAL_BYTES` bytes."""
    return max(1, min(tx_depth // 2, SIGNAL_BYTES // max(1, size)))


def write_bw(
    ep: Endpoint,
    size: int,
    *,
    warmup: int,
    iters: int | None,
    duration_s: float | None,
    tx_depth: int,
    timeout_s: float,
    on_measure_start: Callable[[], None] | None = None,
    heartbeat: Callable[[], None] | None = None,
    heartbeat_s: float | None = None,
    verb: str = "write",
    lanes: int = 1,
    inline: bool = False,
    idle: Callable[[], None] | None = None,
) -> WriteStats:
    """``verb`` bandwidth of ``size``-byte messages over ``lanes`` queue pairs (``ib_write_bw -s size -q lanes``).

    ``heartbeat`` is called every ``heartbeat_s`` (default: a third of the timeout, at least 1 s) so
    a passive peer, which only waits on the control channel, knows this side is alive.
    """
    if iters is None and duration_s is None:
        raise ValueError("iters or duration_s")
    cq_mod = signal_interval(tx_depth, size)
    wrs = [(prepare(ep, verb, size, signaled=False, lane=k, inline=inline), prepare(ep, verb, size, signaled=True, lane=k, inline=inline)) for k in range(lanes)]
    beat = heartbeat_s if heartbeat_s is not None else max(1.0, timeout_s / 3)
    kw: dict[str, Any] = dict(tx_depth=tx_depth, cq_mod=cq_mod, timeout_s=timeout_s, heartbeat=heartbeat, heartbeat_s=beat, idle=idle, verb=verb)
    if warmup:
        _post_and_complete(ep, wrs, total=warmup, deadline=None, **kw)
    if on_measure_start is not None:
        on_measure_start()
    t0 = time.perf_counter()
    deadline = None if duration_s is None else t0 + duration_s
    n = _post_and_complete(ep, wrs, total=iters, deadline=deadline, **kw)
    t1 = time.perf_counter()
    return WriteStats(messages=n, bytes=n * size, seconds=t1 - t0)


class Receiver:
    """The receive side of SEND: keeps ``depth`` receives posted on every queue pair and counts arrivals."""

    def __init__(self, ep: Any, lanes: int, depth: int) -> None:
        self.ep = ep
        self.lanes = lanes
        self.received = 0
        self.bytes = 0
        self._next = [0] * lanes
        for k in range(lanes):
            for _ in range(depth):
                self._post(k)

    def _post(self, k: int) -> None:
        self.ep.post_recv(k, self._next[k] * self.lanes + k)
        self._next[k] += 1

    def drain(self) -> int:
        """Count completed receives and post one again for each; returns how many arrived now."""
        done = self.ep.poll_recv(16)
        for wr_id, nbytes in done:
            self.received += 1
            self.bytes += nbytes
            self._post(wr_id % self.lanes)
        return len(done)


def serve_receives(rx: Receiver, expected: Callable[[], int | None], *, timeout_s: float) -> None:
    """Receive until ``expected()`` (polled now and then; None while unknown) messages have arrived."""
    clock = time.monotonic
    last_progress = clock()
    empty = 0
    want: int | None = None
    while want is None or rx.received < want:
        if rx.drain():
            empty = 0
            last_progress = clock()
            continue
        empty += 1
        if empty % 256 == 0:
            if want is None:
                want = expected()
            if clock() - last_progress > timeout_s:
                raise PeerTimeoutError(f"no RDMA SEND arrived for {timeout_s:g} s ({rx.received} received)", hint="the peer process died or the path is down")


def marker(i: int) -> int:
    """The value the last byte of the ``i``-th latency message carries: 1..255, never 0."""
    return i % 255 + 1


def _spin_until(view: memoryview, pos: int, value: int, timeout_s: float, what: str) -> None:
    clock = time.monotonic
    start = None
    spins = 0
    while view[pos] != value:
        spins += 1
        if spins & 0xFFFF == 0:
            now = clock()
            if start is None:
                start = now
            elif now - start > timeout_s:
                raise PeerTimeoutError(f"no RDMA WRITE from the peer for {timeout_s:g} s while waiting for {what}", hint="the peer process died or the path is down")


def _await(poll: Callable[[], list[Any]], done: Callable[[list[Any]], bool], timeout_s: float, what: str) -> None:
    clock = time.monotonic
    start = clock()
    empty = 0
    while True:
        got = poll()
        if got and done(got):
            return
        empty += 1
        if empty % _POLLS_PER_CLOCK == 0 and clock() - start > timeout_s:
            raise PeerTimeoutError(f"no completion for {what} within {timeout_s:g} s", hint="the peer's port or the path is down; check ibdiag counters")


def _await_completion(ep: Endpoint, wr_id: int, timeout_s: float) -> None:
    _await(lambda: ep.poll(16), lambda d: max(d) >= wr_id, timeout_s, "an RDMA work request")


def write_lat_initiator(ep: Endpoint, size: int, first: int, n: int, *, timeout_s: float, inline: bool = False) -> list[int]:
    """``n`` WRITE ping-pongs starting at iteration ``first``; round trips in ns (the client's side)."""
    view = ep.view
    send_offset = ep.send_offset
    last = size - 1
    wr = prepare(ep, "write", size, signaled=True, inline=inline)
    clock = time.perf_counter_ns
    samples = [0] * n
    for k in range(n):
        i = first + k
        m = marker(i)
        view[send_offset + last] = m
        t0 = clock()
        ep.post(wr, i)
        _spin_until(view, last, m, timeout_s, f"the answer to WRITE {i}")
        samples[k] = clock() - t0
        _await_completion(ep, i, timeout_s)
    return samples


def write_lat_responder(ep: Endpoint, size: int, first: int, n: int, *, timeout_s: float, inline: bool = False) -> None:
    """Answer ``n`` WRITE pings starting at iteration ``first`` (the server's side)."""
    view = ep.view
    send_offset = ep.send_offset
    last = size - 1
    wr = prepare(ep, "write", size, signaled=True, inline=inline)
    for k in range(n):
        i = first + k
        m = marker(i)
        _spin_until(view, last, m, timeout_s, f"WRITE {i} from the client")
        view[send_offset + last] = m
        ep.post(wr, i)
        _await_completion(ep, i, timeout_s)


def _await_receive(rx: Receiver, want: int, timeout_s: float, what: str) -> None:
    clock = time.monotonic
    start = clock()
    empty = 0
    while rx.received < want:
        if rx.drain():
            continue
        empty += 1
        if empty % _POLLS_PER_CLOCK == 0 and clock() - start > timeout_s:
            raise PeerTimeoutError(f"no RDMA SEND from the peer for {timeout_s:g} s while waiting for {what}", hint="the peer process died or the path is down")


def send_lat(ep: Any, rx: Receiver, size: int, first: int, n: int, *, initiator: bool, timeout_s: float, inline: bool = False) -> list[int]:
    """``n`` SEND ping-pongs (``ib_send_lat``); ``rx`` keeps receives posted. Round trips in ns on the initiator."""
    wr = prepare(ep, "send", size, signaled=True, inline=inline)
    clock = time.perf_counter_ns
    samples = [0] * n if initiator else []
    for k in range(n):
        i = first + k
        want = rx.received + 1
        if initiator:
            t0 = clock()
            ep.post(wr, i)
            _await_receive(rx, want, timeout_s, f"the answer to SEND {i}")
            samples[k] = clock() - t0
        else:
            _await_receive(rx, want, timeout_s, f"SEND {i} from the client")
            ep.post(wr, i)
        _await_completion(ep, i, timeout_s)
    return samples


def read_lat(ep: Endpoint, size: int, first: int, n: int, *, timeout_s: float) -> list[int]:
    """``n`` RDMA READs one at a time (``ib_read_lat``); each READ's time in ns, x 2 so that the
    one-way statistics (round trip / 2) report the READ's whole time, as ib_read_lat does."""
    wr = prepare(ep, "read", size, signaled=True)
    clock = time.perf_counter_ns
    samples = [0] * n
    for k in range(n):
        i = first + k
        t0 = clock()
        ep.post(wr, i)
        _await_completion(ep, i, timeout_s)
        samples[k] = 2 * (clock() - t0)
    return samples


def reset_areas(view: memoryview, size: int, send_offset: int) -> None:
    """Zero the first ``size`` bytes of the receive and send halves before a latency phase."""
    zeros = bytes(size)
    view[0:size] = zeros
    view[send_offset : send_offset + size] = zeros


@functools.lru_cache(maxsize=2)
def _block(direction: str) -> bytes:
    salt = 0x5A if direction == "c2s" else 0xA5
    return bytes(((i * 131) ^ salt ^ (i >> 8)) & 0xFF for i in range(4096))


def pattern(size: int, direction: str) -> bytes:
    """The bytes a bandwidth phase moves in ``direction`` (``c2s``, ``s2c``): both ends know them, so the
    receiver checks what arrived without a second transfer."""
    block = _block(direction)
    return (block * (size // 4096 + 1))[:size]


def fill_pattern(view: memoryview, offset: int, size: int, direction: str) -> None:
    view[offset : offset + size] = pattern(size, direction)


def check_pattern(view: memoryview, offset: int, size: int, direction: str) -> bool:
    """Did the ``size`` bytes at ``offset`` arrive as sent?"""
    return bytes(view[offset : offset + size]) == pattern(size, direction)


"""The RDMA loops: bandwidth (WRITE, READ, SEND over one or more queue pairs); the latency ping-pongs
are :mod:`.latency`'s.

What perftest's ``ib_{write,read,send}_{bw,lat}`` do, in the same shape:

* bandwidth: the active side keeps up to ``tx_depth`` work requests outstanding on each queue pair
  (``--qps``, perftest ``-q``), posted as post lists: chains of ``cq_mod`` linked work requests, one
  ``ibv_post_send`` per chain, of which only the last asks for a completion (selective signalling,
  ``sq_sig_all = 0``); a completion for work request ``k`` means all earlier ones on the same RC send
  queue completed. Every chain ends on a signalled request, so the clock (looked at once per chain)
  can end a duration run on any queue pair at once. Bandwidth = bytes of the measured requests / time
  from the end of the warm-up to the last completion. Work-request ids interleave the queue pairs:
  ``wr_id = seq * qps + qp`` (a chain carries the id of its last request). SEND needs receives posted
  on the other side (:class:`Receiver`, which re-posts what arrived as one post list per queue pair).
* latency: WRITE — each side WRITEs ``size`` bytes into the other's buffer, the last byte carrying an
  iteration marker (1..255); the other side spins on that byte, then answers; one-way = round trip / 2.
  Only every :func:`lat_signal_interval`-th WRITE asks for a completion, reaped after the answer came,
  so the CQ is polled once per batch. SEND — the same over send/receive (each side keeps receives
  posted; arrival is a receive completion). READ — the client READs ``size`` bytes; the latency is the
  READ's whole time (each READ signalled), as ``ib_read_lat`` reports it.

No Python object is made per message in the bandwidth loop (posted/completed counts, prebuilt chains);
the latency loops make none but the int of each sample. The loops take any endpoint with
``view``/``send_offset``/``prepare``/``prepare_chain``/``post``/``poll`` (and ``post_recv``/``poll_recv``
for SEND), so their logic is tested without a device (tests/support/p2p.py, a named stand-in).
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

    def prepare(
        self, verb: str, length: int, *, signaled: bool, lane: int = 0, inline: bool = False
    ) -> Any:
        """One reusable work request."""
        ...

    def prepare_chain(
        self, verb: str, length: int, count: int, *, lane: int = 0, inline: bool = False
    ) -> Any:
        """``count`` linked work requests (a post list), only the last one signalled."""
        ...

    def post(self, wr: Any, wr_id: int) -> None:
        """One ``ibv_post_send`` of a request or a chain; ``wr_id`` tags its (last) request."""
        ...

    def poll(self, max_entries: int = 16) -> list[int]: ...


@dataclass(frozen=True)
class WriteStats:
    messages: int
    bytes: int
    seconds: float


#: Empty CQ polls between two looks at the clock (a deadline check costs ~50 ns, a poll ~0.5 µs).
_POLLS_PER_CLOCK = 1024

#: Completions one poll may return (``ibv_poll_cq``'s ``num_entries``; perftest polls up to 16). With
#: selective signalling there are at most ``2 * qps`` outstanding signalled requests.
POLL_BATCH = 32


def prepare(
    ep: Any, verb: str, length: int, *, signaled: bool, lane: int = 0, inline: bool = False
) -> Any:
    """A reusable work request of ``verb`` on queue pair ``lane``."""
    return ep.prepare(verb, length, signaled=signaled, lane=lane, inline=inline)


def _lane_quotas(total: int, lanes: int) -> list[int]:
    """Lane k carries messages k, k + lanes, ...: total // lanes each, the first total % lanes one more."""
    return [total // lanes + (1 if k < total % lanes else 0) for k in range(lanes)]


def _no_completion(
    verb: str, timeout_s: float, completed: list[int], posted: list[int]
) -> PeerTimeoutError:
    return PeerTimeoutError(
        f"no RDMA {verb.upper()} completion for {timeout_s:g} s ({sum(completed)} of {sum(posted)} completed)",
        hint="the peer's port or the path is down, or the peer process died; check ibdiag counters on both ends",
    )


def _account(done: list[int], completed: list[int], lanes: int) -> None:
    """Completions of several queue pairs: ``wr_id = seq * lanes + lane``; each lane's count only grows."""
    for w in done:
        k = w % lanes
        seq = w // lanes + 1
        if seq > completed[k]:
            completed[k] = seq


def _post_and_complete(
    ep: Endpoint,
    chains: list[Any],
    *,
    size: int,
    total: int | None,
    deadline: float | None,
    tx_depth: int,
    cq_mod: int,
    timeout_s: float,
    heartbeat: Callable[[], None] | None,
    heartbeat_s: float,
    idle: Callable[[], None] | None = None,
    verb: str = "write",
    inline: bool = False,
) -> int:
    """Post chains of ``cq_mod`` work requests on every queue pair (``total`` requests in all, or until
    ``deadline``) keeping at most ``tx_depth`` in flight on each; wait for all; returns how many completed.
    ``chains[k]`` is queue pair ``k``'s prepared chain. ``idle`` runs whenever a poll found nothing (the
    receive side of a bidirectional SEND)."""
    lanes = len(chains)
    clock = time.perf_counter
    post = ep.post
    poll = ep.poll
    posted = [0] * lanes
    completed = [0] * lanes
    stop = None if total is None else _lane_quotas(total, lanes)
    # a chain is posted while at most this many are in flight on its queue pair
    room = tx_depth - cq_mod
    last_progress = clock()
    next_beat = last_progress + heartbeat_s
    empty = 0
    while True:
        for k in range(lanes):
            p = posted[k]
            while p - completed[k] <= room:
                if stop is None:
                    n = cq_mod
                else:
                    n = stop[k] - p
                    if n <= 0:
                        break
                p += n if n < cq_mod else cq_mod
                # only the run's last chain of a queue pair can be shorter: built once, here
                post(
                    chains[k]
                    if n >= cq_mod
                    else ep.prepare_chain(verb, size, n, lane=k, inline=inline),
                    (p - 1) * lanes + k,
                )
                posted[k] = p
                now = clock()
                if stop is None and deadline is not None and now >= deadline:
                    # Time is up: every queue pair ends on the chain it posted last (all end signalled).
                    stop = list(posted)
                    stop[k] = p
                if heartbeat is not None and now >= next_beat:
                    heartbeat()
                    next_beat = now + heartbeat_s
        if stop is not None and completed == stop:
            return sum(completed)
        done = poll(POLL_BATCH)
        if done:
            if lanes == 1:
                completed[0] = max(completed[0], max(done) + 1)
            else:
                _account(done, completed, lanes)
            empty = 0
            last_progress = clock()
            continue
        if idle is not None:
            idle()
        empty += 1
        if empty % _POLLS_PER_CLOCK == 0:
            now = clock()
            if now - last_progress > timeout_s:
                raise _no_completion(verb, timeout_s, completed, posted)
            if heartbeat is not None and now >= next_beat:
                heartbeat()
                next_beat = now + heartbeat_s


#: Most bytes between two signalled work requests: the completion timeout counts from one completion
#: to the next, so on a slow link (Soft-RoCE under emulation moves ~15 MB/s) 64 unsignalled 4 MiB
#: WRITEs would look like a dead peer. 1 MiB keeps a completion at least every ~70 ms there.
SIGNAL_BYTES = 2**20


def signal_interval(tx_depth: int, size: int = 1) -> int:
    """Signal every ``cq_mod``-th request (the length of a chain): half the send queue (so one
    signalled chain is always in flight while the next is posted), and at least every
    :data:`SIGNAL_BYTES` bytes."""
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
    chains = [ep.prepare_chain(verb, size, cq_mod, lane=k, inline=inline) for k in range(lanes)]
    beat = heartbeat_s if heartbeat_s is not None else max(1.0, timeout_s / 3)
    kw: dict[str, Any] = dict(
        size=size,
        tx_depth=tx_depth,
        cq_mod=cq_mod,
        timeout_s=timeout_s,
        heartbeat=heartbeat,
        heartbeat_s=beat,
        idle=idle,
        verb=verb,
        inline=inline,
    )
    if warmup:
        _post_and_complete(ep, chains, total=warmup, deadline=None, **kw)
    if on_measure_start is not None:
        on_measure_start()
    t0 = time.perf_counter()
    deadline = None if duration_s is None else t0 + duration_s
    n = _post_and_complete(ep, chains, total=iters, deadline=deadline, **kw)
    t1 = time.perf_counter()
    return WriteStats(messages=n, bytes=n * size, seconds=t1 - t0)


class Receiver:
    """The receive side of SEND: keeps ``depth`` receives posted on every queue pair and counts arrivals.

    What arrived in one poll is re-posted as one post list per queue pair (``post_recv(lane, id, count)``);
    every receive of queue pair ``k`` carries ``wr_id = k``."""

    def __init__(self, ep: Any, lanes: int, depth: int) -> None:
        self.ep = ep
        self.lanes = lanes
        self.received = 0
        self.bytes = 0
        self._again = [0] * lanes
        for k in range(lanes):
            ep.post_recv(k, k, depth)

    def drain(self) -> int:
        """Count completed receives and post as many again on their queue pairs; returns how many arrived now."""
        done = self.ep.poll_recv(POLL_BATCH)
        if not done:
            return 0
        n = len(done)
        self.received += n
        if self.lanes == 1:
            self.bytes += sum(b for _, b in done)
            self.ep.post_recv(0, 0, n)
            return n
        again = self._again
        for wr_id, nbytes in done:
            self.bytes += nbytes
            again[wr_id % self.lanes] += 1
        for k, c in enumerate(again):
            if c:
                self.ep.post_recv(k, k, c)
                again[k] = 0
        return n


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
                raise PeerTimeoutError(
                    f"no RDMA SEND arrived for {timeout_s:g} s ({rx.received} received)",
                    hint="the peer process died or the path is down",
                )


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

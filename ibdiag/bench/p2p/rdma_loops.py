"""The RDMA WRITE loops: bandwidth (``ib_write_bw``) and ping-pong latency (``ib_write_lat``).

* bandwidth: the client keeps up to ``tx_depth`` WRITEs outstanding, posted as chains of
  ``cq_mod`` linked work requests (one ``ibv_post_send`` per chain, a post list) of which only the
  last asks for a completion (selective signalling, ``sq_sig_all = 0``); a completion for work
  request ``k`` means all earlier ones on the same RC send queue completed. The clock is looked at
  only at chain boundaries, so the last WRITE of a duration run is always signalled. Bandwidth =
  bytes of the measured WRITEs / time from the end of the warm-up to the last completion.
* latency: each side WRITEs ``size`` bytes into the other's buffer, the last byte carrying an
  iteration marker (1..255); the other side spins on that byte, then answers. One-way = round
  trip / 2. Only every ``signal_every``-th WRITE is signalled, and its completion is reaped after
  the answer arrived, so the loop polls the CQ once per batch, not once per message (perftest does
  the same).

The loops take any endpoint with ``prepare_write``/``prepare_chain``/``post``/``poll``/``view``, so
their logic is tested without a device; no Python object is created per message in either loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from ibdiag.errors import PeerTimeoutError

#: Most bytes between two signalled WRITEs: the completion timeout counts from one completion to
#: the next, so on a slow link (Soft-RoCE under emulation moves ~15 MB/s) 64 unsignalled 4 MiB
#: WRITEs would look like a dead peer. 1 MiB keeps a completion at least every ~70 ms there.
SIGNAL_BYTES = 2**20


def signal_interval(tx_depth: int, size: int = 1) -> int:
    """Signal every ``cq_mod``-th WRITE: half the send queue (so one signalled batch is always in
    flight), and at least every :data:`SIGNAL_BYTES` bytes."""
    return max(1, min(tx_depth // 2, SIGNAL_BYTES // max(1, size)))


class Endpoint(Protocol):
    view: memoryview
    """The registered buffer: receive half at 0, send half at ``send_offset``."""
    send_offset: int

    def prepare_write(self, length: int, *, signaled: bool) -> Any: ...

    def prepare_chain(self, length: int, count: int) -> Any:
        """``count`` linked WRITEs of ``length`` bytes, only the last one signalled."""
        ...

    def post(self, wr: Any, wr_id: int) -> None:
        """Post a WRITE or a chain; ``wr_id`` tags its (last) work request."""
        ...

    def poll(self, max_entries: int = 16) -> list[int]: ...


@dataclass(frozen=True)
class WriteStats:
    messages: int
    bytes: int
    seconds: float


#: Empty CQ polls between two looks at the clock (a deadline check costs ~50 ns, a poll ~0.5 µs).
_POLLS_PER_CLOCK = 1024


def _post_and_complete(
    ep: Endpoint,
    size: int,
    chain: Any,
    *,
    total: int | None,
    deadline: float | None,
    tx_depth: int,
    cq_mod: int,
    timeout_s: float,
    heartbeat: Callable[[], None] | None,
    heartbeat_s: float,
) -> int:
    """Post chains of ``cq_mod`` WRITEs (``total`` WRITEs, or until ``deadline``) keeping at most
    ``tx_depth`` in flight; wait for all. ``chain`` is the prepared chain of ``cq_mod``."""
    clock = time.perf_counter
    post = ep.post
    poll = ep.poll
    posted = 0
    completed = 0
    stop = total
    last_progress = clock()
    next_beat = last_progress + heartbeat_s
    empty = 0
    while True:
        while posted - completed + cq_mod <= tx_depth and (stop is None or posted < stop):
            n = cq_mod if stop is None else min(cq_mod, stop - posted)
            posted += n
            # only the run's last chain can be shorter: it is built once, here
            post(chain if n == cq_mod else ep.prepare_chain(size, n), posted - 1)
            now = clock()
            if stop is None and deadline is not None and now >= deadline:
                stop = posted
            if heartbeat is not None and now >= next_beat:
                heartbeat()
                next_beat = now + heartbeat_s
        if stop is not None and completed >= stop:
            return completed
        done = poll(16)
        if done:
            completed = max(completed, max(done) + 1)
            empty = 0
            last_progress = clock()
            continue
        empty += 1
        if empty % _POLLS_PER_CLOCK == 0:
            now = clock()
            if now - last_progress > timeout_s:
                raise PeerTimeoutError(
                    f"no RDMA WRITE completion for {timeout_s:g} s ({completed} of {posted} completed)",
                    hint="the peer's port or the path is down, or the peer process died; check ibdiag counters on both ends",
                )
            if heartbeat is not None and now >= next_beat:
                heartbeat()
                next_beat = now + heartbeat_s


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
) -> WriteStats:
    """RDMA WRITE bandwidth of ``size``-byte messages (``ib_write_bw -s size``).

    ``heartbeat`` is called every ``heartbeat_s`` (default: a third of the timeout, at least 1 s) so
    the passive side, which only waits on the control channel, knows the client is alive.
    """
    if iters is None and duration_s is None:
        raise ValueError("iters or duration_s")
    cq_mod = signal_interval(tx_depth, size)
    chain = ep.prepare_chain(size, cq_mod)
    beat = heartbeat_s if heartbeat_s is not None else max(1.0, timeout_s / 3)
    kw: dict[str, Any] = {"tx_depth": tx_depth, "cq_mod": cq_mod, "timeout_s": timeout_s, "heartbeat": heartbeat, "heartbeat_s": beat}
    if warmup:
        _post_and_complete(ep, size, chain, total=warmup, deadline=None, **kw)
    if on_measure_start is not None:
        on_measure_start()
    t0 = time.perf_counter()
    deadline = None if duration_s is None else t0 + duration_s
    n = _post_and_complete(ep, size, chain, total=iters, deadline=deadline, **kw)
    t1 = time.perf_counter()
    return WriteStats(messages=n, bytes=n * size, seconds=t1 - t0)


def marker(i: int) -> int:
    """The value the last byte of the ``i``-th latency message carries: 1..255, never 0."""
    return i % 255 + 1


#: Spins on the marker byte between two looks at the clock.
_SPINS_PER_CLOCK = 0xFFFF


def _spin(view: memoryview, pos: int, value: int, timeout_s: float, what: str, i: int) -> None:
    """Wait until ``view[pos] == value`` (the peer's WRITE landed); called only when it has not yet,
    so the call costs nothing on the measured path. ``what`` names the wait, with ``{}`` for ``i``."""
    spins = 0
    start = None
    while view[pos] != value:
        spins += 1
        if spins & _SPINS_PER_CLOCK == 0:
            now = time.monotonic()
            if start is None:
                start = now
            elif now - start > timeout_s:
                raise PeerTimeoutError(f"no RDMA WRITE from the peer for {timeout_s:g} s while waiting for {what.format(i)}", hint="the peer process died or the path is down")


def _await_completion(ep: Endpoint, wr_id: int, timeout_s: float) -> None:
    clock = time.monotonic
    start = clock()
    empty = 0
    while True:
        done = ep.poll(16)
        if done and max(done) >= wr_id:
            return
        empty += 1
        if empty % _POLLS_PER_CLOCK == 0 and clock() - start > timeout_s:
            raise PeerTimeoutError(f"no completion for an RDMA WRITE within {timeout_s:g} s", hint="the peer's port or the path is down; check ibdiag counters")


def lat_signal_interval(tx_depth: int) -> int:
    """Latency: signal every n-th WRITE; at most n are outstanding, so n <= the send queue."""
    return max(1, min(64, tx_depth // 2))


def write_lat_initiator(ep: Endpoint, size: int, first: int, n: int, *, timeout_s: float, signal_every: int = 1) -> list[int]:
    """``n`` WRITE ping-pongs starting at iteration ``first``; round trips in ns (the client's side)."""
    view = ep.view
    last = size - 1
    mine = ep.send_offset + last
    plain = ep.prepare_write(size, signaled=False)
    signaled = ep.prepare_write(size, signaled=True)
    post = ep.post
    clock = time.perf_counter_ns
    samples = [0] * n
    end = n - 1
    for k in range(n):
        i = first + k
        m = i % 255 + 1
        view[mine] = m
        sig = k % signal_every == signal_every - 1 or k == end
        t0 = clock()
        post(signaled if sig else plain, i)
        if view[last] != m:
            _spin(view, last, m, timeout_s, "the answer to WRITE {}", i)
        samples[k] = clock() - t0
        if sig:
            _await_completion(ep, i, timeout_s)
    return samples


def write_lat_responder(ep: Endpoint, size: int, first: int, n: int, *, timeout_s: float, signal_every: int = 1) -> None:
    """Answer ``n`` WRITE pings starting at iteration ``first`` (the server's side)."""
    view = ep.view
    last = size - 1
    mine = ep.send_offset + last
    plain = ep.prepare_write(size, signaled=False)
    signaled = ep.prepare_write(size, signaled=True)
    post = ep.post
    end = n - 1
    for k in range(n):
        i = first + k
        m = i % 255 + 1
        if view[last] != m:
            _spin(view, last, m, timeout_s, "WRITE {} from the client", i)
        view[mine] = m
        sig = k % signal_every == signal_every - 1 or k == end
        post(signaled if sig else plain, i)
        if sig:
            _await_completion(ep, i, timeout_s)


def reset_areas(view: memoryview, size: int, send_offset: int) -> None:
    """Zero the first ``size`` bytes of the receive and send halves before a latency phase."""
    zeros = bytes(size)
    view[0:size] = zeros
    view[send_offset : send_offset + size] = zeros

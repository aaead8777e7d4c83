"""The RDMA loops: bandwidth (WRITE, READ, SEND over one or more queue pairs) and latency ping-pongs.

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
    # Lane k carries messages k, k + lanes, ...: total // lanes each, the first total % lanes one more.
    stop: list[int] | None = (
        None
        if total is None
        else [total // lanes + (1 if k < total % lanes else 0) for k in range(lanes)]
    )
    room = (
        tx_depth - cq_mod
    )  # a chain is posted while at most this many are in flight on its queue pair
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
                for w in done:
                    k = w % lanes
                    seq = w // lanes + 1
                    if seq > completed[k]:
                        completed[k] = seq
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
            except Exception:  # noqa: BLE001 - the endpoint's post raises its own error, with a hint
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
            except Exception:  # noqa: BLE001 - see write_lat_initiator
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

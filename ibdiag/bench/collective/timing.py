"""The timed loop of one size, and the two bounds it keeps: the queue depth and the per-call times kept.

Queue depth. NCCL's watchdog times a collective from when it was *enqueued*, not from when the GPU starts
it: queueing all ``--iters`` calls at once makes call N wait N calls' time before it even starts, so a
healthy long run (many iterations of a large size) can exceed the process-group timeout and be killed
as hung. The loop therefore keeps at most :func:`queue_depth` calls queued ahead of the oldest
unfinished one (it waits for call ``i - depth`` before enqueueing call ``i``): a sliding window that keeps
the GPU busy (the next calls are already queued when one ends) while no call waits in the queue longer
than :data:`QUEUE_SHARE` of the timeout. The depth comes from the warm-up calls' time; without warm-up
calls it is 1.

Per-call times kept. The straggler analysis compares ranks call by call, so every rank sends rank 0 its
in-collective time of each timed call. To keep what rank 0 receives bounded at thousands of ranks and
long runs, at most :func:`calls_kept` calls per step are sent (evenly spaced, the same calls on every
rank), so that ranks x steps x calls stays under :data:`MAX_GATHERED_CALL_TIMES`; each rank's mean over
all its calls is sent as well.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

QUEUE_SHARE = 0.25
"""No queued call waits longer than this share of the process-group timeout before it starts."""
MAX_GATHERED_CALL_TIMES = 1 << 21
"""At most this many per-call times (ranks x steps x calls) reach rank 0: 2 Mi values, ~18 MB pickled."""


def queue_depth(iters: int, call_s: float | None, pg_timeout_s: float) -> int:
    """How many calls may be queued ahead of the oldest unfinished one (1 = wait for each before the next)."""
    if iters < 1:
        return 1
    if call_s is None or not math.isfinite(call_s) or call_s <= 0:
        return 1
    return max(1, min(iters, int(QUEUE_SHARE * pg_timeout_s / call_s)))


def calls_kept(iters: int, world: int, steps: int) -> int:
    """How many of a step's ``iters`` per-call times each rank sends to rank 0."""
    budget = MAX_GATHERED_CALL_TIMES // max(1, world * steps)
    return max(1, min(iters, budget))


def kept_indices(iters: int, keep: int) -> tuple[int, ...]:
    """``keep`` call indices spread evenly over ``iters`` (the same on every rank)."""
    if keep >= iters:
        return tuple(range(iters))
    return tuple(sorted({(i * iters) // keep for i in range(keep)}))


def wait_events(events: Sequence[Any], timeout_s: float, beat: Callable[[], None]) -> None:
    """Wait for (polled) events in order, each bounded by ``timeout_s`` since the previous one completed:
    a blocking synchronize could wait forever on a stuck collective."""
    deadline = time.monotonic() + timeout_s
    for ev in events:
        while not ev.query():
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out waiting {timeout_s:g} s for the GPU")
            time.sleep(0.0002)
        deadline = time.monotonic() + timeout_s
        beat()


def warmup_queued(
    device: Any, call: Callable[[], Any], n: int, timeout_s: float, beat: Callable[[], None]
) -> float | None:
    """Run ``n`` untimed calls one at a time; the median time of one call (s), None without calls."""
    times: list[float] = []
    for _ in range(n):
        start, end = device.event(), device.event()
        start.record()
        call()
        end.record()
        wait_events([end], timeout_s, beat)
        times.append(float(start.elapsed_time(end)) / 1e3)
    if not times:
        return None
    kept = sorted(times[1:] or times)  # the first call may include lazy set-up
    return kept[len(kept) // 2]


def timed_queued(
    device: Any,
    call: Callable[[], Any],
    iters: int,
    depth: int,
    *,
    blocking: bool,
    barrier: Callable[[], Any],
    before: Callable[[], None],
    timeout_s: float,
    beat: Callable[[], None],
) -> tuple[float, list[float]]:
    """(time per call, in-collective time of each call), µs, from events on a device with a stream."""
    first, last = device.event(), device.event()
    starts = [device.event() for _ in range(iters)]
    ends = [device.event() for _ in range(iters)]
    first.record()
    for i in range(iters):
        if i >= depth:
            wait_events(
                [ends[i - depth]], timeout_s, beat
            )  # the window: call i waits for call i - depth
        before()
        starts[i].record()
        call()
        ends[i].record()
        if blocking:
            wait_events([ends[i]], timeout_s, beat)
            barrier()
    last.record()
    wait_events([*ends[max(0, iters - depth) :], last], timeout_s, beat)
    total_ms = first.elapsed_time(last)
    return total_ms * 1e3 / iters, [
        s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends, strict=False)
    ]


def timed_host(
    call: Callable[[], Any],
    iters: int,
    *,
    blocking: bool,
    barrier: Callable[[], Any],
    before: Callable[[], None],
    beat: Callable[[], None],
) -> tuple[float, list[float]]:
    """The same with the host timer (gloo calls return when done)."""
    per_call = []
    t0 = time.perf_counter()
    for _ in range(iters):
        before()
        c0 = time.perf_counter()
        call()
        per_call.append((time.perf_counter() - c0) * 1e6)
        if blocking:
            barrier()
        beat()
    return (time.perf_counter() - t0) * 1e6 / iters, per_call

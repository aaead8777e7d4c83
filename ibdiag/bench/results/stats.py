"""Arithmetic every benchmark shares: percentiles, latency statistics, rates and CPU accounting.

Pure functions plus one tiny stateful helper (:class:`CpuMeter`); no printing, no sockets.

Units: bandwidth in GB/s (1e9 B/s, as nccl-tests and DESIGN.md), message rate in Mpps (perftest's
``MsgRate[Mpps]`` = messages per second / 1e6), latency in microseconds, CPU in seconds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ibdiag.bench.results.model import LatencyStats


def percentile_sorted(values: Sequence[float], p: float) -> float:
    """The ``p``-th percentile (0..100) of ascending ``values`` by the nearest-rank method.

    Nearest rank (``ceil(p/100 * n)``-th smallest) always returns a measured sample, never an
    interpolation, like perftest's ``99% percentile`` column (it indexes its sorted cycle deltas).
    With fewer than 1000 samples p99.9 is therefore the maximum: report the count beside it.
    """
    n = len(values)
    if n == 0:
        raise ValueError("percentile of no samples")
    if not 0.0 <= p <= 100.0:
        raise ValueError(f"percentile {p} outside 0..100")
    rank = max(
        1, math.ceil(round(p / 100.0 * n, 9))
    )  # round: 0.999 * 1000 is 999.0000000000001 in binary
    return float(values[min(rank, n) - 1])


def latency_from_round_trips_ns(rtt_ns: Sequence[int]) -> LatencyStats:
    """One-way latency statistics (µs) from ping-pong round-trip times in nanoseconds.

    One-way = round trip / 2, as ``ib_write_lat`` and ``qperf tcp_lat`` report it; min, p50 (perftest's
    ``t_typical``), p99, p99.9, max and the mean.
    """
    if not rtt_ns:
        raise ValueError("no latency samples")
    ordered = sorted(rtt_ns)
    scale = 1.0 / 2000.0  # ns round trip -> µs one way
    return LatencyStats(
        min_us=ordered[0] * scale,
        p50_us=percentile_sorted(ordered, 50.0) * scale,
        p99_us=percentile_sorted(ordered, 99.0) * scale,
        p999_us=percentile_sorted(ordered, 99.9) * scale,
        max_us=ordered[-1] * scale,
        avg_us=(sum(ordered) / len(ordered)) * scale,
    )


def bandwidth_gbs(nbytes: int | float, seconds: float) -> float | None:
    """Bytes moved over ``seconds`` in GB/s (1e9 B/s); None when no time elapsed."""
    if seconds <= 0:
        return None
    return nbytes / seconds / 1e9


def message_rate_mpps(messages: int, seconds: float) -> float | None:
    """Messages per second / 1e6 (perftest's ``MsgRate[Mpps]``); None when no time elapsed."""
    if seconds <= 0:
        return None
    return messages / seconds / 1e6


def cpu_s_per_gb(cpu_s: float | None, nbytes: int | float) -> float | None:
    """CPU seconds (user + system) spent per GB (1e9 B) moved; None when unknown or nothing moved.

    Kernel bypass shows here: an RDMA WRITE receiver spends ~0 s/GB, a TCP receiver copies every byte.
    """
    if cpu_s is None or nbytes <= 0:
        return None
    return cpu_s / (nbytes / 1e9)


def process_cpu_s() -> float:
    """User + system CPU seconds of this process, all threads (``psutil.Process().cpu_times()``)."""
    import psutil

    t = psutil.Process().cpu_times()
    return float(t.user + t.system)


class CpuMeter:
    """CPU seconds this process used between :meth:`start` and :meth:`stop` (all threads).

    ``start`` may be called from whichever thread reaches the measured window first; later calls
    are ignored until :meth:`reset`, so several stream threads can race to start it.
    """

    def __init__(self) -> None:
        import threading

        self._lock = threading.Lock()
        self._start: float | None = None

    def reset(self) -> None:
        with self._lock:
            self._start = None

    def start(self) -> None:
        with self._lock:
            if self._start is None:
                self._start = process_cpu_s()

    def stop(self) -> float | None:
        """CPU seconds since :meth:`start`; None if it never started."""
        with self._lock:
            if self._start is None:
                return None
            return max(0.0, process_cpu_s() - self._start)

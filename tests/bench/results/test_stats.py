"""ibdiag.bench.results.stats: percentiles, latency, rates, CPU accounting."""

from __future__ import annotations

import math
import threading
import time

import pytest

from ibdiag.bench.results.stats import (
    CpuMeter,
    bandwidth_gbs,
    cpu_s_per_gb,
    latency_from_round_trips_ns,
    message_rate_mpps,
    percentile_sorted,
)


def test_percentile_nearest_rank_returns_measured_samples():
    values = list(range(1, 101))  # 1..100
    assert percentile_sorted(values, 50) == 50
    assert percentile_sorted(values, 99) == 99
    assert percentile_sorted(values, 99.9) == 100
    assert percentile_sorted(values, 0) == 1
    assert percentile_sorted(values, 100) == 100


def test_percentile_small_samples_p999_is_max():
    assert percentile_sorted([3, 5, 7], 99.9) == 7
    assert percentile_sorted([3, 5, 7], 50) == 5
    assert percentile_sorted([4], 50) == 4


@pytest.mark.parametrize("bad", [-1, 100.5])
def test_percentile_rejects_out_of_range(bad):
    with pytest.raises(ValueError):
        percentile_sorted([1, 2], bad)


def test_percentile_rejects_empty():
    with pytest.raises(ValueError):
        percentile_sorted([], 50)


def test_latency_is_half_the_round_trip_in_microseconds():
    # 1000 round trips of 20 µs and one of 2 ms: one-way 10 µs typical, 1000 µs max.
    rtts = [20_000] * 1000 + [2_000_000]
    stats = latency_from_round_trips_ns(rtts[::-1])  # order must not matter
    assert stats.min_us == pytest.approx(10.0)
    assert stats.p50_us == pytest.approx(10.0)
    assert stats.p99_us == pytest.approx(10.0)
    assert stats.p999_us == pytest.approx(10.0)
    assert stats.max_us == pytest.approx(1000.0)
    assert stats.avg_us == pytest.approx((1000 * 10.0 + 1000.0) / 1001)


def test_latency_percentiles_follow_the_distribution():
    rtts = [i * 1000 for i in range(1, 1001)]  # 1..1000 µs round trips
    stats = latency_from_round_trips_ns(rtts)
    assert stats.p50_us == pytest.approx(250.0)  # 500 µs RTT / 2
    assert stats.p99_us == pytest.approx(495.0)
    assert stats.p999_us == pytest.approx(499.5)
    assert stats.to_json()["p999"] == pytest.approx(499.5)


def test_rates_and_cpu_per_gb():
    assert bandwidth_gbs(25e9, 2.0) == pytest.approx(12.5)
    assert bandwidth_gbs(1, 0) is None
    assert message_rate_mpps(3_000_000, 1.5) == pytest.approx(2.0)
    assert message_rate_mpps(5, 0.0) is None
    assert cpu_s_per_gb(0.5, 2e9) == pytest.approx(0.25)
    assert cpu_s_per_gb(None, 1e9) is None
    assert cpu_s_per_gb(1.0, 0) is None


def test_cpu_meter_counts_busy_threads_and_first_start_wins():
    meter = CpuMeter()
    assert meter.stop() is None
    meter.start()

    # A busy loop in another thread is CPU of this process too. It spins until the thread itself has
    # used 0.3 s of CPU (not 0.3 s of wall time: on a loaded machine that can be far less CPU).
    def spin() -> None:
        end = time.thread_time() + 0.3
        x = 0
        while time.thread_time() < end:
            x += 1

    t = threading.Thread(target=spin)
    t.start()
    t.join()
    meter.start()  # ignored: already started
    used = meter.stop()
    assert used is not None and 0.2 <= used <= 2.0
    meter.reset()
    assert meter.stop() is None
    assert math.isfinite(used)

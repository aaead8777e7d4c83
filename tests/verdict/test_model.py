"""The verdict's arithmetic: the seed's numbers, the overlap model against its step-by-step definition,
the bucket search and the scaling wall. Pure functions, literal numbers."""

import math
import random

import pytest

from ibdiag.verdict import model
from ibdiag.verdict.model import (
    COMPUTE_BOUND,
    NETWORK_BOUND,
    SINGLE_NODE,
    Step,
    best_bucket,
    candidate_buckets,
    classify,
    scaling_ranks,
    scaling_table,
    scaling_wall,
    simulate_overlap,
    traffic_factor,
    transfer_s,
)
from tests.support.verdict_oracle import simulate_overlap_stepwise

S = 16_000_000_000  # 8e9 bf16 parameters (seed 000)
MIB = 2**20


def test_traffic_factor_per_strategy():
    assert traffic_factor("ddp", 512) == pytest.approx(2 * 511 / 512)
    assert traffic_factor("zero1", 4) == traffic_factor("zero2", 4) == 1.5
    assert traffic_factor("fsdp", 4) == traffic_factor("zero3", 4) == 2.25
    assert traffic_factor("ddp", 1) == 0.0
    with pytest.raises(ValueError):
        traffic_factor("ddp", 0)


def test_seed_example_wire_bytes_and_time():
    """8e9 params, bf16, 512 ranks, 400 Gb/s -> 50 GB/s: S = 16 GB, 31.9375e9 B per rank, 0.63875 s."""
    f = traffic_factor("ddp", 512)
    assert f * S == 31_937_500_000
    assert transfer_s(f * S, 400 / 8) == pytest.approx(0.63875, rel=1e-12)


def test_seed_example_is_compute_bound_at_2s_and_network_bound_at_half_a_second():
    f = traffic_factor("ddp", 512)
    slow = Step(0.0, simulate_overlap(S, 25 * MIB, 2.0, f, 50.0, 0.0))
    fast = Step(0.0, simulate_overlap(S, 25 * MIB, 0.5, f, 50.0, 0.0))
    assert slow.overlap.comm_s == pytest.approx(0.63875)
    assert classify(slow, 0.10) == COMPUTE_BOUND
    assert slow.exposed_s < 0.001  # only the last (partial) bucket: 1.996 x 8.79 MiB / 50 GB/s
    assert classify(fast, 0.10) == NETWORK_BOUND
    # The network falls behind: 1.047 ms per 25 MiB bucket vs 0.819 ms of backward per bucket;
    # the queue drains 0.63875 s after the first bucket is ready, minus what fits in 0.5 s.
    assert fast.exposed_s == pytest.approx(0.63875 + 0.5 * 25 * MIB / S - 0.5, rel=1e-3)
    assert fast.comm_share == pytest.approx(fast.exposed_s / (0.5 + fast.exposed_s))


def test_bucket_split_and_timing_fields():
    ov = simulate_overlap(100, 30, 1.0, 2.0, 1e-9 * 200, 0.5)  # busbw 200 B/s
    assert (ov.buckets, ov.full_buckets, ov.bucket_bytes, ov.last_bucket_bytes) == (4, 3, 30, 10)
    assert ov.bucket_compute_s == pytest.approx(0.3)
    assert ov.bucket_comm_s == pytest.approx(0.5 + 60 / 200)
    assert ov.last_bucket_comm_s == pytest.approx(0.5 + 20 / 200)
    # Ready at 0.3, 0.6, 0.9, 1.0; each full one takes 0.8: ends 1.1, 1.9, 2.7; last 2.7 + 0.6.
    assert [ov.end_s(k) for k in (1, 2, 3, 4)] == pytest.approx([1.1, 1.9, 2.7, 3.3])
    assert ov.comm_end_s == pytest.approx(3.3) and ov.exposed_s == pytest.approx(2.3)
    assert ov.hidden_buckets == 0 and ov.first_exposed_bucket == 1 and not ov.keeps_up
    assert ov.comm_s == pytest.approx(3 * 0.8 + 0.6)


def test_zero_latency_and_infinite_bandwidth_expose_nothing():
    ov = simulate_overlap(S, 25 * MIB, 0.5, 2.0, math.inf, 0.0)
    assert ov.exposed_s == 0.0 and ov.comm_s == 0.0
    assert ov.hidden_buckets == ov.buckets and ov.first_exposed_bucket is None


@pytest.mark.parametrize("bucket", [MIB, 25 * MIB, S // 4, S, 2 * S])
def test_the_last_bucket_is_always_exposed(bucket):
    # However fast the network is relative to compute, the last bucket's collective starts when the
    # backward pass ends: at least its own duration is exposed.
    ov = simulate_overlap(S, bucket, 100.0, 2.0, 400.0, 10e-6)
    assert ov.exposed_s >= ov.last_bucket_comm_s * (1 - 1e-9)
    assert ov.exposed_s == pytest.approx(ov.last_bucket_comm_s)
    assert ov.first_exposed_bucket == ov.buckets


def test_one_bucket_holds_everything_when_the_bucket_is_larger_than_s():
    ov = simulate_overlap(1000, 4096, 1.0, 2.0, 1e-9 * 1000, 0.0)
    assert ov.buckets == 1 and ov.bucket_bytes == 1000
    assert ov.exposed_s == pytest.approx(2.0)  # the whole 2000 wire bytes after the backward pass


def test_closed_form_matches_the_step_by_step_definition():
    rng = random.Random(20261129)
    for _ in range(400):
        grad = rng.randint(1, 10**10)
        bucket = rng.choice([1, 7, MIB, 25 * MIB, rng.randint(1, grad)])
        if grad // bucket > 50_000:
            continue
        args = (
            grad,
            bucket,
            rng.choice([1e-4, 0.01, 0.5, 2.0, 10.0]),
            rng.choice([0.0, 1.0, 1.5, 2.0]),
            rng.choice([0.1, 1.0, 50.0, 400.0, math.inf]),
            rng.choice([0.0, 1e-6, 5e-5, 1e-3]),
        )
        fast, slow = simulate_overlap(*args), simulate_overlap_stepwise(*args)
        assert fast.buckets == slow.buckets, args
        assert fast.comm_end_s == pytest.approx(slow.comm_end_s, rel=1e-9, abs=1e-12), args
        assert fast.comm_s == pytest.approx(slow.comm_s, rel=1e-9, abs=1e-12), args
        assert fast.hidden_buckets == slow.hidden_buckets, args


def test_bad_model_inputs_raise():
    with pytest.raises(ValueError):
        simulate_overlap(S, 25 * MIB, 0.0, 2.0, 50.0, 0.0)
    with pytest.raises(ValueError):
        simulate_overlap(S, 0, 1.0, 2.0, 50.0, 0.0)
    with pytest.raises(ValueError):
        simulate_overlap(S, 25 * MIB, 1.0, 2.0, 50.0, -1.0)
    with pytest.raises(ValueError):
        transfer_s(1.0, 0.0)


def test_candidate_buckets_are_powers_of_two_from_1mib_to_s():
    c = candidate_buckets(S)
    assert c[0] == MIB and c[-1] == 2**34 and c[-2] < S <= c[-1]
    assert all(b == 2 * a for a, b in zip(c, c[1:], strict=False))
    assert candidate_buckets(1000) == (MIB,)


def test_best_bucket_balances_latency_against_the_exposed_tail():
    f = traffic_factor("ddp", 512)
    # Compute-bound: small buckets shrink the exposed last bucket until per-bucket latency dominates.
    size, ov = best_bucket(S, 2.0, f, 50.0, 50e-6)
    assert size == MIB
    # Latency-heavy: the per-collective cost pushes the best size up.
    size_lat, _ = best_bucket(S, 2.0, f, 50.0, 20e-3)
    assert size_lat > 16 * MIB
    # No candidate beats the chosen one.
    for c in candidate_buckets(S):
        assert simulate_overlap(S, c, 2.0, f, 50.0, 20e-3).exposed_s >= best_bucket(
            S, 2.0, f, 50.0, 20e-3
        )[1].exposed_s * (1 - 1e-9)


def test_best_bucket_ties_go_to_the_larger_size():
    # Infinite bandwidth and no latency: every size exposes 0 s, so the largest wins.
    size, ov = best_bucket(S, 1.0, 2.0, math.inf, 0.0)
    assert ov.exposed_s == 0.0 and size == candidate_buckets(S)[-1]


def test_scaling_ranks_double_from_ranks_per_node_and_include_the_job():
    assert scaling_ranks(512, 8, 16384) == (
        8,
        16,
        32,
        64,
        128,
        256,
        512,
        1024,
        2048,
        4096,
        8192,
        16384,
    )
    assert scaling_ranks(24, 8, 64) == (8, 16, 24, 32, 64)
    assert scaling_ranks(32768, 8, 16384)[-1] == 32768


def test_scaling_table_fixed_global_batch_and_the_wall():
    rows = scaling_table(
        grad_bytes=S,
        strategy="ddp",
        ranks=512,
        ranks_per_node=1,
        backward_s=2.0,
        forward_s=1.0,
        bucket_bytes=25 * MIB,
        busbw_gbs=50.0,
        latency_s=0.0,
        network_bound_share=0.10,
        max_ranks=16384,
    )
    by = {r.ranks: r for r in rows}
    assert by[1].verdict == SINGLE_NODE and by[1].exposed_s is None
    assert by[512].anchor and by[512].compute_s == 2.0 and by[512].forward_s == 1.0
    assert (
        by[1024].compute_s == 1.0
        and by[256].compute_s == 4.0
        and by[16384].compute_s == pytest.approx(2.0 / 32)
    )
    assert by[2].factor == 1.0 and by[512].factor == pytest.approx(2 * 511 / 512)
    assert by[512].verdict == COMPUTE_BOUND
    # Per-rank traffic stays ~2 x S: at 0.5 s of backward (2048 ranks) it no longer hides.
    assert by[2048].verdict == NETWORK_BOUND
    wall = scaling_wall(rows)
    assert wall is not None and 512 < wall <= 2048
    assert all(r.verdict == NETWORK_BOUND for r in rows if r.ranks >= wall)
    assert all(r.verdict != NETWORK_BOUND for r in rows if r.ranks < wall)


def test_scaling_wall_none_when_communication_always_hides():
    rows = scaling_table(
        grad_bytes=10**6,
        strategy="ddp",
        ranks=16,
        ranks_per_node=8,
        backward_s=100.0,
        forward_s=0.0,
        bucket_bytes=25 * MIB,
        busbw_gbs=400.0,
        latency_s=0.0,
        network_bound_share=0.10,
        max_ranks=1024,
    )
    assert rows[0].ranks == 8 and rows[0].verdict == SINGLE_NODE
    assert scaling_wall(rows) is None
    assert model.scaling_wall(()) is None

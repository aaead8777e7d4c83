"""Sizes, counts and bus-bandwidth factors the way nccl-tests defines them (pure arithmetic)."""

from __future__ import annotations

import pytest

from ibdiag.bench.collective.plan import buffer_bytes, plan_size, plan_sizes
from ibdiag.collectives import DTYPES, OPS, algbw_gbs, avg_busbw, collective_dtype, get_op
from ibdiag.errors import UsageError

F32 = DTYPES["float32"]
BF16 = DTYPES["bfloat16"]


@pytest.mark.parametrize(
    ("op", "n", "factor"),
    [
        ("all_reduce", 2, 1.0),
        ("all_reduce", 8, 1.75),
        ("all_reduce", 16, 1.875),
        ("all_reduce", 1, 0.0),
        ("all_gather", 8, 0.875),
        ("reduce_scatter", 4, 0.75),
        ("all_to_all", 2, 0.5),
        ("broadcast", 64, 1.0),
        ("reduce", 64, 1.0),
        ("sendrecv", 3, 1.0),
    ],
)
def test_busbw_factor_is_nccl_tests(op, n, factor):
    assert OPS[op].busbw_factor(n) == pytest.approx(factor)


def test_busbw_factor_refuses_no_ranks():
    with pytest.raises(ValueError):
        OPS["all_reduce"].busbw_factor(0)


def test_all_reduce_size_is_the_per_rank_buffer():
    p = plan_size(OPS["all_reduce"], 1 << 20, 8, F32)
    assert (p.bytes, p.count, p.send_elems, p.recv_elems) == (1 << 20, 262144, 262144, 262144)


def test_all_gather_size_is_the_total_and_count_is_per_rank():
    # nccl-tests prints max(send, recv) bytes and the per-rank element count for all_gather
    p = plan_size(OPS["all_gather"], 1 << 20, 8, F32)
    assert (p.bytes, p.count, p.send_elems, p.recv_elems) == (1 << 20, 32768, 32768, 262144)


def test_reduce_scatter_sends_the_total_receives_a_shard():
    p = plan_size(OPS["reduce_scatter"], 1 << 20, 4, BF16)
    assert (p.bytes, p.count, p.send_elems, p.recv_elems) == (1 << 20, 131072, 524288, 131072)


def test_total_sizes_round_down_to_whole_shards():
    # 4096 B of float over 3 ranks: 1024 elements -> 341 per rank -> 1023 elements = 4092 B
    p = plan_size(OPS["all_to_all"], 4096, 3, F32)
    assert (p.bytes, p.count, p.send_elems, p.recv_elems) == (4092, 341, 1023, 1023)


def test_a_size_without_an_element_per_rank_is_skipped():
    assert plan_size(OPS["all_gather"], 8, 3, F32) is None
    assert plan_size(OPS["all_reduce"], 1, 2, BF16) is None
    plans, skipped = plan_sizes(OPS["all_gather"], (8, 16, 64), 3, F32)
    assert [p.bytes for p in plans] == [12, 60]  # 16 B: 4 floats, 1 per rank
    assert skipped == (8,)


def test_sizes_that_round_to_the_same_plan_are_measured_once():
    plans, _ = plan_sizes(OPS["all_reduce"], (6, 7, 8), 2, F32)
    assert [p.bytes for p in plans] == [4, 8]


def test_bandwidth_arithmetic():
    # 1 GiB in 10 ms = 107.37 GB/s (1e9 B/s, as nccl-tests prints)
    assert algbw_gbs(1 << 30, 0.01) == pytest.approx(107.374, rel=1e-4)
    assert algbw_gbs(1 << 30, 0.01) * OPS["all_reduce"].busbw_factor(16) == pytest.approx(
        107.374 * 1.875, rel=1e-4
    )
    assert algbw_gbs(100, 0) == 0.0


def test_avg_bus_bandwidth_is_the_unweighted_mean():
    assert avg_busbw([1.0, 2.0, 6.0]) == pytest.approx(3.0)
    assert avg_busbw([]) is None


def test_buffer_bytes_counts_what_a_rank_allocates():
    p = plan_size(OPS["all_reduce"], 1 << 20, 4, F32)
    assert buffer_bytes(OPS["all_reduce"], p, F32, check=False) == 1 << 20  # one buffer, in place
    p = plan_size(OPS["all_gather"], 1 << 20, 4, F32)
    assert buffer_bytes(OPS["all_gather"], p, F32, check=False) == (1 << 20) + (1 << 18)


@pytest.mark.parametrize(
    ("name", "canonical"),
    [
        ("allreduce", "all_reduce"),
        ("all_reduce_perf", "all_reduce"),
        ("alltoall", "all_to_all"),
        ("All-Gather", "all_gather"),
        ("ring", "sendrecv"),
    ],
)
def test_op_aliases(name, canonical):
    assert get_op(name).name == canonical


def test_unknown_op_and_dtype_are_usage_errors_with_the_choices():
    with pytest.raises(UsageError) as e:
        get_op("allscatter")
    assert "all_reduce" in e.value.hint
    with pytest.raises(UsageError):
        collective_dtype("int7")


@pytest.mark.parametrize(
    ("name", "torch_name", "nccl"),
    [("half", "float16", "half"), ("bf16", "bfloat16", "bfloat16"), ("float", "float32", "float")],
)
def test_dtype_aliases_use_nccl_tests_names(name, torch_name, nccl):
    d = collective_dtype(name)
    assert (d.name, d.nccl_name) == (torch_name, nccl)

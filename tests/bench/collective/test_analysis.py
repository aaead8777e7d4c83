"""Measurement -> BenchRun and findings: averages, busbw, spread and stragglers as pure arithmetic."""

from __future__ import annotations

import random

import pytest

from ibdiag.bench.collective.analysis import find_stragglers, late_shares, row_spread, to_bench_run
from ibdiag.bench.collective.measurement import MeasuredRow, Measurement, RankInfo
from ibdiag.bench.collective.plan import plan_size
from ibdiag.bench.results.collective_config import CollectiveConfig
from ibdiag.collectives import DTYPES, OPS
from ibdiag.errors import InputError
from ibdiag.findings.model import Severity

CFG = CollectiveConfig()


def _row(
    size: int,
    n: int,
    time_us: float,
    coll: list[float],
    *,
    op: str = "all_reduce",
    in_place: bool = True,
    wrong: int | None = 0,
    calls=None,
) -> MeasuredRow:
    return MeasuredRow(
        plan_size(OPS[op], size, n, DTYPES["float32"]),
        in_place,
        tuple([time_us] * n),
        tuple(coll),
        wrong,
        calls,
    )


def _measurement(rows, hosts, *, op: str = "all_reduce", setup=None) -> Measurement:
    n = len(hosts)
    setup = setup or [0.5] * n
    ranks = tuple(RankInfo(r, hosts[r], r % 8, 1000 + r, "cpu", setup[r]) for r in range(n))
    return Measurement(
        op, "gloo", "float32", n, 20, 5, False, True, "torchrun", "host timer", ranks, tuple(rows)
    )


def test_late_share_is_the_wait_others_had_over_the_row_time():
    # rank 2 arrives 300 µs late in a 1000 µs collective: the others spend 300 µs more inside it
    row = _row(1 << 20, 4, 1000.0, [900.0, 900.0, 600.0, 900.0])
    shares = late_shares(row)
    assert shares == pytest.approx([0.0, 0.0, 0.3, 0.0])


def test_per_call_times_ignore_one_descheduled_call():
    n, calls = 3, 9
    per_call = [[500.0] * calls for _ in range(n)]
    per_call[1][4] = 100.0  # one call where rank 1 arrived late: jitter, not a straggler
    row = _row(
        1 << 20,
        n,
        500.0,
        [sum(c) / calls for c in per_call],
        calls=tuple(tuple(c) for c in per_call),
    )
    assert late_shares(row) == pytest.approx([0.0, 0.0, 0.0])


def test_a_consistently_late_rank_is_named_with_its_host():
    hosts = ["node01"] * 4 + ["node02"] * 4
    rows = []
    for i, size in enumerate([1 << 20, 1 << 22, 1 << 24, 1 << 26]):
        coll = [1000.0] * 8
        coll[5] = 1000.0 - 350.0 - 10 * i  # rank 5 keeps the others waiting ~35 %
        rows.append(_row(size, 8, 1000.0, coll))
    found = find_stragglers(rows, hosts, CFG)
    assert [(s.kind, s.ranks, s.host) for s in found] == [("rank", (5,), "node02")]
    assert found[0].share == pytest.approx(
        0.37
    )  # the 2nd largest of 4 (0.38, 0.37, 0.36, 0.35): needed in half the rows
    assert (found[0].rows_late, found[0].rows_judged) == (4, 4)


def test_late_in_one_row_of_four_is_not_consistent():
    rows = [
        _row(1 << (20 + i), 4, 1000.0, [1000.0, 1000.0, 1000.0, 400.0 if i == 0 else 1000.0])
        for i in range(4)
    ]
    assert find_stragglers(rows, ["h"] * 4, CFG) == []


def test_noise_is_not_a_straggler():
    rng = random.Random(7)
    rows = [
        _row(1 << (16 + i), 8, 800.0, [800.0 * (1 + rng.uniform(-0.05, 0.05)) for _ in range(8)])
        for i in range(8)
    ]
    assert find_stragglers(rows, ["a"] * 4 + ["b"] * 4, CFG) == []


def test_latency_bound_rows_are_not_judged():
    rows = [
        _row(8 << i, 4, 20.0, [20.0, 20.0, 20.0, 2.0]) for i in range(4)
    ]  # 20 µs rows: below 50 µs
    assert find_stragglers(rows, ["h"] * 4, CFG) == []
    run, findings = to_bench_run(_measurement(rows, ["h"] * 4), CFG)
    straggler = [f for f in findings if f.check == "collective.straggler"]
    assert straggler[0].severity is Severity.OK and "not judged" in straggler[0].message


def test_a_late_host_is_reported_once_for_its_ranks():
    hosts = ["node01"] * 4 + ["node02"] * 4 + ["node03"] * 4
    rows = []
    for size in (1 << 22, 1 << 24, 1 << 26):
        coll = [2000.0] * 12
        for r in range(4, 8):
            coll[r] = 1200.0  # every rank of node02 is late: its NIC, say
        rows.append(_row(size, 12, 2000.0, coll))
    found = find_stragglers(rows, hosts, CFG)
    assert [(s.kind, s.host, s.ranks) for s in found] == [("host", "node02", (4, 5, 6, 7))]
    assert found[0].share == pytest.approx(0.4)


def test_two_ranks_name_the_late_one():
    rows = [_row(1 << (20 + i), 2, 1000.0, [1000.0, 400.0]) for i in range(3)]
    found = find_stragglers(rows, ["a", "a"], CFG)
    assert [s.ranks for s in found] == [(1,)]
    assert found[0].share == pytest.approx(0.3)


def test_threshold_is_configurable():
    rows = [_row(1 << (20 + i), 4, 1000.0, [1000.0, 1000.0, 1000.0, 880.0]) for i in range(3)]
    assert find_stragglers(rows, ["h"] * 4, CFG) == []
    assert len(find_stragglers(rows, ["h"] * 4, CollectiveConfig(straggler_share=0.1))) == 1


def test_config_refuses_nonsense():
    for kw in (
        {"straggler_share": 0},
        {"straggler_min_fraction": 1.5},
        {"min_busbw_gbs": -1},
        {"max_setup_s": 0},
        {"straggler_min_time_us": -1},
    ):
        with pytest.raises(InputError):
            CollectiveConfig(**kw)


def test_bench_run_rows_are_nccl_tests_arithmetic():
    n = 16
    rows = [
        MeasuredRow(
            plan_size(OPS["all_reduce"], 1 << 30, n, DTYPES["float32"]),
            True,
            tuple([10000.0] * 8 + [10400.0] * 8),
            tuple([9000.0] * n),
            0,
        ),
        MeasuredRow(
            plan_size(OPS["all_reduce"], 1 << 20, n, DTYPES["float32"]),
            True,
            tuple([100.0] * n),
            tuple([90.0] * n),
            0,
        ),
    ]
    run, findings = to_bench_run(_measurement(rows, ["a"] * 8 + ["b"] * 8), CFG)
    big = run.results[0]
    assert big.time_us == pytest.approx(10200.0)  # mean over ranks (nccl-tests -a 1)
    assert (big.time_us_min, big.time_us_max) == (10000.0, 10400.0)
    assert big.algbw_gbs == pytest.approx((1 << 30) / 10200e-6 / 1e9)
    assert big.busbw_gbs == pytest.approx(big.algbw_gbs * 1.875)
    assert (big.dtype, big.redop, big.root, big.count) == ("float", "sum", None, 1 << 28)
    assert run.meta.avg_busbw_gbs == pytest.approx(
        (run.results[0].busbw_gbs + run.results[1].busbw_gbs) / 2
    )
    assert (run.meta.world_size, run.meta.ranks_per_node, run.meta.nodes, run.meta.hosts) == (
        16,
        8,
        2,
        ("a", "b"),
    )
    assert len(run.meta.measured.per_rank) == 16 and len(run.meta.measured.per_rank[3].time_us) == 2
    assert [f.severity for f in findings if f.check == "collective.wrong"] == [Severity.OK]


def test_wrong_elements_fail():
    rows = [
        _row(1 << 20, 4, 500.0, [500.0] * 4, wrong=0),
        _row(1 << 22, 4, 900.0, [900.0] * 4, wrong=12),
    ]
    _, findings = to_bench_run(_measurement(rows, ["h"] * 4), CFG)
    wrong = [f for f in findings if f.check == "collective.wrong"]
    assert len(wrong) == 1 and wrong[0].severity is Severity.FAIL and wrong[0].value == 12
    assert "4 MiB in-place: 12" in wrong[0].message


def test_no_validation_means_no_wrong_finding():
    rows = [_row(1 << 20, 4, 500.0, [500.0] * 4, wrong=None)]
    run, findings = to_bench_run(_measurement(rows, ["h"] * 4), CFG)
    assert run.results[0].wrong is None
    assert not [f for f in findings if f.check == "collective.wrong"]


def test_busbw_expectation_and_setup_limit():
    rows = [_row(1 << 20, 4, 500.0, [500.0] * 4), _row(1 << 26, 4, 20000.0, [20000.0] * 4)]
    m = _measurement(rows, ["h"] * 4, setup=[1.0, 2.0, 9.5, 1.2])
    run, findings = to_bench_run(m, CollectiveConfig(min_busbw_gbs=10.0, max_setup_s=5.0))
    by = {f.check: f for f in findings}
    largest_busbw = run.results[1].busbw_gbs  # 64 MiB in 20 ms over 4 ranks: 5.03 GB/s
    assert by["collective.busbw"].severity is Severity.FAIL and by[
        "collective.busbw"
    ].value == pytest.approx(largest_busbw, abs=1e-3)
    assert (
        by["collective.setup"].severity is Severity.WARN
        and "rank 2" in by["collective.setup"].message
    )
    assert (
        run.meta.measured.setup_s,
        run.meta.measured.setup_s_min,
        run.meta.measured.setup_slowest_rank,
    ) == (9.5, 1.0, 2)
    _, findings = to_bench_run(m, CollectiveConfig(min_busbw_gbs=1.0, max_setup_s=10.0))
    assert {f.check: f.severity for f in findings}["collective.busbw"] is Severity.OK


def test_spread_names_the_latest_rank():
    row = _row(1 << 20, 4, 1000.0, [900.0, 880.0, 500.0, 910.0])
    s = row_spread(row, ["a", "a", "b", "b"])
    assert s.latest_rank == 2
    assert s.coll_us.to_json() == {"min": 500.0, "median": 890.0, "max": 910.0}
    assert s.host_coll_us.min == pytest.approx(705.0)


def test_straggler_finding_names_rank_and_host():
    rows = [_row(1 << (20 + i), 4, 1000.0, [1000.0, 1000.0, 1000.0, 500.0]) for i in range(3)]
    _, findings = to_bench_run(_measurement(rows, ["n1", "n1", "n2", "n2"]), CFG)
    st = [f for f in findings if f.check == "collective.straggler"]
    assert len(st) == 1 and st[0].severity is Severity.WARN
    assert st[0].subject == "rank 3 (n2)" and st[0].value == 0.5 and st[0].limit == 0.2

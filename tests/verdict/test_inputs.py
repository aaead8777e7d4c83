"""What the verdict is told: parameter counts, dtypes, strategies, the workload's checks, the ceiling,
fabric health sorting, and the busbw taken from bench runs (literal BenchRun models)."""

import pytest

from ibdiag.bench.results.collective_meta import CollectiveMeta
from ibdiag.bench.results.model import BenchRun, CollectiveResult, LatencyStats, P2PResult
from ibdiag.bench.results.p2p_meta import P2PMeta
from ibdiag.errors import InputError, UsageError
from ibdiag.findings.model import Finding, Severity
from ibdiag.verdict import inputs
from ibdiag.verdict.ceiling import RailInfo, ceiling
from ibdiag.verdict.checks import findings
from ibdiag.verdict.config import VerdictConfig
from ibdiag.verdict.health import sort_health
from ibdiag.verdict.judge import judge

MIB = 2**20


@pytest.mark.parametrize(
    "text,expected",
    [
        ("8e9", 8e9),
        ("8B", 8e9),
        ("70B", 70e9),
        ("70b", 70e9),
        ("1.5T", 1.5e12),
        ("350M", 350e6),
        ("7G", 7e9),
        ("125000", 125000),
        (".5B", 5e8),
    ],
)
def test_parse_params(text, expected):
    assert inputs.parse_params(text) == expected


@pytest.mark.parametrize("text", ["", "eight", "8 GB", "8Bn", "-8e9", "0", "8e99", "nan", "inf"])
def test_parse_params_rejects(text):
    with pytest.raises(UsageError) as e:
        inputs.parse_params(text)
    assert e.value.hint


@pytest.mark.parametrize(
    "text,name,size",
    [
        ("bf16", "bf16", 2),
        ("BF16", "bf16", 2),
        ("fp32", "fp32", 4),
        ("tf32", "tf32", 4),
        ("float16", "fp16", 2),
        ("fp8", "fp8", 1),
        ("e5m2", "fp8", 1),
    ],
)
def test_parse_dtype(text, name, size):
    assert inputs.parse_dtype(text) == (name, size)


def test_unknown_dtype_and_strategy_name_the_choices():
    with pytest.raises(UsageError) as e:
        inputs.parse_dtype("int4")
    assert "bf16" in e.value.hint
    with pytest.raises(UsageError) as e:
        inputs.parse_strategy("zero4")
    assert "fsdp" in e.value.hint
    assert inputs.parse_strategy("ZeRO-3") == "zero3"


def test_grad_size_from_params_or_bytes():
    assert inputs.grad_size("8e9", "bf16", None) == (16_000_000_000, 8e9, "bf16", 2)
    assert inputs.grad_size(None, None, "16GB")[0] == 16_000_000_000  # decimal GB
    assert inputs.grad_size(None, None, "16GiB")[0] == 16 * 2**30
    for args in (
        ("8e9", "bf16", "16GB"),
        (None, None, None),
        ("8e9", None, None),
        (None, "bf16", "16GB"),
        (None, None, "0"),
    ):
        with pytest.raises(UsageError):
            inputs.grad_size(*args)


def _work(**kw):
    args = dict(
        params="8e9",
        dtype="bf16",
        grad_bytes=None,
        ranks=512,
        ranks_per_node=1,
        gpus_under_root=None,
        strategy="ddp",
        compute_s=2.0,
        forward_s=None,
        bucket="25MiB",
    )
    args.update(kw)
    return inputs.workload(**args)


def test_workload_defaults_and_sources():
    w = _work()
    assert (w.grad_bytes, w.nodes, w.bucket_bytes, w.forward_s) == (
        16_000_000_000,
        512,
        25 * MIB,
        0.0,
    )
    w = _work(ranks_per_node=None, gpus_under_root=8)
    assert (w.ranks_per_node, w.ranks_per_node_source, w.nodes) == (8, "GPUs under --root", 64)
    w = _work(ranks_per_node=None)
    assert (w.ranks_per_node, w.ranks_per_node_source) == (1, "default")


@pytest.mark.parametrize(
    "kw,needle",
    [
        ({"ranks": 0}, "--ranks must be a positive"),
        ({"ranks": -8}, "--ranks must be a positive"),
        ({"ranks": 2**21}, "absurdly large"),
        ({"ranks_per_node": 0}, "--ranks-per-node must be positive"),
        ({"ranks": 12, "ranks_per_node": 8}, "not a multiple"),
        ({"ranks": 8, "ranks_per_node": 8}, "single node"),
        ({"strategy": "pipeline"}, "unknown --strategy"),
        ({"compute_s": 0.0}, "--compute-s must be positive"),
        ({"compute_s": -1.0}, "--compute-s must be positive"),
        ({"compute_s": float("nan")}, "not a number"),
        ({"compute_s": 1e9}, "absurdly large"),
        ({"forward_s": -0.1}, "--forward-s must be zero or more"),
        ({"bucket": "0"}, "--bucket"),
        ({"bucket": "25 megs"}, "--bucket"),
    ],
)
def test_workload_rejects_with_a_hint(kw, needle):
    with pytest.raises(UsageError) as e:
        _work(**kw)
    assert needle in e.value.message and e.value.hint


def test_not_a_multiple_suggests_a_multi_node_count():
    with pytest.raises(UsageError) as e:
        _work(ranks=12, ranks_per_node=8)
    assert "--ranks 16" in e.value.hint
    with pytest.raises(UsageError) as e:
        _work(ranks=20, ranks_per_node=8)
    assert "--ranks 16" in e.value.hint


def test_choose_source_needs_exactly_one():
    assert inputs.choose_source(50.0, None, None) == "--busbw"
    with pytest.raises(UsageError):
        inputs.choose_source(None, None, None)
    with pytest.raises(UsageError) as e:
        inputs.choose_source(50.0, "a.json", None)  # type: ignore[arg-type]
    assert "--busbw and --bench" in e.value.message


def _coll(size, busbw, time_us, in_place=False):
    return CollectiveResult(
        bytes=size,
        count=size // 4,
        dtype="float",
        redop="sum",
        root=None,
        in_place=in_place,
        time_us=time_us,
        algbw_gbs=busbw / 1.875,
        busbw_gbs=busbw,
        wrong=0,
    )


def test_collective_run_takes_busbw_nearest_the_bucket_and_latency_from_the_smallest_size():
    run = BenchRun(
        CollectiveMeta(op="all_reduce", world_size=16, ranks_per_node=8),
        (
            _coll(8, 0.0, 30.0),
            _coll(8, 0.0, 32.0, True),
            _coll(16 * MIB, 200.0, 160.0),
            _coll(16 * MIB, 198.0, 161.0, True),
            _coll(32 * MIB, 264.0, 240.0),
            _coll(32 * MIB, 262.0, 241.0, True),
        ),
    )
    m = inputs.from_bench_run(
        run, bucket_bytes=25 * MIB, ranks=512, rails_used=8, source="bench", path="run.json"
    )
    # 25 MiB is closer to 32 MiB than to 16 MiB on a log scale (ratio 1.28 vs 1.56).
    assert m.size_bytes == 32 * MIB and m.busbw_gbs == pytest.approx(263.0)
    assert m.latency_s == pytest.approx(31e-6)
    assert any("16 ranks, the job 512" in n for n in m.notes)


def test_collective_run_notes_single_node_and_other_ops_and_large_smallest_size():
    run = BenchRun(
        CollectiveMeta(op="all_gather", world_size=2, ranks_per_node=2),
        (_coll(MIB, 20.0, 100.0), _coll(64 * MIB, 90.0, 1400.0)),
    )
    m = inputs.from_bench_run(
        run, bucket_bytes=25 * MIB, ranks=512, rails_used=1, source="bench", path="run.json"
    )
    assert m.size_bytes == 64 * MIB
    text = " ".join(m.notes)
    assert "did not cross the fabric" in text and "all_gather" in text and "overestimated" in text


def test_p2p_run_scales_by_rails_and_derives_a_tree_latency():
    lat = LatencyStats(min_us=1.8, p50_us=2.0, p99_us=2.5, p999_us=3.0, max_us=9.0)
    run = BenchRun(
        P2PMeta(transport="rdma", mode=None),
        (
            P2PResult(bytes=8, iters=1000, lat_us=lat),
            P2PResult(bytes=16 * MIB, iters=100, bw_gbs=45.0),
            P2PResult(bytes=32 * MIB, iters=100, bw_gbs=48.0),
        ),
    )
    m = inputs.from_bench_run(
        run, bucket_bytes=25 * MIB, ranks=512, rails_used=8, source="bench", path="p2p.json"
    )
    assert m.busbw_gbs == pytest.approx(8 * 48.0)
    assert m.latency_s == pytest.approx(2 * 9 * 2.0e-6)  # 2 x log2(512) hops
    assert "point-to-point" in m.how


@pytest.mark.parametrize(
    "run,needle",
    [
        (BenchRun(CollectiveMeta(op=None), ()), "no results"),
        (BenchRun(CollectiveMeta(op=None), (_coll(0, 0.0, 5.0),)), "no collective rows"),
        (BenchRun(CollectiveMeta(op=None), (_coll(MIB, 0.0, 5.0),)), "busbw at 1 MiB is 0"),
        (
            BenchRun(P2PMeta(transport=None, mode=None), (P2PResult(bytes=8, iters=10),)),
            "no bandwidth results",
        ),
    ],
)
def test_useless_runs_are_input_errors(run, needle):
    with pytest.raises(InputError) as e:
        inputs.from_bench_run(
            run, bucket_bytes=25 * MIB, ranks=16, rails_used=1, source="bench", path="x.json"
        )
    assert needle in e.value.message and e.value.hint


def test_ceiling_sources_and_rail_cap():
    rails = RailInfo(tuple(f"mlx5_{i}:1" for i in range(8)), 400.0, "InfiniBand")
    c = ceiling(
        link_gbps=None, rails_per_node=None, ranks_per_node=8, rails=rails, payload_share=1.0
    )
    assert (c.rails_used, c.link_gbps, c.busbw_gbs) == (8, 400.0, 400.0)
    c = ceiling(
        link_gbps=None, rails_per_node=None, ranks_per_node=1, rails=rails, payload_share=1.0
    )
    assert (c.rails_per_node, c.rails_used, c.busbw_gbs) == (
        8,
        1,
        50.0,
    )  # one rank drives the rail beside its GPU
    c = ceiling(
        link_gbps=200.0, rails_per_node=2, ranks_per_node=1, rails=rails, payload_share=0.95
    )
    assert (c.rails_used, c.busbw_gbs, c.link_source) == (2, pytest.approx(47.5), "--link-gbps")
    c = ceiling(
        link_gbps=None, rails_per_node=None, ranks_per_node=8, rails=None, payload_share=1.0
    )
    assert c.busbw_gbs is None and c.rails_used == 1


def test_health_sorting_escalates_gpus_without_gpudirect_rdma():
    fs = [
        Finding("port.state", Severity.OK, "mlx5_0:1", "ok"),
        Finding("topo.pcie_speed", Severity.WARN, "GPU0", "idle GPU"),
        Finding("topo.gpu_nic_path", Severity.WARN, "GPU2/mlx5_0", "NODE"),
        Finding("topo.gdr_module", Severity.WARN, "node", "no module", value="absent"),
        Finding("port.rate", Severity.FAIL, "mlx5_7:1", "slow"),
    ]
    h = sort_health(fs, checked=("topo",), rails=RailInfo(("mlx5_0:1",), 400.0, "InfiniBand"))
    assert [f.check for f in h.failing] == ["topo.gpu_nic_path", "topo.gdr_module", "port.rate"]
    assert [f.check for f in h.warnings] == ["topo.pcie_speed"] and h.passed == 1 and not h.ok
    unknown = sort_health(
        [Finding("topo.gdr_module", Severity.WARN, "node", "?", value="unknown")],
        checked=("topo",),
        rails=RailInfo(("a:1",), 1.0, None),
    )
    assert unknown.ok and len(unknown.warnings) == 1
    no_rails = sort_health([], checked=("topo",), rails=RailInfo((), None, None))
    assert not no_rails.ok and no_rails.failing[0].check == "verdict.rails"


def test_config_validation():
    with pytest.raises(InputError):
        VerdictConfig(network_bound_share=1.5)
    with pytest.raises(InputError):
        VerdictConfig(min_efficiency=0)
    with pytest.raises(InputError) as e:
        VerdictConfig(fail_on=("network-bound", "slow"))
    assert "bucket-size" in e.value.hint


def test_judge_refuses_busbw_beyond_what_sharp_could_explain_and_warns_above_the_ceiling():
    w = _work()
    c = ceiling(
        link_gbps=400.0, rails_per_node=None, ranks_per_node=1, rails=None, payload_share=1.0
    )
    with pytest.raises(UsageError) as e:
        judge(w, inputs.from_flag(111.0), c)
    assert "SHARP" in e.value.message and "GB/s" in e.value.hint
    v = judge(w, inputs.from_flag(100.0), c)  # 2x: SHARP/NVLS territory
    eff = next(f for f in findings(v) if f.check == "verdict.fabric_efficiency")
    assert eff.severity is Severity.WARN and "SHARP" in eff.message


def test_fail_on_decides_fail_or_warn():
    w = _work(compute_s=0.5)
    c = ceiling(
        link_gbps=400.0, rails_per_node=None, ranks_per_node=1, rails=None, payload_share=1.0
    )
    v = judge(w, inputs.from_flag(30.0), c, config=VerdictConfig(fail_on=()))
    sev = {f.check: f.severity for f in findings(v)}
    assert (
        sev["verdict.network_bound"] is Severity.WARN
        and sev["verdict.fabric_efficiency"] is Severity.WARN
    )
    v = judge(w, inputs.from_flag(30.0), c)
    sev = {f.check: f.severity for f in findings(v)}
    assert (
        sev["verdict.network_bound"] is Severity.FAIL
        and sev["verdict.fabric_efficiency"] is Severity.FAIL
    )
    assert v.fabric == "underperforming"


def test_node_health_has_each_port_problem_once():
    """topo and counters judge ports through one module; verdict asks it once (no de-duplication)."""
    from ibdiag.config import load_config
    from ibdiag.node.sysfs import SysfsRoot
    from ibdiag.verdict.node import read_node
    from tests.support.env import SYSFS_FIXTURES

    health = read_node(SysfsRoot(SYSFS_FIXTURES / "dgx-h100-faulty"), load_config(None)).health
    assert health.checked == ("topo", "counters")
    ports = sorted(
        (f.check, f.subject)
        for f in health.failing + health.warnings
        if f.subject.startswith("mlx5_")
    )
    assert ports == [
        ("port.rate", "mlx5_7:1"),
        ("port.state", "mlx5_10:1"),
        ("topo.pcie_width", "mlx5_6"),
    ]

"""``ibdiag.verdict.command.run`` without the command line: the seed's arithmetic, a node under
``root``, the job placed on a saved fabric, the chart its views draw, and the requests it refuses."""

from __future__ import annotations

import io

import pytest

from ibdiag.errors import UsageError
from ibdiag.output.outputs import TableLayout
from ibdiag.verdict import views
from ibdiag.verdict.command import VerdictRequest, run
from tests.support.env import FIXTURES, SYSFS_FIXTURES

SEED = {"params": "8e9", "dtype": "bf16", "ranks": 512, "ranks_per_node": 1, "link_gbps": 400.0}
TWO_TO_ONE = FIXTURES / "fabric" / "two-to-one.net"
LEAF_ORDER = [f"gpu{i:02d}" for i in range(1, 17)]
INTERLEAVED = [h for pair in zip(LEAF_ORDER[:8], LEAF_ORDER[8:], strict=True) for h in pair]


def checks(result):
    return {f.check: f for f in result.report.findings}


def test_the_seed_example_is_compute_bound_at_2s_and_network_bound_at_half_a_second():
    # 8e9 bf16 parameters: S = 16 GB; a ring all-reduce over 512 ranks moves 2 x 511/512 x S
    # = 31.9375 GB per rank, 0.63875 s at 50 GB/s: hidden behind a 2 s backward pass, not a 0.5 s one.
    calm = run(VerdictRequest(**SEED, busbw_gbs=50.0, compute_s=2.0))
    assert calm.verdict.wire_s == pytest.approx(0.63875)
    assert calm.report.data["verdict"] == "compute-bound" and not calm.report.failing(strict=False)
    busy = run(VerdictRequest(**SEED, busbw_gbs=50.0, compute_s=0.5, latency_us=0.0))
    assert busy.verdict.step.overlap.comm_s == pytest.approx(0.63875)
    assert checks(busy)["verdict.network_bound"].severity.value == "fail"
    assert busy.placement is None and busy.placement_lines == ()


def test_root_reads_the_nodes_rails_and_health_and_its_host():
    result = run(
        VerdictRequest(
            params="8e9",
            dtype="bf16",
            ranks=512,
            compute_s=2.0,
            busbw_gbs=360.0,
            root=SYSFS_FIXTURES / "dgx-h100",
        )
    )
    assert result.meta.host == "dgx-h100-01"
    ceil = result.verdict.ceiling
    assert ceil.rails_source == "--root" and ceil.rails_per_node == 8
    assert result.verdict.workload.ranks_per_node == 8  # the fixture's GPUs
    assert result.verdict.health is not None and result.verdict.health.ok


def test_a_job_interleaved_across_two_to_one_leaves_is_capped_by_their_uplinks():
    """As tests/verdict/test_placement.py works it out: every ring edge crosses, 8 per leaf and rail,
    800 Gb/s of uplinks / 8 = 100 Gb/s per rail, 2 rails x 100 / 8 = 25 GB/s."""
    result = run(
        VerdictRequest(
            params="8e9",
            dtype="bf16",
            ranks=16,
            ranks_per_node=1,
            rails_per_node=2,
            link_gbps=200.0,
            busbw_gbs=24.0,
            compute_s=2.0,
            fabric=str(TWO_TO_ONE),
            rank_order=",".join(INTERLEAVED),
            environ={"SLURM_JOB_NODELIST": "gpu[01-16]"},
        )
    )
    assert result.placement is not None
    ring = result.placement.ceilings["ring"]
    assert ring.busbw_gbs == pytest.approx(25.0)
    f = checks(result)["verdict.placement"]
    assert f.severity.value == "warn" and f.value == pytest.approx(25.0)
    assert result.report.data["placement"]["rank_order"] == INTERLEAVED
    assert any("25 GB/s" in line for line in result.placement_lines)
    text = " ".join(str(x) for x in views.outputs(result).table(TableLayout(False, 200)))
    assert "Fabric placement" in text


def test_the_views_draw_the_chart_as_a_png():
    pytest.importorskip("matplotlib")
    out = views.outputs(run(VerdictRequest(**SEED, busbw_gbs=50.0, compute_s=0.5)))
    assert out.png is not None
    buf = io.BytesIO()
    out.png(buf)
    assert buf.getvalue()[:8] == b"\x89PNG\r\n\x1a\n"
    header, rows = out.csv()
    assert header[0] == "ranks" and [r["job"] for r in rows].count(1) == 1


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        ({}, "no measured bandwidth"),
        ({"busbw_gbs": 50.0, "rails_per_node": 0}, "--rails-per-node must be between 1 and 64"),
        ({"busbw_gbs": 50.0, "nodes": "gpu[01-02]"}, "--nodes, --rank-order and --topo place"),
        ({"busbw_gbs": 50.0, "fabric": str(TWO_TO_ONE)}, "--fabric needs the job's nodes"),
        ({"busbw_gbs": 5000.0, "rails_per_node": 1}, "more than in-network reduction"),
    ],
)
def test_meaningless_requests_are_usage_errors(extra, said):
    with pytest.raises(UsageError) as e:
        run(VerdictRequest(**SEED, compute_s=2.0, **extra))
    assert said in e.value.message


def test_a_chart_path_that_cannot_be_written_is_refused_before_any_work(tmp_path):
    pytest.importorskip("matplotlib")
    with pytest.raises(UsageError) as e:
        run(VerdictRequest(**SEED, busbw_gbs=50.0, compute_s=2.0, chart=tmp_path))
    assert e.value.message == f"--chart {tmp_path}: is a directory"

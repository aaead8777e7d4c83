"""The ibdiag.bench/1 model: every kind and source survives to_data -> from_json; a file from elsewhere is checked."""

from __future__ import annotations

import json

import pytest

from ibdiag.bench import importers
from ibdiag.bench.collective.analysis import to_bench_run
from ibdiag.bench.collective.measurement import MeasuredRow, Measurement, RankInfo
from ibdiag.bench.collective.plan import plan_size
from ibdiag.bench.results.collective_config import CollectiveConfig
from ibdiag.bench.results.model import BenchRun, LatencyStats, P2PResult, bench_run_from_json
from ibdiag.bench.results.p2p_meta import LineRate, P2PMeta, P2PSetup, RdmaEnd, RdmaPath
from ibdiag.collectives import DTYPES, OPS
from ibdiag.errors import InputError
from tests.support.env import FIXTURES

LOGS = FIXTURES / "logs"


def _measured_collective() -> BenchRun:
    plan = plan_size(OPS["all_reduce"], 1 << 20, 4, DTYPES["float32"])
    row = MeasuredRow(plan, True, (100.0, 101.0, 99.0, 100.0), (90.0, 91.0, 40.0, 90.0), 0)
    ranks = tuple(RankInfo(r, f"node{r // 2}", r % 2, 100 + r, "cpu", 0.5 + r) for r in range(4))
    m = Measurement(
        "all_reduce",
        "gloo",
        "float32",
        4,
        20,
        5,
        False,
        True,
        "ibdiag",
        "host timer",
        ranks,
        (row,),
        settings={"NCCL_DEBUG": "WARN"},
    )
    return to_bench_run(m, CollectiveConfig())[0]


def _measured_p2p() -> BenchRun:
    end = RdmaEnd("mlx5_0", 1, 3, "::ffff:10.0.0.1", "RoCE v2 IPv4", "Ethernet", 4096)
    setup = P2PSetup(
        peer="node-a:18516",
        server_host="node-a",
        server_version="0.1.0",
        streams=1,
        duration_s=1.0,
        line_rate=LineRate(400.0, "client mlx5_0 port 1 rate 400 Gb/s"),
        client_line_rate=LineRate(400.0, "mlx5_0 port 1 rate 400 Gb/s"),
        rdma=RdmaPath(end, end, 4096, 128),
    )
    lat = LatencyStats(1.0, 1.5, 2.0, 3.0, 9.0, 1.6)
    rows = (
        P2PResult(bytes=8, iters=100, lat_us=lat, lat_iters=100),
        P2PResult(
            bytes=1 << 20, iters=50, bw_gbs=45.0, cpu_s_per_gb={"client": 0.1, "server": None}
        ),
    )
    return BenchRun(P2PMeta(transport="rdma", mode="both", measured=setup), rows)


RUNS = {
    "measured collective": _measured_collective,
    "measured p2p": _measured_p2p,
    "nccl-tests text": lambda: importers.load(LOGS / "nccl-tests-2025_all_reduce_perf.log"),
    "nccl-tests -J": lambda: importers.load(LOGS / "nccl-tests-json_reduce_scatter.json"),
    "nccl-tests tagged run 2": lambda: importers.parse_runs(
        (LOGS / "nccl-tests-nompi-tagged_all_reduce_perf.log").read_text(), "t.log"
    )[1],
    "perftest text": lambda: importers.load(LOGS / "perftest-ib_write_bw-MiB-roce.log"),
    "perftest latency": lambda: importers.load(LOGS / "perftest-ib_write_lat.log"),
    "perftest --out_json": lambda: importers.load(LOGS / "perftest-ib_write_bw-gbits.json"),
}


@pytest.mark.parametrize("name", RUNS)
def test_every_kind_and_source_round_trips(name):
    run = RUNS[name]()
    doc = json.loads(json.dumps(run.to_data(), allow_nan=False))
    back = bench_run_from_json(doc, source=name)
    assert back == run
    assert back.to_data() == doc


def _saved(**changes):
    doc = json.loads(json.dumps(_measured_collective().to_data()))
    doc.update(changes)
    return doc


@pytest.mark.parametrize(
    ("changes", "needle"),
    [
        ({"world_size": "4"}, "world_size: must be a whole number"),
        ({"world_size": 0}, "world_size: 0 is outside"),
        ({"setup_s": -1.0}, "setup_s: -1.0 is outside"),
        ({"hosts": ["node0\x1b[2J"]}, "hosts[0]: holds control or non-printable characters"),
        ({"per_rank": {"rank": 0}}, "per_rank: must be a list"),
        ({"per_rank": [{"host": "a"}]}, "per_rank[0].rank: is missing"),
        (
            {"spread": [{"bytes": 8, "time_us": {"min": 1, "median": "x", "max": 2}}]},
            "spread[0].time_us.median: must be a finite number",
        ),
        ({"settings": {"NCCL_ALGO": ["Ring"]}}, "settings.NCCL_ALGO: must be a plain value"),
        (
            {
                "stragglers": [
                    {
                        "kind": "node",
                        "share": 0.5,
                        "worst_share": 0.5,
                        "rows_late": 1,
                        "rows_judged": 1,
                    }
                ]
            },
            "stragglers[0].kind: must be one of",
        ),
        (
            {
                "results": [
                    {
                        "bytes": 8,
                        "count": 2,
                        "time_us": 1.0,
                        "algbw_gbs": float("inf"),
                        "busbw_gbs": 0.0,
                    }
                ]
            },
            "results[0] is malformed: algbw_gbs: must be a finite number",
        ),
        (
            {
                "results": [
                    {"bytes": -8, "count": 2, "time_us": 1.0, "algbw_gbs": 1.0, "busbw_gbs": 0.0}
                ]
            },
            "results[0] is malformed: bytes: -8 is outside",
        ),
    ],
)
def test_a_file_from_another_node_is_checked_field_by_field(changes, needle):
    with pytest.raises(InputError) as e:
        bench_run_from_json(_saved(**changes), source="other.json")
    assert needle in e.value.message and e.value.message.startswith("other.json: ")
    assert "--save" in (e.value.hint or "")


def test_a_minimal_document_is_still_a_run():
    run = bench_run_from_json({"kind": "collective", "results": []})
    assert (
        run.kind == "collective" and run.meta.measured is None and run.provenance.imported is None
    )
    p2p = bench_run_from_json(
        {"kind": "p2p", "results": [{"bytes": 8, "iters": 1}], "transport": "tcp", "bidir": True}
    )
    assert p2p.meta.bidir is True and p2p.meta.transport == "tcp" and p2p.meta.ceiling_gbps is None


def test_rdma_device_details_from_a_peer_are_checked():
    from ibdiag.jsonread import Fields

    with pytest.raises(ValueError, match="ready.ib_port: 0 is outside"):
        RdmaEnd.read(Fields({"device": "mlx5_0", "ib_port": 0}, "ready"))

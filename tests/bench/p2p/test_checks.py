"""Line rate (sysfs fixtures), the bandwidth finding, the [p2p] config table, and the views."""

from __future__ import annotations

import io
import json

import pytest

from ibdiag.bench.p2p.checks import CHECK_BANDWIDTH, P2PConfig, bandwidth_findings
from ibdiag.bench.p2p.linerate import (
    LineRate,
    judged_line_rate,
    netdev_line_rate,
    rdma_line_rate,
    tcp_line_rate,
)
from ibdiag.bench.p2p.views import CSV_HEADER, bandwidth_chart, csv_rows, results_table
from ibdiag.bench.results.model import BenchRun, LatencyStats, P2PResult, bench_run_from_json
from ibdiag.bench.results.p2p_meta import P2PMeta, P2PSetup
from ibdiag.config import load_config
from ibdiag.errors import InputError
from ibdiag.findings.model import Severity
from ibdiag.node.sysfs import SysfsRoot
from tests.sysfsgen.builder import Tree

# --- line rate ---------------------------------------------------------------------------------------


def test_rdma_line_rate_from_topo_fixture(fixture_root):
    rate = rdma_line_rate(SysfsRoot(fixture_root("roce-node")), "mlx5_2", 1)
    assert rate.gbps == 100.0
    assert "mlx5_2 port 1 rate 100 Gb/s (4X EDR)" == rate.source
    ndr = rdma_line_rate(SysfsRoot(fixture_root("dgx-h100")), "mlx5_0", 1)
    assert ndr.gbps == 400.0
    assert rdma_line_rate(SysfsRoot(fixture_root("dgx-h100")), "mlx9_9", 1).gbps is None


def test_netdev_line_rate(tmp_path):
    t = Tree(tmp_path)
    t.file("class/net/eth0/speed", "100000")
    t.file("class/net/eth1/speed", "-1")  # SPEED_UNKNOWN: link down or the driver does not say
    t.file("class/net/eth2/speed", "")
    sysfs = SysfsRoot(tmp_path)
    assert netdev_line_rate(sysfs, "eth0") == LineRate(100.0, "eth0 speed 100000 Mb/s")
    assert netdev_line_rate(sysfs, "eth1").gbps is None
    assert netdev_line_rate(sysfs, "eth2").gbps is None
    assert netdev_line_rate(sysfs, "eth9").gbps is None


def test_loopback_has_no_line_rate_on_the_real_machine():
    """/sys/class/net/lo/speed fails with EINVAL on Linux; the loopback address short-cuts it."""
    rate = tcp_line_rate(SysfsRoot("/"), "127.0.0.1")
    assert rate.gbps is None and "loopback" in rate.source
    assert netdev_line_rate(SysfsRoot("/"), "lo").gbps is None


def test_judged_line_rate_precedence():
    a = LineRate(100.0, "eth0 speed 100000 Mb/s")
    b = LineRate(25.0, "eth1 speed 25000 Mb/s")
    none = LineRate(None, "loopback: no line rate")
    assert judged_line_rate(a, b) == LineRate(25.0, "server eth1 speed 25000 Mb/s")
    assert judged_line_rate(a, none).gbps == 100.0
    assert judged_line_rate(none, none).gbps is None
    assert judged_line_rate(none, none, flag_gbps=400.0) == LineRate(400.0, "--line-rate-gbps")
    # the flag wins over the config, the config over both ends' facts
    assert judged_line_rate(a, b, flag_gbps=400.0, config_gbps=200.0) == LineRate(
        400.0, "--line-rate-gbps"
    )
    assert judged_line_rate(a, b, config_gbps=200.0) == LineRate(
        200.0, "config [p2p] line_rate_gbps"
    )
    assert LineRate.from_json({"gbps": True, "source": "x"}).gbps is None
    assert LineRate.from_json("junk").gbps is None
    assert LineRate.from_json(a.to_json()) == a


# --- the finding ---------------------------------------------------------------------------------------


def _row(size, gbs):
    return P2PResult(bytes=size, iters=10, bw_gbs=gbs)


ROWS = [_row(4096, 1.0), _row(2**20, 9.0), _row(2**24, 11.0)]


def _find(rows=ROWS, **kw):
    args = dict(
        transport="rdma",
        subject="rdma node-a:18516",
        line_rate_gbps=100.0,
        line_rate_source="mlx5_0 port 1",
        bidir=False,
        cfg=P2PConfig(),
    )
    args.update(kw)
    return bandwidth_findings(rows, **args)


def test_good_bandwidth_is_ok():
    (f,) = _find()
    assert f.check == CHECK_BANDWIDTH and f.severity is Severity.OK
    assert f.value == 88.0 and f.limit == 80.0 and f.unit == "Gb/s"
    assert "at 16 MiB" in f.message and "88%" in f.message


def test_low_rdma_bandwidth_fails_with_hint():
    (f,) = _find(line_rate_gbps=200.0)
    assert f.severity is Severity.FAIL
    assert "only 44%" in f.message and "expected at least 80%" in f.message
    assert "ibdiag counters" in f.hint


def test_low_tcp_bandwidth_warns_unless_configured_to_fail():
    (f,) = _find(transport="tcp", line_rate_gbps=200.0)
    assert f.severity is Severity.WARN and "--streams" in f.hint
    (g,) = _find(transport="tcp", line_rate_gbps=200.0, cfg=P2PConfig(tcp_severity="fail"))
    assert g.severity is Severity.FAIL


def test_only_large_sizes_are_judged_and_unknown_rate_gives_nothing():
    assert _find(rows=[_row(4096, 1.0), _row(65536, 2.0)]) == []
    assert _find(line_rate_gbps=None) == []
    (f,) = _find(rows=[_row(4096, 50.0), _row(2**20, 9.0)])
    assert f.value == 72.0  # the 4 KiB row is not judged even though it is faster


def test_bidirectional_is_judged_against_both_directions():
    (f,) = _find(bidir=True, line_rate_gbps=50.0)  # 88 Gb/s of 100 Gb/s both ways
    assert f.severity is Severity.OK and f.limit == 80.0 and "both directions" in f.message


def test_p2p_config_table(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text(
        '[p2p]\nmin_bw_share = 0.9\njudge_min_bytes = 65536\ntcp_severity = "fail"\nline_rate_gbps = 25\n'
    )
    loaded = load_config(p)
    assert loaded.section("p2p", P2PConfig) == P2PConfig(
        min_bw_share=0.9, judge_min_bytes=65536, tcp_severity="fail", line_rate_gbps=25.0
    )
    assert loaded.notes == ()
    for bad in (
        "min_bw_share = 1.5",
        'tcp_severity = "error"',
        "judge_min_bytes = 0",
        "line_rate_gbps = -1",
        "speed = 1",
    ):
        p.write_text(f"[p2p]\n{bad}\n")
        with pytest.raises(InputError):
            load_config(p).section("p2p", P2PConfig)


def test_the_old_bench_table_is_read_as_p2p_with_a_note(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text("[bench]\nmin_bw_share = 0.9\n")
    loaded = load_config(p)
    assert loaded.section("p2p", P2PConfig).min_bw_share == 0.9
    (note,) = loaded.notes
    assert "[bench] is deprecated: it is read as [p2p]" in note and str(p) in note
    p.write_text('[bench]\nmin_bw_share = "high"\n')
    with pytest.raises(
        InputError, match=r"\[bench\] min_bw_share must be a number"
    ):  # named as written
        load_config(p).section("p2p", P2PConfig)
    p.write_text("[bench]\nmin_bw_share = 0.9\n[p2p]\nmin_bw_share = 0.7\n")
    with pytest.raises(InputError, match=r"\[bench\] and \[p2p\] are both set"):
        load_config(p)


# --- views ------------------------------------------------------------------------------------------------

LAT = LatencyStats(min_us=4.0, p50_us=5.0, p99_us=9.0, p999_us=12.0, max_us=40.0, avg_us=5.5)
FULL = [
    P2PResult(
        bytes=4096,
        iters=1000,
        bw_gbs=1.25,
        msg_rate_mpps=0.305,
        lat_us=LAT,
        cpu_s_per_gb={"client": 0.5, "server": 0.25},
        elapsed_s=1.0,
        lat_iters=5000,
    ),
    P2PResult(
        bytes=2**20,
        iters=100,
        bw_gbs=10.0,
        msg_rate_mpps=0.0095,
        lat_us=None,
        cpu_s_per_gb={"client": 0.1, "server": None},
        elapsed_s=1.0,
    ),
]


def _run(results, *, line_rate_gbps=100.0):
    setup = P2PSetup(peer="h:1", line_rate=LineRate(line_rate_gbps, "--line-rate-gbps"))
    return BenchRun(P2PMeta(transport="tcp", mode="both", measured=setup), tuple(results))


def test_csv_rows_long_form():
    rows = csv_rows(_run(FULL))
    assert list(rows[0]) == list(CSV_HEADER)
    assert rows[0]["bw_gbps"] == 10.0 and rows[0]["line_rate_share"] == 0.1
    assert rows[0]["lat_p50_us"] == 5.0 and rows[0]["lat_iters"] == 5000
    assert rows[1]["lat_p50_us"] is None and rows[1]["cpu_server_s_per_gb"] is None


@pytest.mark.parametrize(
    ("transport", "mode", "verb", "engine", "test"),
    [
        ("tcp", "both", None, None, "tcp_bw+tcp_lat"),
        ("tcp", "lat", None, None, "tcp_lat"),
        ("rdma", "bw", None, "ibdiag", "ib_write_bw"),  # a file written before --verb: write
        ("rdma", "lat", "read", "ibdiag", "ib_read_lat"),
        ("rdma", "bw", "send", "perftest", "ib_send_bw"),
        ("rdma", "both", "write", "perftest", "ib_write_bw+ib_write_lat"),
    ],
)
def test_csv_names_the_test_that_ran_as_perftest_names_it(transport, mode, verb, engine, test):
    """The ``test`` column of a measured run: perftest's name of what ran (the importer's values for
    perftest logs), the same whichever engine measured; it survives the saved JSON."""
    from ibdiag.bench.results.p2p_meta import RdmaEnd, RdmaPath

    end = RdmaEnd("rxe0", 1, 1, None, None, "Ethernet", 1024)
    rdma = RdmaPath(end, end, 1024, 128, verb=verb) if transport == "rdma" else None
    setup = P2PSetup(peer="h:1", rdma=rdma, engine=engine)
    run = BenchRun(P2PMeta(transport=transport, mode=mode, measured=setup), tuple(FULL))
    assert [r["test"] for r in csv_rows(run)] == [test] * len(FULL)
    assert csv_rows(bench_run_from_json(json.loads(json.dumps(run.to_data()))))[0]["test"] == test


def test_chart_marks_the_line_rate():
    chart = bandwidth_chart(_run(FULL))
    lines = chart.splitlines()
    assert lines[0].startswith("4 KiB") and "10 Gb/s" in lines[0]
    assert lines[1].startswith("1 MiB") and "80 Gb/s" in lines[1]
    assert "100 Gb/s line rate" in lines[-1]
    assert (
        bandwidth_chart(_run([P2PResult(bytes=8, iters=1, lat_us=LAT)], line_rate_gbps=None))
        is None
    )


def test_table_has_perftest_columns():
    from rich.console import Console

    buf = io.StringIO()
    Console(file=buf, width=250).print(results_table(_run(FULL)))
    text = buf.getvalue()
    for col in (
        "size",
        "BW GB/s",
        "BW Gb/s",
        "of line",
        "Mmsg/s",
        "lat iters",
        "p99.9 µs",
        "CPU s/GB client",
    ):
        assert col in text
    assert "4 KiB" in text and "10.00" in text and "80%" in text


def test_bench_json_round_trip_keeps_lat_iters():
    run = BenchRun(
        P2PMeta(transport="tcp", mode="both", measured=P2PSetup(peer="h:1")), tuple(FULL)
    )
    doc = json.loads(json.dumps(run.to_data()))
    back = bench_run_from_json(doc)
    assert back.results == run.results
    assert back.meta.measured.peer == "h:1"


def test_png_chart_when_matplotlib_is_installed(tmp_path):
    pytest.importorskip("matplotlib")
    from ibdiag.bench.p2p.views import write_png

    target = tmp_path / "bw.png"
    write_png(_run(FULL), target)
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

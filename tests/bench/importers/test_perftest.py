"""perftest output -> BenchRun (kind p2p): units, duration mode, latency, --out_json, errors."""

from __future__ import annotations

import pytest

from ibdiag.bench import importers
from ibdiag.bench.importers import perftest
from ibdiag.bench.importers.checks import import_findings
from ibdiag.errors import InputError
from ibdiag.findings.model import Severity
from tests.support.env import FIXTURES

LOGS = FIXTURES / "logs"
SEP = "-" * 87

BW = f"""\
{SEP}
                    RDMA_Write BW Test
 Dual-port       : OFF\t\tDevice         : mlx5_2
 Number of qps   : 1\t\tTransport type : IB
 Connection type : RC\t\tUsing SRQ      : OFF
 Mtu             : 4096[B]
 Link type       : IB
 rdma_cm QPs\t : OFF
{SEP}
 local address: LID 0x0b QPN 0x00e9 PSN 0x5a3b1c RKey 0x1fff00 VAddr 0x00561d8f2c9000
 remote address: LID 0x0c QPN 0x00ea PSN 0x9d0e77 RKey 0x1fff01 VAddr 0x0055b0c1a17000
{SEP}
 #bytes     #iterations    BW peak[UNIT]    BW average[UNIT]   MsgRate[Mpps]
 65536      5000             PEAK            AVG\t\t   RATE
{SEP}
"""


def _bw(unit: str, peak: str, avg: str, rate: str = "0.100000") -> str:
    return BW.replace("UNIT", unit).replace("PEAK", peak).replace("AVG", avg).replace("RATE", rate)


@pytest.mark.parametrize(
    ("unit", "gbs"),
    [
        ("MB/sec", 1000.0 * 2**20 / 1e9),  # old header: still 2^20 B/s
        ("MiB/sec", 1000.0 * 2**20 / 1e9),
        ("Gb/sec", 1000.0 / 8),  # 1e9 bit/s
    ],
)
def test_bandwidth_units(unit, gbs):
    run = importers.parse_text(_bw(unit, "1001.00", "1000.00"), "bw.log")
    r = run.results[0]
    assert run.kind == "p2p"
    assert (r.bytes, r.iters, r.msg_rate_mpps) == (65536, 5000, 0.1)
    assert r.bw_gbs == pytest.approx(gbs)
    assert r.bw_peak_gbs == pytest.approx(gbs * 1.001)
    m = run.meta.perftest
    assert (m.test, m.verb, run.meta.mode, m.device, m.link_layer, m.bw_unit) == (
        "ib_write_bw",
        "write",
        "bw",
        "mlx5_2",
        "IB",
        unit,
    )
    assert m.local_address.startswith("LID 0x0b")


def test_duration_mode_peak_is_not_measured():
    run = importers.parse_text(_bw("MiB/sec", "0.00", "11000.00"), "d.log")
    assert run.results[0].bw_peak_gbs is None
    assert run.meta.perftest.peak_measured is False


def test_six_decimals_and_tabs():
    run = importers.parse_text(_bw("Gb/sec", "0.043210", "0.043187", "2.699188"), "g.log")
    assert run.results[0].bw_gbs == pytest.approx(0.043187 / 8)


LAT = f"""\
{SEP}
                    Send Latency Test
 Dual-port       : OFF\t\tDevice         : mlx5_0
 Link type       : Ethernet
 GID index       : 3
{SEP}
 local address: LID 0000 QPN 0x0108 PSN 0x3b9f2a
 GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:00:01:05
 remote address: LID 0000 QPN 0x0109 PSN 0x8c21d4
 GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:00:01:06
{SEP}
 #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] 
 2       1000          1.71           8.92         1.77     \t       1.79        \t0.06   \t\t2.01    \t\t8.92   
{SEP}
"""


def test_latency_percentiles():
    run = importers.parse_text(LAT, "lat.log")
    lat = run.results[0].lat_us
    assert (lat.min_us, lat.p50_us, lat.avg_us, lat.p99_us, lat.p999_us, lat.max_us) == (
        1.71,
        1.77,
        1.79,
        2.01,
        8.92,
        8.92,
    )
    assert (run.meta.perftest.test, run.meta.perftest.latency, run.meta.perftest.gid_index) == (
        "ib_send_lat",
        "one way (round trip / 2)",
        "3",
    )


def test_latency_duration_mode():
    text = LAT.replace(
        " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ",
        " #bytes        #iterations       t_avg[usec]    tps average",
    ).replace(
        " 2       1000          1.71           8.92         1.77     \t       1.79        \t0.06   \t\t2.01    \t\t8.92   ",
        " 2             2793296           1.79           558659.22",
    )
    run = importers.parse_text(text, "latd.log")
    r = run.results[0]
    assert (
        r.lat_us is None and r.lat_avg_us == 1.79 and r.msg_rate_mpps == pytest.approx(0.55865922)
    )
    assert run.meta.perftest.duration_mode is True


def test_read_latency_is_a_round_trip():
    run = importers.load(LOGS / "perftest-ib_read_lat-duration.log")
    assert (run.meta.perftest.verb, run.meta.perftest.latency) == ("read", "round trip")


def test_noise_lines_are_skipped_a_bad_row_is_not():
    text = (
        "Conflicting CPU frequency values detected: 1500.000000 != 3400.000000. CPU Frequency is not max.\n"
        + _bw("MiB/sec", "1.00", "1.00")
    )
    assert len(importers.parse_text(text, "n.log").results) == 1
    noisy = _bw("MiB/sec", "1.00", "1.00").replace(
        " Link type       : IB\n", " Link type       : IB\nthe cat walked over the keyboard\n"
    )
    run = importers.parse_text(noisy, "cat.log")
    assert (
        run.results == importers.parse_text(_bw("MiB/sec", "1.00", "1.00"), "bare.log").results
        and run.provenance.skipped_lines == 1
    )
    assert run.meta.perftest.link_layer == "IB"
    bad = _bw("MiB/sec", "1.00", "1.00").replace("MsgRate[Mpps]\n", "MsgRate[Mpps]\n 4 1000 1.0\n")
    with pytest.raises(InputError) as e:
        importers.parse_text(bad, "row.log")
    assert "row.log:" in e.value.message and "expected 5 columns" in e.value.message


def test_perftest_error_lines_are_failures():
    text = (
        _bw("MiB/sec", "1.00", "1.00").split(" #bytes")[0] + " Couldn't connect to 10.0.0.2:18515\n"
    )
    run = importers.parse_text(text, "e.log")  # the run is read, and its failure named
    assert (
        run.results == ()
        and run.provenance.failure == "line 13: Couldn't connect to 10.0.0.2:18515"
    )
    assert run.meta.perftest.test == "ib_write_bw" and run.meta.perftest.device == "mlx5_2"
    failed = [f for f in import_findings(run) if f.check == "import.run_failed"]
    assert failed and failed[0].severity is Severity.FAIL and "line 13" in failed[0].message


def test_bad_rows_and_headers():
    with pytest.raises(InputError, match=r"r.log:14: expected 5 columns"):
        importers.parse_text(_bw("MiB/sec", "1.00", "1.00").replace("\t\t   0.100000", ""), "r.log")
    with pytest.raises(InputError, match=r"u.log:13: unknown perftest column"):
        importers.parse_text(
            _bw("MiB/sec", "1.00", "1.00").replace("MsgRate[Mpps]", "Jitter[ms]"), "u.log"
        )
    with pytest.raises(InputError, match=r"unknown bandwidth unit"):
        importers.parse_text(_bw("KB/sec", "1.00", "1.00"), "k.log")


def test_json_unit_is_told_by_the_message_rate():
    gbits = importers.load(LOGS / "perftest-ib_write_bw-gbits.json")
    assert (gbits.meta.perftest.bw_unit, gbits.meta.perftest.bw_unit_assumed) == ("Gb/sec", False)
    assert gbits.results[0].bw_gbs == pytest.approx(186.42 / 8)
    loose = importers.load(LOGS / "perftest-ib_write_bw-loose.json")  # bare words, trailing commas
    assert (loose.meta.perftest.bw_unit, loose.meta.perftest.device, loose.meta.perftest.test) == (
        "MiB/sec",
        "mlx5_0",
        "ib_write_bw",
    )
    assert loose.results[0].bw_gbs == pytest.approx(23430.17 * 2**20 / 1e9)


def test_json_without_rate_assumes_mib_and_says_so():
    run = importers.parse_text(
        '{"results": [{"MsgSize": 65536, "n_iterations": 10, "BW_peak": 0, "BW_average": 100.0}]}',
        "j.json",
    )
    assert run.meta.perftest.bw_unit_assumed is True and run.results[0].bw_peak_gbs is None
    with pytest.raises(InputError, match="not JSON"):
        importers.parse_text('{"results": {"MsgSize": 65536, "BW_average": }', "broken.json")


FIXTURES = [
    ("perftest-ib_write_bw-MB.log", "ib_write_bw", 23, "MB/sec"),
    ("perftest-ib_write_bw-MiB-roce.log", "ib_write_bw", 1, "MiB/sec"),
    ("perftest-ib_send_bw-gbits.log", "ib_send_bw", 16, "Gb/sec"),
    ("perftest-ib_write_bw-duration.log", "ib_write_bw", 1, "MiB/sec"),
]


@pytest.mark.parametrize(("name", "test", "rows", "unit"), FIXTURES)
def test_bandwidth_fixtures_are_consistent(name, test, rows, unit):
    run = importers.load(LOGS / name)
    assert (run.meta.perftest.test, len(run.results), run.meta.perftest.bw_unit) == (
        test,
        rows,
        unit,
    )
    for r in run.results:
        # MsgRate x size is the bandwidth: the unit was read right
        assert r.msg_rate_mpps * 1e6 * r.bytes / 1e9 == pytest.approx(r.bw_gbs, rel=0.01)


def test_latency_fixture():
    run = importers.load(LOGS / "perftest-ib_write_lat.log")
    assert len(run.results) == 13
    assert all(
        r.lat_us.min_us <= r.lat_us.p50_us <= r.lat_us.p99_us <= r.lat_us.max_us
        for r in run.results
    )


def test_two_perftest_runs_are_separate():
    text = _bw("MiB/sec", "1.00", "1.00") + LAT
    runs = perftest.parse_log(text, "two.log")
    assert [r.meta.mode for r in runs] == ["bw", "lat"]
    with pytest.raises(InputError, match="2 runs"):
        importers.parse_text(text, "two.log")

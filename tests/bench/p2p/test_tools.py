"""``--engine iperf3`` and ``--engine sockperf``: their output read into ibdiag's model (outputs written by
the project in the shapes those tools print, real ones listed in docs/bench-p2p.md), and the real
tools driven by a real server over loopback — alone, beside ibdiag's loops, and beside each other."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import pytest

from ibdiag.bench.p2p import serve as serve_module
from ibdiag.bench.p2p.client import ClientOptions, run_p2p
from ibdiag.bench.p2p.command import P2PRequest, run, with_engines
from ibdiag.bench.p2p.control.protocol import ProtocolError, RemoteError
from ibdiag.bench.p2p.external.output import UnreadableResult
from ibdiag.bench.p2p.external.process import live_count
from ibdiag.bench.p2p.params import RunRequest
from ibdiag.bench.p2p.tcptools import iperf3, sockperf
from ibdiag.errors import CannotRunError
from tests.support.env import need_tool
from tests.support.p2p import server_thread, tool_processes

# --- iperf3's -J document ------------------------------------------------------------------------------


def _iperf3_doc(streams: list[tuple[int, float]], *, bidir_back: int | None = None) -> str:
    """An iperf3 3.12 ``-J -i 0`` document: each stream's receiver (bytes, seconds), sums, CPU."""
    total = sum(b for b, _ in streams)
    secs = max(s for _, s in streams)
    end: dict[str, object] = {
        "streams": [
            {
                "sender": {"socket": 5 + i, "bytes": b, "seconds": s, "sender": True},
                "receiver": {"socket": 5 + i, "bytes": b, "seconds": s, "sender": True},
            }
            for i, (b, s) in enumerate(streams)
        ],
        "sum_sent": {"start": 0, "end": secs, "seconds": secs, "bytes": total, "sender": True},
        "sum_received": {"start": 0, "end": secs, "seconds": secs, "bytes": total, "sender": True},
        "cpu_utilization_percent": {"host_total": 40.0, "remote_total": 25.0},
        "sender_tcp_congestion": "cubic",
    }
    if bidir_back is not None:
        end["sum_received_bidir_reverse"] = {"seconds": secs, "bytes": bidir_back, "sender": False}
    doc = {"start": {"version": "iperf 3.12"}, "intervals": [], "end": end}
    return json.dumps(doc, indent="\t")


def test_iperf3_receiver_figures_become_the_row():
    req = RunRequest(transport="tcp", mode="bw", sizes=(2**20,), streams=2, engine="iperf3")
    # iperf3 counts bytes, not writes: a partial last write leaves bytes / size fractional
    out = "warning: something iperf3 said on stderr\n" + _iperf3_doc(
        [(1_300_000_000, 1.0), (1_200_000_000, 1.0)]
    )
    row = iperf3.read_result(out, req, 2**20, "iperf3 1 MiB")
    assert row.bw_gbs == pytest.approx(2.5) and row.iters == 2_500_000_000 // 2**20
    assert row.msg_rate_mpps == pytest.approx(row.iters / 1.0 / 1e6)
    # per cent of one CPU over the test -> CPU seconds per GB received
    assert row.cpu_s_per_gb["client"] == pytest.approx(0.40 / 2.5)
    assert row.cpu_s_per_gb["server"] == pytest.approx(0.25 / 2.5)
    assert [s.bw_gbs for s in row.per_stream] == [pytest.approx(1.3), pytest.approx(1.2)]


def test_iperf3_bidir_is_the_sum_of_both_directions():
    req = RunRequest(transport="tcp", mode="bw", sizes=(65536,), bidir=True, engine="iperf3")
    row = iperf3.read_result(
        _iperf3_doc([(1_000_000_000, 2.0)], bidir_back=600_000_000), req, 65536, "w"
    )
    assert row.bw_gbs == pytest.approx(0.8) and row.per_stream == ()  # one stream: no list


def test_iperf3_output_that_is_no_measurement_is_refused():
    req = RunRequest(transport="tcp", mode="bw", sizes=(131072,), engine="iperf3")
    # iperf 3.9's shape for a transfer too short for the server to count: 0 bytes received
    zero = _iperf3_doc([(0, 0.001)])
    with pytest.raises(UnreadableResult, match="receiver counted no bytes"):
        iperf3.read_result(zero, req, 131072, "iperf3 128 KiB")
    failed = json.dumps(
        {
            "start": {},
            "intervals": [],
            "end": {},
            "error": "unable to connect to server: Connection refused\n\x1b[31m",
        }
    )
    with pytest.raises(
        CannotRunError,
        match=r"iperf3 failed: unable to connect to server: Connection refused\\n\\x1b",
    ) as e:
        iperf3.read_result(failed, req, 131072, "iperf3 128 KiB")
    assert not isinstance(e.value, UnreadableResult)  # a failure is not run again
    for junk in (
        "iperf3: error - the server is busy running a test",
        '{"end": {"sum_received": {"bytes": "many"}}}',
    ):
        with pytest.raises(UnreadableResult):
            iperf3.read_result(junk, req, 131072, "iperf3 128 KiB")


def test_iperf3_command_lines_map_ibdiags_options():
    req = RunRequest(
        transport="tcp",
        mode="bw",
        sizes=(65536,),
        iters=1000,
        streams=4,
        bidir=True,
        engine="iperf3",
    )
    argv = iperf3.client_argv("iperf3", req, 65536, 5999, "10.0.0.1", socket_buffer=2**21)
    assert argv == [
        "iperf3",
        "-c",
        "10.0.0.1",
        "-p",
        "5999",
        "-l",
        "65536",
        "-k",
        "4000",
        "-P",
        "4",
        "-w",
        "2097152",
        "--bidir",
        "-J",
        "-i",
        "0",
    ]
    timed = RunRequest(transport="tcp", mode="bw", sizes=(65536,), duration_s=3.0, engine="iperf3")
    assert iperf3.client_argv("iperf3", timed, 65536, 1, "h")[7:9] == ["-t", "3"]
    assert iperf3.server_argv("iperf3", "10.0.0.2", 5999) == [
        "iperf3",
        "-s",
        "-1",
        "-B",
        "10.0.0.2",
        "-p",
        "5999",
    ]
    assert iperf3.parse_version("iperf 3.12 (cJSON 1.7.15)\nLinux vm 6.1") == "3.12"


# --- sockperf's histogram --------------------------------------------------------------------------------

SOCKPERF_37 = """\
sockperf: \x1b[2;35m== version #3.7-no.git == \x1b[0m
sockperf[CLIENT] send on:sockperf: using recvfrom() to block on socket(s)
[ 0] IP = 10.20.0.1       PORT = 41001 # TCP
sockperf: Warmup stage (sending a few dummy messages)...
sockperf: Starting test...
sockperf: Test end (interrupted by timer)
sockperf: Test ended
sockperf: [Total Run] RunTime=2.000 sec; Warm up time=400 msec; SentMessages=120400; ReceivedMessages=120399
sockperf: ========= Printing statistics for Server No: 0
sockperf: [Valid Duration] RunTime=1.550 sec; SentMessages=93310; ReceivedMessages=93310
sockperf: \x1b[2;35m====> avg-latency=8.204 (std-dev=3.117)\x1b[0m
sockperf: # dropped messages = 0; # duplicated messages = 0; # out-of-order messages = 0
sockperf: Summary: Latency is 8.204 usec
sockperf: \x1b[2;35mTotal 93310 observations\x1b[0m; each percentile contains 933.10 observations
sockperf: ---> <MAX> observation =  912.440
sockperf: ---> percentile 99.999 =  640.125
sockperf: ---> percentile 99.990 =  301.770
sockperf: ---> percentile 99.900 =   44.016
sockperf: ---> percentile 99.000 =   12.905
sockperf: ---> percentile 90.000 =    9.113
sockperf: ---> percentile 75.000 =    8.402
sockperf: ---> percentile 50.000 =    7.950
sockperf: ---> percentile 25.000 =    7.714
sockperf: ---> <MIN> observation =    7.388
"""


def _shaped(text: str, prefix: str) -> str:
    return "".join(prefix + line + "\n" for line in text.splitlines())


def test_sockperf_histogram_is_one_way_latency():
    row = sockperf.read_result(SOCKPERF_37, 14, "sockperf 14 B")
    lat = row.lat_us
    assert lat is not None and row.iters == 93310 and row.bw_gbs is None
    assert (lat.min_us, lat.p50_us, lat.p99_us, lat.p999_us, lat.max_us, lat.avg_us) == (
        7.388,
        7.950,
        12.905,
        44.016,
        912.440,
        8.204,
    )


@pytest.mark.parametrize(
    "shape",
    [
        _shaped(SOCKPERF_37, "[STDOUT] "),  # a CI log's prefix before every line
        _shaped(SOCKPERF_37.replace("sockperf: ", ""), ">   "),  # quoted in a mail, without the tag
    ],
)
def test_sockperf_histogram_read_through_the_shapes_logs_give_it(shape):
    assert (
        sockperf.read_result(shape, 14, "w").lat_us
        == sockperf.read_result(SOCKPERF_37, 14, "w").lat_us
    )


def test_a_full_rtt_histogram_is_halved():
    rtt = SOCKPERF_37.replace(
        "Summary: Latency is 8.204 usec", "Summary: Round trip is 16.408 usec"
    )
    rtt = rtt.replace("avg-latency=8.204", "avg-rtt=16.408")
    lat = sockperf.read_result(rtt, 14, "w").lat_us
    assert (
        lat is not None
        and lat.p50_us == pytest.approx(7.950 / 2)
        and lat.avg_us == pytest.approx(8.204)
    )


def test_sockperf_output_that_is_no_measurement_is_refused():
    cut = SOCKPERF_37.split("sockperf: ---> percentile 99.000")[0]
    with pytest.raises(UnreadableResult, match="no latency histogram"):
        sockperf.read_result(cut, 14, "sockperf 14 B")
    err = "sockperf: ERROR: A connection was forcibly closed by a peer (errno=0 Success)\n"
    with pytest.raises(CannotRunError, match="sockperf failed: .*forcibly closed") as e:
        sockperf.read_result(err, 65536, "sockperf 64 KiB")
    assert not isinstance(e.value, UnreadableResult)
    assert sockperf.parse_version("sockperf, version 3.7-no.git\n   compiled 2021") == "3.7-no.git"


# --- the real tools over loopback, driven by a real server ---------------------------------------------


def _leftovers() -> list[str]:
    return tool_processes(("iperf3", "sockperf"), os.getpid())


def _measure(port: int, req: RunRequest, engine: str, path: str | None = None):
    return run(
        P2PRequest(
            host="127.0.0.1",
            port=port,
            run_request=req,
            engine=engine,
            timeout_s=10.0,
            environ={"PATH": path or os.environ.get("PATH", "")},
        )
    )


@pytest.fixture
def tools():
    need_tool("iperf3")
    need_tool("sockperf")
    yield
    deadline = time.monotonic() + 5
    while _leftovers() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _leftovers() == [] and live_count() == 0


def _doc(result) -> dict:
    """The run's JSON document (what -o json prints)."""
    return json.loads(json.dumps(result.report.data))


def test_iperf3_measures_every_size_with_per_stream_figures(tools):
    req = RunRequest(transport="tcp", mode="bw", sizes=(65536, 2**20), duration_s=1.0, streams=2)
    with server_thread() as (port, log, _):
        doc = _doc(_measure(port, req, "iperf3"))
        log.wait_for(r"done in")
    assert (doc["engine"], doc["engines"]) == ("iperf3", {"bw": "iperf3"})
    assert doc["iperf3_version"] == doc["iperf3_server_version"] == "3.12"
    assert [" -l 65536 -t 1 -P 2 -J -i 0" in c for c in doc["iperf3_commands"]] == [True, False]
    assert " -l 1048576 -t 1 -P 2 " in doc["iperf3_commands"][1]
    assert all(" -s -1 -B 127.0.0.1 " in c for c in doc["iperf3_server_commands"])
    rows = doc["results"]
    assert [r["bytes"] for r in rows] == [65536, 2**20]
    for r in rows:
        assert r["bw_gbs"] > 0.05 and len(r["per_stream"]) == 2 and r["lat_us"] is None
        moved = sum(s["bytes"] for s in r["per_stream"])
        assert moved == pytest.approx(r["bw_gbs"] * 1e9 * r["elapsed_s"], rel=0.02)
        assert r["cpu_s_per_gb"]["client"] > 0 and r["cpu_s_per_gb"]["server"] > 0
    assert "busy_poll_us" not in doc  # ibdiag's loops measured no latency


def test_sockperf_measures_latency_and_its_server_is_stopped(tools):
    req = RunRequest(transport="tcp", mode="lat", sizes=(14, 1024), duration_s=1.0)
    with server_thread() as (port, log, _):
        doc = _doc(_measure(port, req, "sockperf"))
        log.wait_for(r"done in")
    assert (doc["engine"], doc["engines"]) == ("sockperf", {"lat": "sockperf"})
    assert all(c.endswith(" -t 1") for c in doc["sockperf_commands"])
    for r in doc["results"]:
        lat = r["lat_us"]
        assert 0 < lat["min"] <= lat["p50"] <= lat["p99"] <= lat["p999"] <= lat["max"]
        assert r["iters"] > 100 and r["bw_gbs"] is None


@pytest.mark.parametrize(
    "engine,engines",
    [
        ("iperf3,sockperf", {"bw": "iperf3", "lat": "sockperf"}),
        ("iperf3,ibdiag", {"bw": "iperf3", "lat": "ibdiag"}),
        ("ibdiag,sockperf", {"bw": "ibdiag", "lat": "sockperf"}),
    ],
)
def test_two_engines_measure_one_run_each_its_kind(tools, engine, engines):
    req = RunRequest(transport="tcp", mode="both", sizes=(1024, 16384), duration_s=1.0)
    with server_thread() as (port, log, _):
        doc = _doc(_measure(port, req, engine))
        log.wait_for(r"done in")
    assert doc["engines"] == engines and doc["engine"] == "+".join(engines.values())
    for r in doc["results"]:
        assert r["bw_gbs"] > 0 and r["lat_us"]["p50"] > 0 and r["lat_iters"] > 0
        # ibdiag's own latency says how each side waited; a tool's does not
        assert ("lat_busy_poll" in r) == (engines["lat"] == "ibdiag")
    tools_used = {e for e in engines.values() if e != "ibdiag"}
    assert {t for t in ("iperf3", "sockperf") if f"{t}_commands" in doc} == tools_used


def test_auto_over_tcp_is_ibdiags_own_loops(tools):
    req = RunRequest(transport="tcp", mode="both", sizes=(4096,), iters=200, warmup=2)
    with server_thread() as (port, _, _):
        doc = _doc(_measure(port, req, "auto"))
    assert doc["engines"] == {"bw": "ibdiag", "lat": "ibdiag"} and "iperf3_commands" not in doc
    assert doc["busy_poll_us"] == 200 and set(doc["results"][0]["lat_busy_poll"]) == {
        "client",
        "server",
    }


def test_a_tool_missing_on_either_end_is_a_clear_exit_3(tools, tmp_path):
    req = RunRequest(transport="tcp", mode="bw", sizes=(65536,), duration_s=1.0)
    with server_thread(perftest_path=str(tmp_path)) as (port, log, server):
        assert server.engines == ("ibdiag",)  # nothing on its PATH: it says so to clients
        with pytest.raises(RemoteError, match="iperf3 is not installed on the server") as e:
            _measure(port, req, "iperf3")
        assert e.value.exit_status == 3 and "apt install iperf3" in (e.value.hint or "")
        log.wait_for(r"dropped: iperf3 is not installed on the server")
        # missing here: refused before connecting (the server hears nothing)
        seen = len(log.lines)
        with pytest.raises(CannotRunError, match="iperf3 is not installed on this host"):
            _measure(port, req, "iperf3", path=str(tmp_path))
        time.sleep(0.2)
        assert len(log.lines) == seen


def test_a_server_that_does_not_say_it_runs_the_tool_is_refused(tools, monkeypatch):
    """A server from before the tools reads ``engine: iperf3`` as nothing it knows and would measure
    with its own loops: its ``ready`` lacks the engines asked for, and the client stops (exit 3)."""
    real = serve_module.serve_run
    monkeypatch.setattr(
        serve_module, "serve_run", lambda ch, side, rate, engines: real(ch, side, rate, {})
    )
    req = RunRequest(transport="tcp", mode="bw", sizes=(65536,), duration_s=1.0)
    with server_thread() as (port, _, _):
        with pytest.raises(ProtocolError, match="does not run iperf3") as e:
            _measure(port, req, "iperf3")
    assert e.value.exit_status == 3


def test_the_servers_iperf3_killed_mid_run_is_exit_3_with_both_ends_words(tools):
    req = with_engines(
        RunRequest(transport="tcp", mode="bw", sizes=(65536,), duration_s=5.0), "iperf3"
    )
    opts = ClientOptions(host="127.0.0.1", timeout_s=10.0)
    errors: list[BaseException] = []
    with server_thread() as (port, _, _):

        def client() -> None:
            try:
                run_p2p(req, ClientOptions(host="127.0.0.1", port=port, timeout_s=opts.timeout_s))
            except BaseException as e:  # handed to the test below
                errors.append(e)

        t = threading.Thread(target=client)
        t.start()
        deadline = time.monotonic() + 15
        servers: list[str] = []
        while time.monotonic() < deadline and not servers:
            servers = [
                p
                for p in _leftovers()
                if " -s " in open(f"/proc/{p}/cmdline").read().replace("\0", " ")
            ]
            time.sleep(0.05)
        assert servers, "the server's iperf3 never started"
        time.sleep(1.0)
        os.kill(int(servers[0]), signal.SIGKILL)
        t.join(30)
    (err,) = errors
    assert isinstance(err, CannotRunError) and err.exit_status == 3
    # iperf3 -J reports its failure in its document; the server's own end says why
    assert err.message.startswith("iperf3 64 KiB: iperf3 failed: ")
    assert "; the server's iperf3: killed by signal 9 (SIGKILL)" in err.message
    assert "this host ran: " in (err.hint or "") and " -s -1 " in (err.hint or "")

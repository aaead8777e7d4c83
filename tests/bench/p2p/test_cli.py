"""``ibdiag bench p2p`` in-process against a real server (library ``Server`` in a thread, loopback TCP)."""

from __future__ import annotations

import io
import json
import os
import socket
import threading

import pytest

from ibdiag.bench.p2p.client import ClientOptions, run_p2p
from ibdiag.bench.p2p.control.protocol import Channel, RemoteError, client_handshake
from ibdiag.bench.p2p.params import RunRequest
from ibdiag.bench.results.model import load_bench_file
from tests.support.p2p import server_thread, write_token

QUICK = ("--sizes", "4K,1M", "--iters", "20", "--warmup", "2")


@pytest.fixture
def server():
    with server_thread() as s:
        yield s


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_json_result_has_the_bench_schema(cli, server):
    port, log, _ = server
    r = cli("bench", "p2p", "127.0.0.1", "--port", port, *QUICK, "-o", "json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["schema"] == "ibdiag.bench/1" and doc["kind"] == "p2p"
    assert doc["transport"] == "tcp" and doc["mode"] == "bw" and doc["peer"] == f"127.0.0.1:{port}"
    assert doc["status"] == "ok" and doc["findings"] == []  # loopback: no line rate, no finding
    assert doc["line_rate_gbps"] is None and "loopback" in doc["line_rate_source"]
    rows = doc["results"]
    assert [row["bytes"] for row in rows] == [4096, 2**20]
    for row in rows:
        assert row["iters"] == 20
        assert row["bw_gbs"] > 0 and row["bw_gbps"] == pytest.approx(row["bw_gbs"] * 8)
        assert row["msg_rate_mpps"] == pytest.approx(
            row["bw_gbs"] * 1e9 / row["bytes"] / 1e6, rel=1e-6
        )
        assert set(row["cpu_s_per_gb"]) == {"client", "server"}
        assert row["lat_us"] is None
    assert r.stderr == ""  # silent with -o json
    log.wait_for(r"done in")


def test_both_modes_report_latency_percentiles(cli, server):
    port, _, _ = server
    r = cli(
        "bench",
        "p2p",
        "127.0.0.1",
        "--port",
        port,
        "--sizes",
        "8,64K",
        "--mode",
        "both",
        "--iters",
        "200",
        "-o",
        "json",
    )
    assert r.exit_code == 0, r.stderr
    for row in json.loads(r.stdout)["results"]:
        lat = row["lat_us"]
        assert set(lat) >= {"min", "p50", "p99", "p999", "max"}
        assert 0 < lat["min"] <= lat["p50"] <= lat["p99"] <= lat["p999"] <= lat["max"]
        assert row["lat_iters"] == 200 and row["iters"] == 200 and row["bw_gbs"] > 0


def test_latency_duration_mode(cli, server):
    port, _, _ = server
    r = cli(
        "bench",
        "p2p",
        "127.0.0.1",
        "--port",
        port,
        "--sizes",
        "8",
        "--mode",
        "lat",
        "--duration",
        "0.3",
        "-o",
        "json",
    )
    assert r.exit_code == 0, r.stderr
    (row,) = json.loads(r.stdout)["results"]
    assert row["bw_gbs"] is None and row["lat_iters"] >= 10 and row["iters"] == row["lat_iters"]


def test_csv_loads_into_pandas(cli, server):
    import pandas as pd

    port, _, _ = server
    r = cli("bench", "p2p", "127.0.0.1", "--port", port, *QUICK, "-o", "csv")
    assert r.exit_code == 0, r.stderr
    df = pd.read_csv(io.StringIO(r.stdout))
    assert list(df["bytes"]) == [4096, 2**20]
    assert (df["bw_gbs"] > 0).all() and (df["transport"] == "tcp").all()
    assert (
        df["test"] == "tcp_bw"
    ).all()  # what was run, named as the perftest importer names its tests


def test_table_has_rows_chart_and_line_rate_note(cli, server):
    port, _, _ = server
    r = cli("bench", "p2p", "127.0.0.1", "--port", port, *QUICK)
    assert r.exit_code == 0, r.stderr
    out = r.stdout
    assert "BW Gb/s" in out and "4 KiB" in out and "1 MiB" in out
    assert "bandwidth by message size (Gb/s)" in out and "█" in out
    assert "line rate unknown" in out and "--line-rate-gbps" in out
    assert "status: OK" in out


def test_streams_and_bidirectional(cli, server):
    port, log, _ = server
    r = cli(
        "bench",
        "p2p",
        "127.0.0.1",
        "--port",
        port,
        "--sizes",
        "64K",
        "--duration",
        "0.3",
        "--streams",
        "3",
        "--bidir",
        "-o",
        "json",
    )
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["streams"] == 3 and doc["bidir"] is True
    assert doc["results"][0]["bw_gbs"] > 0
    log.wait_for(r"3 streams, bidirectional")


def test_save_writes_the_json_atomically(cli, server, tmp_path):
    port, _, _ = server
    target = tmp_path / "ab.json"
    r = cli("bench", "p2p", "127.0.0.1", "--port", port, *QUICK, "--save", target)
    assert r.exit_code == 0, r.stderr
    run = load_bench_file(target)
    assert run.kind == "p2p" and len(run.results) == 2 and run.results[1].bw_gbs > 0
    assert sorted(os.listdir(tmp_path)) == ["ab.json"]  # no temporary file left behind


def test_line_rate_findings_and_exit_codes(cli, server, tmp_path):
    port, _, _ = server
    ok = cli(
        "bench",
        "p2p",
        "127.0.0.1",
        "--port",
        port,
        *QUICK,
        "--line-rate-gbps",
        "0.001",
        "-o",
        "json",
    )
    assert ok.exit_code == 0
    (f,) = json.loads(ok.stdout)["findings"]
    assert (
        f["check"] == "bench.p2p_bandwidth"
        and f["severity"] == "ok"
        and f["subject"] == f"tcp 127.0.0.1:{port}"
    )

    slow = cli(
        "bench",
        "p2p",
        "127.0.0.1",
        "--port",
        port,
        *QUICK,
        "--line-rate-gbps",
        "100000",
        "-o",
        "json",
    )
    assert slow.exit_code == 0  # TCP below line rate warns by default
    (w,) = json.loads(slow.stdout)["findings"]
    assert w["severity"] == "warn" and w["limit"] == 80000.0

    strict = cli(
        "bench",
        "p2p",
        "127.0.0.1",
        "--port",
        port,
        *QUICK,
        "--line-rate-gbps",
        "100000",
        "--strict",
        "-o",
        "junit",
    )
    assert strict.exit_code == 1
    assert "bench.p2p_bandwidth" in strict.stdout and "<failure" in strict.stdout

    cfg = tmp_path / "c.toml"
    cfg.write_text('[p2p]\ntcp_severity = "fail"\nline_rate_gbps = 100000\n')
    failing = cli("bench", "p2p", "127.0.0.1", "--port", port, *QUICK, "--config", cfg)
    assert failing.exit_code == 1
    assert "FAIL" in failing.stdout and "config [p2p] line_rate_gbps" in failing.stdout
    assert "deprecated" not in failing.stderr
    cfg.write_text(
        '[bench]\ntcp_severity = "fail"\nline_rate_gbps = 100000\n'
    )  # the old name: same result, and a note
    old = cli("bench", "p2p", "127.0.0.1", "--port", port, *QUICK, "--config", cfg)
    assert old.exit_code == 1 and "config [p2p] line_rate_gbps" in old.stdout
    assert (
        "ibdiag: warning: config file" in old.stderr
        and "[bench] is deprecated: it is read as [p2p]" in old.stderr
    )


def test_tokens_from_file_and_environment(cli, tmp_path):
    token = write_token(tmp_path / "tok", "abc-123")
    with server_thread(token=b"abc-123") as (port, log, _):
        r = cli(
            "bench", "p2p", "127.0.0.1", "--port", port, *QUICK, "--token-file", token, "-o", "json"
        )
        assert r.exit_code == 0, r.stderr
        r = cli(
            "bench",
            "p2p",
            "127.0.0.1",
            "--port",
            port,
            *QUICK,
            "-o",
            "json",
            env={"IBDIAG_TOKEN": "abc-123"},
        )
        assert r.exit_code == 0, r.stderr
        bad = cli("bench", "p2p", "127.0.0.1", "--port", port, *QUICK, env={"IBDIAG_TOKEN": "nope"})
        assert bad.exit_code == 3
        assert "authentication failed" in bad.stderr and "hint:" in bad.stderr
        log.wait_for(r"refused: wrong token")
        none = cli("bench", "p2p", "127.0.0.1", "--port", port, *QUICK)
        assert none.exit_code == 3 and "requires a token" in none.stderr


def test_world_readable_token_file_warns(cli, tmp_path):
    token = write_token(tmp_path / "tok", "abc-123")
    token.chmod(0o644)
    with server_thread(token=b"abc-123") as (port, _, _):
        r = cli(
            "bench", "p2p", "127.0.0.1", "--port", port, *QUICK, "--token-file", token, "-o", "json"
        )
    assert r.exit_code == 0
    assert "can be read by other users" in r.stderr


def test_oversized_request_is_refused_with_exit_2(cli):
    with server_thread(max_size=65536) as (port, log, _):
        r = cli("bench", "p2p", "127.0.0.1", "--port", port, "--sizes", "4K,1M", "--iters", "5")
        assert r.exit_code == 2
        assert "more than this server's --max-size of 64 KiB" in r.stderr
        assert "hint: use sizes up to 64 KiB" in r.stderr
        log.wait_for(r"refused: a 1 MiB message")
        again = cli(
            "bench",
            "p2p",
            "127.0.0.1",
            "--port",
            port,
            "--sizes",
            "4K",
            "--iters",
            "5",
            "-o",
            "json",
        )
        assert again.exit_code == 0  # and the server keeps serving


def test_transport_not_served(cli):
    with server_thread(transports=("rdma",)) as (port, log, _):
        r = cli("bench", "p2p", "127.0.0.1", "--port", port, *QUICK)
        assert r.exit_code == 3 and "does not serve tcp" in r.stderr
        log.wait_for(r"refused: tcp is not served")


@pytest.mark.slow
def test_second_client_is_told_the_server_is_busy(cli):
    with server_thread() as (port, log, _):
        req = RunRequest(transport="tcp", mode="bw", sizes=(65536,), duration_s=2.0)
        done: dict[str, object] = {}
        t = threading.Thread(
            target=lambda: done.setdefault(
                "run", run_p2p(req, ClientOptions(host="127.0.0.1", port=port, timeout_s=5))
            )
        )
        t.start()
        log.wait_for(r"running tcp bw")
        r = cli("bench", "p2p", "127.0.0.1", "--port", port, *QUICK)
        t.join(10)
        assert r.exit_code == 3
        assert (
            "busy with a benchmark for 127.0.0.1:" in r.stderr
            and "one benchmark at a time" in r.stderr
        )
        assert done["run"].results[0].bw_gbs > 0


def test_transport_rdma_without_an_adapter_is_exit_3_never_tcp(cli):
    """Issue #27: --transport rdma on a node without RDMA is exit 3 with the reason, never a TCP run."""
    if os.path.isdir("/sys/class/infiniband") and os.listdir("/sys/class/infiniband"):
        pytest.skip("this machine has an RDMA device")
    with server_thread() as (port, log, _):
        for engine in ("ibdiag", "perftest", "auto"):
            r = cli(
                "bench", "p2p", "127.0.0.1", "--port", port, "--transport", "rdma",
                "--engine", engine, "--sizes", "4K", "--iters", "5", "-o", "json",
            )  # fmt: skip
            assert r.exit_code == 3, (engine, r.stdout, r.stderr)
            assert "RDMA" in r.stderr and "ibdiag: error: " in r.stderr
            assert '"transport": "tcp"' not in r.stdout and "bw_gbs" not in r.stdout
        assert "running tcp" not in log.text()


def test_server_without_rdma_device_says_so_to_the_client():
    """A client that reaches the server's RDMA set-up hears the server's own reason (no device here)."""
    if os.path.isdir("/sys/class/infiniband") and os.listdir("/sys/class/infiniband"):
        pytest.skip("this machine has an RDMA device")
    with server_thread() as (port, log, _):
        sock = socket.create_connection(("127.0.0.1", port))
        ch = Channel(sock, "server", 5)
        client_handshake(ch, token=None, host="t", version="t")
        ch.send(
            {
                "type": "run",
                "request": RunRequest(
                    transport="rdma", mode="bw", sizes=(4096,), iters=1
                ).to_json(),
            }
        )
        with pytest.raises(RemoteError) as e:
            ch.expect("ready", "ready")
        sock.close()
        assert e.value.code == "failed" and "RDMA" in e.value.message
        log.wait_for(r"dropped: (no RDMA device|pyverbs)")


@pytest.mark.parametrize(
    "args,code,text",
    [
        (("-o", "prom"), 2, "cannot write prom"),
        (("--iters", "5", "--duration", "1"), 2, "not both"),
        (("--sizes", "4X"), 2, "cannot read --sizes"),
        (("--sizes", "64M:4K"), 2, "ends below its start"),
        (("--streams", "0"), 2, "--streams 0"),
        (("--streams", "99"), 2, "--streams 99"),
        (("--iters", "0"), 2, "--iters 0"),
        (("--duration", "0"), 2, "--duration 0"),
        (("--timeout", "0"), 2, "--timeout 0"),
        (("--line-rate-gbps", "-5"), 2, "--line-rate-gbps -5"),
        (("--device", "mlx5_0"), 2, "apply to --transport rdma"),
        (("--transport", "rdma", "--streams", "2"), 2, "--streams applies to --transport tcp"),
        (("--qps", "2"), 2, "--qps applies to --transport rdma"),
        (("--verb", "read", "--tclass", "3"), 2, "--verb, --tclass apply to --transport rdma"),
        (("--transport", "rdma", "--qps", "0"), 2, "--qps 0"),
        (("--transport", "rdma", "--qps", "65"), 2, "--qps 65"),
        (("--transport", "rdma", "--verb", "atomic"), 2, "atomic"),
        (("--transport", "rdma", "--tclass", "256"), 2, "--tclass 256"),
        (("--transport", "rdma", "--sl", "16"), 2, "--sl 16"),
        (("--transport", "rdma", "--inline", "-1"), 2, "--inline -1"),
        (
            ("--transport", "rdma", "--verb", "read", "--inline", "64"),
            2,
            "--inline does not apply to --verb read",
        ),
        (("--save", "/nonexistent-dir/x.json"), 2, "does not exist"),
        (("--token-file", "/nonexistent-token"), 2, "no such file"),
        (("--socket-buffer", "lots"), 2, "cannot read --socket-buffer"),
    ],
)
def test_usage_errors_before_any_traffic(cli, args, code, text):
    r = cli("bench", "p2p", "127.0.0.1", "--port", _free_port(), *args)
    assert r.exit_code == code, r.stderr
    assert text in r.stderr
    assert r.stderr.startswith("ibdiag: error: ") and "\nhint: " in r.stderr
    assert "Traceback" not in r.stderr


def test_png_needs_matplotlib(cli, tmp_path):
    try:
        import matplotlib  # noqa: F401

        pytest.skip("matplotlib is installed here")
    except ImportError:
        pass
    r = cli("bench", "p2p", "127.0.0.1", "--port", _free_port(), "--png", tmp_path / "bw.png")
    assert r.exit_code == 2 and "needs matplotlib" in r.stderr


def test_nothing_listening_is_exit_3(cli):
    port = _free_port()
    r = cli("bench", "p2p", "127.0.0.1", "--port", port, *QUICK)
    assert r.exit_code == 3
    assert f"nothing is listening on 127.0.0.1:{port}" in r.stderr
    assert "ibdiag bench serve" in r.stderr


def test_serve_usage_errors(cli):
    r = cli("bench", "serve", "--transport", "tcp", "--device", "mlx5_0")
    assert r.exit_code == 2 and "apply to RDMA" in r.stderr
    r = cli("bench", "serve", "--max-size", "huge")
    assert r.exit_code == 2 and "cannot read --max-size" in r.stderr
    r = cli("bench", "serve", "--bind", "192.0.2.77", "--port", "0")
    assert r.exit_code == 2 and "not an address of this host" in r.stderr
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    try:
        r = cli("bench", "serve", "--bind", "127.0.0.1", "--port", busy.getsockname()[1])
        assert r.exit_code == 3 and "already in use" in r.stderr
    finally:
        busy.close()


def test_help_does_not_import_heavy_modules():
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from ibdiag.cli import app\n"
        "try:\n    app(['bench', 'p2p', '--help'], prog_name='ibdiag')\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in ('pyverbs', 'torch', 'pandas', 'numpy', 'matplotlib', 'psutil') if m in sys.modules]\n"
        "print('HEAVY', heavy)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "HEAVY []" in r.stdout, r.stdout + r.stderr


def test_progress_reports_every_size_and_mode(server):
    port, _, _ = server
    events: list[tuple[int, int, str]] = []
    req = RunRequest(transport="tcp", mode="both", sizes=(4096, 65536), iters=20, warmup=1)
    run = run_p2p(
        req,
        ClientOptions(host="127.0.0.1", port=port, timeout_s=5),
        lambda done, total, label: events.append((done, total, label)),
    )
    assert events == [
        (0, 4, "bw 4 KiB"),
        (1, 4, "lat 4 KiB"),
        (2, 4, "bw 64 KiB"),
        (3, 4, "lat 64 KiB"),
        (4, 4, "done"),
    ]
    assert [r.bytes for r in run.results] == [4096, 65536]


def test_default_bind_is_dual_stack(cli):
    """No --bind: one listening socket for IPv6 and IPv4 clients ([::] with IPV6_V6ONLY off)."""
    if (
        not socket.has_ipv6
        or not os.path.exists("/proc/net/if_inet6")
        or "00000000000000000000000000000001" not in open("/proc/net/if_inet6").read()
    ):
        pytest.skip("no IPv6 loopback here")
    with server_thread(bind=None) as (port, log, server):
        assert server.address is not None and server.address[0] == "::"
        for host in ("127.0.0.1", "::1"):
            r = cli(
                "bench", "p2p", host, "--port", port, "--sizes", "4K", "--iters", "5", "-o", "json"
            )
            assert r.exit_code == 0, r.stderr
        assert json.loads(r.stdout)["peer"] == f"[::1]:{port}"
        log.wait_for(r"\[::1\]:\d+: running")
        log.wait_for(r"127\.0\.0\.1:\d+: running")

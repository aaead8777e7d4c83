"""Server and client in two network namespaces joined by a veth pair (created and removed here, as
root), the link shaped to 1 Gbit/s with ``tc tbf``; ibdiag must measure what iperf3 measures on
the same link in the same test, within 10%.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.support.env import need_root, need_tool
from tests.support.p2p import ServerProcess, client_env, write_token

pytestmark = [pytest.mark.slow, pytest.mark.root]

SERVER_IP = "10.211.0.1"
CLIENT_IP = "10.211.0.2"


@dataclass(frozen=True)
class NetnsPair:
    server_ns: str
    client_ns: str
    server_if: str
    client_if: str

    def run(
        self, ns: str, *cmd: str, timeout: float = 60, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["ip", "netns", "exec", ns, *cmd],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
        )


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)


@pytest.fixture
def netns_pair() -> Iterator[NetnsPair]:
    need_root()
    need_tool("ip")
    need_tool("tc")
    pid = os.getpid()
    pair = NetnsPair(f"ibdiag-srv-{pid}", f"ibdiag-cli-{pid}", f"ibva{pid}"[:15], f"ibvb{pid}"[:15])
    created: list[str] = []
    try:
        for ns in (pair.server_ns, pair.client_ns):
            _ip("netns", "add", ns)
            created.append(ns)
        _ip("link", "add", pair.server_if, "type", "veth", "peer", "name", pair.client_if)
        _ip("link", "set", pair.server_if, "netns", pair.server_ns)
        _ip("link", "set", pair.client_if, "netns", pair.client_ns)
        for ns, ifname, addr in (
            (pair.server_ns, pair.server_if, SERVER_IP),
            (pair.client_ns, pair.client_if, CLIENT_IP),
        ):
            _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", ifname)
            _ip("-n", ns, "link", "set", ifname, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        yield pair
    finally:
        # Deleting a namespace destroys the veth end inside it, and with it the peer.
        for ns in created:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)


def _shape(pair: NetnsPair, rate: str = "1gbit") -> None:
    # burst must cover rate/HZ and a few GSO segments, or tbf itself caps below the rate.
    for ns, ifname in ((pair.server_ns, pair.server_if), (pair.client_ns, pair.client_if)):
        subprocess.run(
            [
                "tc",
                "-n",
                ns,
                "qdisc",
                "add",
                "dev",
                ifname,
                "root",
                "tbf",
                "rate",
                rate,
                "burst",
                "256kb",
                "latency",
                "50ms",
            ],
            check=True,
            capture_output=True,
            timeout=30,
        )


def _iperf3_gbps(pair: NetnsPair, seconds: int) -> float:
    """iperf3's receiver rate from the client namespace to a one-off server in the server namespace."""
    iperf3 = need_tool("iperf3")
    srv = subprocess.Popen(
        [
            "ip",
            "netns",
            "exec",
            pair.server_ns,
            iperf3,
            "-s",
            "-B",
            SERVER_IP,
            "-p",
            "5201",
            "-1",
            "--forceflush",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert srv.stdout is not None
        for line in srv.stdout:  # iperf3 prints this once it listens
            if "Server listening" in line:
                break
        r = pair.run(
            pair.client_ns,
            iperf3,
            "-c",
            SERVER_IP,
            "-p",
            "5201",
            "-t",
            str(seconds),
            "-J",
            timeout=seconds + 30,
        )
        assert r.returncode == 0, r.stdout + r.stderr
        return json.loads(r.stdout)["end"]["sum_received"]["bits_per_second"] / 1e9
    finally:
        if srv.poll() is None:
            srv.kill()
        srv.communicate(timeout=10)


def test_shaped_link_ibdiag_matches_iperf3(netns_pair, ibdiag_exe, tmp_path):
    pair = netns_pair
    _shape(pair)
    token = write_token(tmp_path / "token")
    server = ServerProcess(
        ibdiag_exe,
        "--bind",
        SERVER_IP,
        "--port",
        "0",
        "--token-file",
        str(token),
        netns=pair.server_ns,
    )
    try:
        r = pair.run(
            pair.client_ns,
            ibdiag_exe,
            "bench",
            "p2p",
            SERVER_IP,
            "--port",
            str(server.port),
            "--token-file",
            str(token),
            "--sizes",
            "1M",
            "--duration",
            "3",
            "--line-rate-gbps",
            "1",
            "-o",
            "json",
            env=client_env(),
            timeout=90,
        )
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
        server.log.wait_for(rf"{CLIENT_IP}:\d+: done in")
    finally:
        server.stop()
    ibdiag_gbps = doc["results"][0]["bw_gbps"]
    iperf3_gbps = _iperf3_gbps(pair, 3)
    # The shaping worked: both see about 1 Gbit/s of payload (headers take ~5%)...
    assert 0.8 <= iperf3_gbps <= 1.02, iperf3_gbps
    # ... and ibdiag measures what iperf3 measures, within 10%.
    assert abs(ibdiag_gbps - iperf3_gbps) / iperf3_gbps <= 0.10, (ibdiag_gbps, iperf3_gbps)
    # Judged against the 1 Gb/s given on the command line, the link is healthy.
    (finding,) = doc["findings"]
    assert finding["check"] == "bench.p2p_bandwidth" and finding["severity"] == "ok"
    # The interfaces' own speed (veth says 10000 Mb/s) was read in each namespace.
    assert doc["client_line_rate"] == {"gbps": 10.0, "source": f"{pair.client_if} speed 10000 Mb/s"}
    assert doc["server_line_rate"] == {"gbps": 10.0, "source": f"{pair.server_if} speed 10000 Mb/s"}


def test_without_token_a_remote_client_is_refused(netns_pair, ibdiag_exe):
    pair = netns_pair
    server = ServerProcess(ibdiag_exe, "--bind", SERVER_IP, "--port", "0", netns=pair.server_ns)
    try:
        server.log.wait_for(r"no token: accepting clients on this host \(loopback\) only")
        r = pair.run(
            pair.client_ns,
            ibdiag_exe,
            "bench",
            "p2p",
            SERVER_IP,
            "--port",
            str(server.port),
            "--sizes",
            "4K",
            "--iters",
            "5",
            env=client_env(),
            timeout=60,
        )
        assert r.returncode == 3
        assert "accepts clients from its own host (loopback) only" in r.stderr
        assert "hint: start the server and the client with the same --token-file" in r.stderr
        server.log.wait_for(
            rf"{CLIENT_IP}:\d+: refused: not a loopback client and this server has no token"
        )
    finally:
        server.stop()


def test_veth_speed_is_the_line_rate_and_slow_tcp_warns(netns_pair, ibdiag_exe, tmp_path):
    """Without --line-rate-gbps the veth's 10 Gb/s is the line rate; TCP below 80% of it only warns."""
    pair = netns_pair
    _shape(pair, "500mbit")
    token = write_token(tmp_path / "token")
    server = ServerProcess(
        ibdiag_exe,
        "--bind",
        SERVER_IP,
        "--port",
        "0",
        "--token-file",
        str(token),
        netns=pair.server_ns,
    )
    try:
        r = pair.run(
            pair.client_ns,
            ibdiag_exe,
            "bench",
            "p2p",
            SERVER_IP,
            "--port",
            str(server.port),
            "--token-file",
            str(token),
            "--sizes",
            "1M",
            "--duration",
            "1",
            "-o",
            "json",
            env=client_env(),
            timeout=90,
        )
    finally:
        server.stop()
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    (finding,) = doc["findings"]
    assert finding["severity"] == "warn" and finding["limit"] == 8.0
    assert 0.35 <= doc["results"][0]["bw_gbps"] <= 0.52


def test_iperf3_and_sockperf_engines_across_the_namespaces(netns_pair, ibdiag_exe, tmp_path):
    """The C tools driven through a real ``bench serve`` in the other namespace: iperf3's bandwidth on
    the shaped link is the link's (as iperf3 by hand measures it), sockperf's latency is there, and
    ibdiag's own latency beside them says how each side waited."""
    need_tool("iperf3")
    need_tool("sockperf")
    pair = netns_pair
    _shape(pair)
    token = write_token(tmp_path / "token")
    server = ServerProcess(
        ibdiag_exe,
        "--bind",
        SERVER_IP,
        "--port",
        "0",
        "--token-file",
        str(token),
        netns=pair.server_ns,
    )
    common = ("--port", str(server.port), "--token-file", str(token), "-o", "json")
    try:
        tools = pair.run(
            pair.client_ns,
            ibdiag_exe,
            "bench",
            "p2p",
            SERVER_IP,
            *common,
            "--engine",
            "iperf3,sockperf",
            "--mode",
            "both",
            "--sizes",
            "1K,32K",
            "--duration",
            "2",
            "--line-rate-gbps",
            "1",
            env=client_env(),
            timeout=120,
        )
        own = pair.run(
            pair.client_ns,
            ibdiag_exe,
            "bench",
            "p2p",
            SERVER_IP,
            *common,
            "--mode",
            "lat",
            "--sizes",
            "8",
            "--duration",
            "1",
            env=client_env(),
            timeout=60,
        )
        assert tools.returncode == 0, tools.stderr
        server.log.wait_for(rf"{CLIENT_IP}:\d+: running tcp iperf3\+sockperf bw\+lat")
    finally:
        server.stop()
    doc = json.loads(tools.stdout)
    assert doc["engines"] == {"bw": "iperf3", "lat": "sockperf"}
    assert all(f"-i {SERVER_IP} " in c for c in doc["sockperf_server_commands"])
    assert all(f"-B {SERVER_IP} " in c for c in doc["iperf3_server_commands"])
    big = doc["results"][1]
    assert 0.8 <= big["bw_gbps"] <= 1.02, big  # the 1 Gbit/s link, as iperf3 by hand sees it
    for row in doc["results"]:
        assert 0 < row["lat_us"]["min"] <= row["lat_us"]["p50"] <= row["lat_us"]["max"]
    assert own.returncode == 0, own.stderr
    mine = json.loads(own.stdout)
    assert mine["engines"] == {"lat": "ibdiag"} and mine["busy_poll_us"] == 200
    (row,) = mine["results"]
    assert set(row["lat_busy_poll"]) == {"client", "server"} and row["lat_us"]["p50"] > 0

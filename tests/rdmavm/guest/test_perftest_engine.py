"""``bench p2p --engine perftest`` against a real ``bench serve`` on rxe0: perftest's real binaries on
both ends, started by ibdiag; the result in the same model as ``--engine ibdiag``; the failure when
the server's perftest dies mid-run; no perftest process left behind."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

from tests.rdmavm.guest.conftest import OUT, client, client_env, p2p_args
from tests.support.p2p import perftest_processes

LINE = (
    "--line-rate-gbps",
    "10",
)  # a judged line rate, so the bandwidth finding is there on both engines


def no_perftest_left(within_s: float = 10.0) -> None:
    deadline = time.monotonic() + within_s
    while perftest_processes() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert perftest_processes() == [], [
        Path(f"/proc/{p}/cmdline").read_bytes() for p in perftest_processes()
    ]


def run_json(cli, port: int, token: Path, *args: str) -> dict:
    r = cli(*p2p_args(port, *args, "-o", "json"), env=client_env(token))
    assert r.exit_code in (0, 1) and r.exception is None, (r.exit_code, r.stderr, r.exception)
    return json.loads(r.stdout)


def test_bandwidth_with_perftest_is_in_the_same_model_as_ibdiags(server, cli, token):
    s = server("--timeout", "20")
    ours = run_json(cli, s.port, token, "--sizes", "64K,1M", "--iters", "200", *LINE)
    theirs = run_json(
        cli, s.port, token, "--engine", "perftest", "--sizes", "64K,1M", "--iters", "200", *LINE
    )
    assert theirs["schema"] == ours["schema"] == "ibdiag.bench/1" and theirs["kind"] == "p2p"
    assert theirs["engine"] == "perftest" and ours["engine"] == "ibdiag"
    assert theirs["perftest_version"] and theirs["perftest_server_version"]
    cmds = theirs["perftest_commands"]
    assert len(cmds) == 2 and all(
        "ib_write_bw" in c and "-d rxe0" in c and "-n 200" in c and " -F" in c for c in cmds
    )
    assert "-s 1048576" in cmds[1] and cmds[0].endswith(theirs["peer"].rsplit(":", 1)[0])
    assert all("ib_write_bw" in c and "-n 200" in c for c in theirs["perftest_server_commands"])
    extra = {
        "perftest_version",
        "perftest_server_version",
        "perftest_commands",
        "perftest_server_commands",
    }
    assert set(theirs) - extra == set(ours)
    assert [r["bytes"] for r in theirs["results"]] == [65536, 2**20]
    for row, mine in zip(theirs["results"], ours["results"], strict=True):
        assert set(row) == set(mine)
        assert (
            row["iters"] == 200
            and row["bw_gbs"] > 0
            and row["bw_gbps"] == row["bw_gbs"] * 8
            and row["msg_rate_mpps"] > 0
        )
    assert [f["check"] for f in theirs["findings"]] == [
        f["check"] for f in ours["findings"]
    ] and theirs["findings"]
    assert theirs["client"]["device"] == "rxe0" and theirs["server"]["device"] == "rxe0"
    s.log.wait_for(r"running rdma perftest bw")
    no_perftest_left()


def test_latency_with_perftest_and_the_table(server, cli, token):
    s = server("--timeout", "20")
    doc = run_json(
        cli,
        s.port,
        token,
        "--engine",
        "perftest",
        "--mode",
        "lat",
        "--sizes",
        "8",
        "--iters",
        "200",
    )
    (row,) = doc["results"]
    lat = row["lat_us"]
    assert row["lat_iters"] == 200 and 0 < lat["min"] <= lat["p50"] <= lat["p99"] <= lat["max"]
    assert row["bw_gbs"] is None and "ib_write_lat" in doc["perftest_commands"][0]
    r = cli(
        *p2p_args(
            s.port, "--engine", "perftest", "--mode", "both", "--sizes", "4K", "--iters", "100"
        ),
        env=client_env(token),
    )
    assert r.exit_code in (0, 1), r.stderr
    assert (
        "with perftest" in r.stdout
        and "measured by perftest" in r.stdout
        and "ib_write_bw" in r.stdout
    )
    no_perftest_left()


def test_duration_mode_with_perftest(server, cli, token):
    s = server("--timeout", "20")
    doc = run_json(
        cli,
        s.port,
        token,
        "--engine",
        "perftest",
        "--mode",
        "both",
        "--sizes",
        "4K",
        "--duration",
        "2",
    )
    (row,) = doc["results"]
    assert (
        row["bw_gbs"] > 0
        and row["bw_peak_gbs"] is None
        and row["lat_us"] is None
        and row["lat_avg_us"] > 0
    )
    assert all("-D 2" in c for c in doc["perftest_commands"]) and doc["duration_s"] == 2
    no_perftest_left()


def test_read_and_send_with_perftest(server, cli, token):
    s = server("--timeout", "20")
    read = run_json(
        cli,
        s.port,
        token,
        "--engine",
        "perftest",
        "--verb",
        "read",
        "--mode",
        "both",
        "--sizes",
        "4K",
        "--iters",
        "100",
    )
    (row,) = read["results"]
    assert row["bw_gbs"] > 0 and row["lat_us"]["p50"] > 0 and read["verb"] == "read"
    assert [c.split()[0].rsplit("/", 1)[-1] for c in read["perftest_commands"]] == [
        "ib_read_bw",
        "ib_read_lat",
    ]
    send = run_json(
        cli,
        s.port,
        token,
        "--engine",
        "perftest",
        "--verb",
        "send",
        "--sizes",
        "4K",
        "--iters",
        "100",
        "--qps",
        "2",
    )
    (row,) = send["results"]
    assert (
        row["bw_gbs"] > 0
        and "ib_send_bw" in send["perftest_commands"][0]
        and "-q 2" in send["perftest_commands"][0]
    )
    no_perftest_left()


def _wait_for_server_perftest(s, timeout_s: float = 60.0) -> str:
    """The server's perftest run (not the short ``ib_write_bw --version`` it asks first)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for pid in perftest_processes(parent=s.pid):
            try:
                if b"-p\0" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    return pid
            except OSError:
                continue
        time.sleep(0.05)
    raise AssertionError(f"the server started no perftest in {timeout_s:g} s; its log:\n{s.stderr}")


def test_the_servers_perftest_killed_mid_run_is_exit_3_and_nothing_is_left(server, token):
    s = server("--timeout", "10")
    # on rxe the client's perftest notices the dead server only at its closing exchange, after -D:
    # keep the run short (8 s + perftest's 2 s margins) so the test does not wait longer than it must
    c = client(s.port, token, "--engine", "perftest", "--sizes", "64K", "--duration", "8")
    pid = _wait_for_server_perftest(s)
    time.sleep(3)  # both ends are measuring now
    try:
        os.kill(int(pid), signal.SIGKILL)
    except ProcessLookupError:
        raise AssertionError(
            f"the server's perftest ended before it was killed; client exit {c.wait(60)}:\n{c.stderr}\nserver:\n{s.stderr}"
        ) from None
    rc = c.wait(60)
    (OUT / "perftest-killed-client.txt").write_text(
        c.stderr
    )  # for the record: what the operator reads
    assert rc == 3, (rc, c.stderr)
    assert (
        "perftest failed: ib_write_bw 64 KiB on this host" in c.stderr
        and "killed by signal 9" in c.stderr
    ), c.stderr
    assert "hint: this host ran: " in c.stderr and "Traceback" not in c.stderr
    no_perftest_left()
    assert s.poll() is None  # the server serves on


def _running(pid: str) -> bool:
    """Whether process ``pid`` runs (a zombie nobody has reaped yet does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def test_a_sigkilled_server_leaves_no_perftest_behind(server, token):
    """SIGKILL leaves ``bench serve`` no clean-up: the kernel kills its perftest (parent-death signal),
    which would otherwise wait for a client, holding its port; the client hears the server is gone."""
    s = server("--timeout", "10")
    c = client(s.port, token, "--engine", "perftest", "--sizes", "64K", "--duration", "20")
    pid = _wait_for_server_perftest(s)
    os.kill(s.pid, signal.SIGKILL)
    assert s.wait(20) == -signal.SIGKILL
    deadline = time.monotonic() + 10
    while _running(pid):
        assert time.monotonic() < deadline, "the SIGKILLed server's perftest still runs"
        time.sleep(0.05)
    assert c.wait(60) == 3, c.stderr
    no_perftest_left()


def test_ctrl_c_on_the_server_kills_its_perftest(server, token):
    s = server("--timeout", "10")
    c = client(s.port, token, "--engine", "perftest", "--sizes", "64K", "--duration", "20")
    _wait_for_server_perftest(s)
    time.sleep(1)
    os.kill(s.pid, signal.SIGINT)
    assert s.wait(30) == 130, s.stderr
    assert c.wait(60) == 3, c.stderr
    no_perftest_left()


def test_the_default_engine_measures_latency_with_ib_write_lat_and_bandwidth_with_ibdiag(
    server, cli, token
):
    """``--engine auto`` (the default) over RDMA: ibdiag's post lists for bandwidth, ``ib_write_lat``
    for latency (ibdiag's own ping-pong carries the interpreter on its critical path), in one run and
    one row per size; a request perftest cannot run (``--warmup``) keeps ibdiag's loops for both."""
    s = server("--timeout", "20")
    doc = run_json(cli, s.port, token, "--mode", "both", "--sizes", "8,64K", "--iters", "100")
    assert doc["engines"] == {"bw": "ibdiag", "lat": "perftest"}
    assert doc["engine"] == "ibdiag+perftest"
    assert [c.split()[0].rsplit("/", 1)[-1] for c in doc["perftest_commands"]] == [
        "ib_write_lat",
        "ib_write_lat",
    ]
    assert doc["path_mtu"]  # the path ibdiag's own queue pairs agreed on
    for row in doc["results"]:
        assert row["bw_gbs"] > 0 and row["iters"] == 100 and row["lat_iters"] == 100
        assert 0 < row["lat_us"]["min"] <= row["lat_us"]["p50"] <= row["lat_us"]["max"]
    s.log.wait_for(r"running rdma perftest bw\+lat")
    own = run_json(
        cli, s.port, token, "--mode", "both", "--sizes", "8", "--iters", "50", "--warmup", "2"
    )
    assert own["engines"] == {"bw": "ibdiag", "lat": "ibdiag"} and "perftest_commands" not in own
    no_perftest_left()

"""``ibdiag bench p2p --engine perftest`` on the host: option mapping, refusals, the protocol's checks,
and real perftest processes (this host has perftest but no RDMA device: the real ib_write_bw fails).

The runs that measure (a server's and a client's perftest on rxe0) are in
tests/rdmavm/guest/test_perftest_engine.py.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ibdiag.bench.p2p.client import ClientOptions, run_p2p
from ibdiag.bench.p2p.control.protocol import Channel, RemoteError, client_handshake
from ibdiag.bench.p2p.engines import perftest_problem
from ibdiag.bench.p2p.external import drive
from ibdiag.bench.p2p.external.output import UnreadableResult, error_lines, status_text
from ibdiag.bench.p2p.external.process import (
    _live,
    listening_ports,
    listening_sockets,
    listens_on,
    live_count,
)
from ibdiag.bench.p2p.fields import RequestError
from ibdiag.bench.p2p.params import RunRequest
from ibdiag.bench.p2p.perftest import engine as pe
from ibdiag.bench.p2p.perftest.command import binary, parse_version, perftest_argv, run_limit_s
from ibdiag.bench.p2p.perftest.output import read_result
from ibdiag.bench.p2p.phase import merge
from ibdiag.bench.results.p2p_meta import P2PSetup, ToolRuns
from ibdiag.errors import CannotRunError
from ibdiag.jsonread import Fields
from ibdiag.node.sysfs import SysfsRoot
from tests.support.env import REPO
from tests.support.p2p import perftest_processes, server_thread

LOGS = REPO / "fixtures" / "logs"
RXE_ROOT = str(REPO / "fixtures" / "sysfs" / "rxe-guest")
HAVE_PERFTEST = shutil.which("ib_write_bw") is not None
NO_RDMA = not (os.path.isdir("/sys/class/infiniband") and os.listdir("/sys/class/infiniband"))


def req(**kw: object) -> RunRequest:
    base: dict[str, object] = {
        "transport": "rdma",
        "mode": "bw",
        "sizes": (65536,),
        "engine": "perftest",
    }
    base.update(kw)
    return RunRequest(**base)  # type: ignore[arg-type]


# --- option mapping ---------------------------------------------------------------------------------


def test_bandwidth_argv_maps_every_option():
    r = req(iters=1000, qps=4, bidir=True, tx_depth=64, inline=64, tclass=106, sl=3)
    argv = perftest_argv(
        "/usr/bin/ib_write_bw",
        r,
        "bw",
        65536,
        device="mlx5_0",
        ib_port=2,
        gid_index=3,
        tcp_port=40000,
        server="10.0.0.2",
    )
    assert argv == [
        "/usr/bin/ib_write_bw", "-d", "mlx5_0", "-i", "2", "-x", "3", "-s", "65536", "-p", "40000", "-F",
        "-n", "1000", "-t", "64", "-q", "4", "-b", "-I", "64", "--tclass=106", "-S", "3", "10.0.0.2",
    ]  # fmt: skip


def test_server_argv_has_no_host_and_duration_is_whole_seconds():
    argv = perftest_argv(
        "ib_send_bw",
        req(duration_s=3.0, verb="send"),
        "bw",
        4096,
        device="rxe0",
        ib_port=1,
        gid_index=None,
        tcp_port=1234,
    )
    assert argv[-1] != "10.0.0.2" and "-x" not in argv
    assert argv[argv.index("-D") + 1] == "3" and "-n" not in argv
    assert argv[argv.index("-s") + 1] == "4096" and argv[argv.index("-p") + 1] == "1234"


def test_latency_argv_leaves_out_the_bandwidth_only_options():
    argv = perftest_argv(
        "ib_write_lat",
        req(mode="both", bidir=True, tx_depth=32),
        "lat",
        8,
        device="rxe0",
        ib_port=1,
        gid_index=1,
        tcp_port=5,
        server="h",
    )
    assert "-t" not in argv and "-q" not in argv and "-b" not in argv and argv[-1] == "h"
    assert "-n" not in argv and "-D" not in argv  # perftest's own default iterations


def test_read_never_gets_inline_and_default_options_add_nothing():
    argv = perftest_argv(
        "ib_read_bw", req(verb="read"), "bw", 64, device="d", ib_port=1, gid_index=None, tcp_port=9
    )
    assert argv == ["ib_read_bw", "-d", "d", "-i", "1", "-s", "64", "-p", "9", "-F", "-t", "128"]
    assert binary("read", "lat") == "ib_read_lat" and binary("send", "bw") == "ib_send_bw"


@pytest.mark.parametrize(
    "kw,text",
    [
        ({"warmup": 10}, "--warmup has no perftest equivalent"),
        ({"duration_s": 1.5}, "whole seconds"),
        ({"iters": 4}, "-n takes 5 to"),
        ({"sizes": (2**31,)}, "-s limit"),
        ({"inline": 913}, "-I takes 0 to 912"),
        ({"mode": "lat", "qps": 2}, "one queue pair"),
        ({"mode": "both", "qps": 2}, "one queue pair"),
        ({"mode": "lat", "bidir": True}, "-b is for bandwidth"),
        ({"transport": "tcp"}, "applies to --transport rdma"),
    ],
)
def test_options_without_a_perftest_equivalent_are_refused(kw, text):
    with pytest.raises(RequestError) as e:
        req(**kw)
    assert (
        text in e.value.message
        and e.value.exit_status == 2
        and "--engine ibdiag" in (e.value.hint or "")
    )


def test_mappable_requests_pass_and_the_wire_carries_the_engine():
    r = req(mode="both", iters=5, sizes=(8, 2**31 - 1), inline=912, bidir=True)
    assert perftest_problem(r) is None
    assert RunRequest.from_json(r.to_json()) == r
    older = {k: v for k, v in req(engine="ibdiag").to_json().items() if k != "engine"}
    assert RunRequest.from_json(older).engine == "ibdiag"  # a client from before the engine option


@pytest.mark.parametrize("engine", ["shell", 1, None, "perftest;rm"])
def test_the_server_refuses_an_unknown_engine(engine):
    with pytest.raises(ValueError, match="--engine"):
        RunRequest.from_json({**req().to_json(), "engine": engine})


def test_the_server_refuses_a_perftest_request_beyond_perftest():
    with pytest.raises(ValueError, match="whole seconds"):
        RunRequest.from_json({**req().to_json(), "duration_s": 0.5})


def test_run_limit_grows_with_the_work():
    small = run_limit_s(req(iters=5), "bw", 8, 10)
    big = run_limit_s(req(iters=10**6), "bw", 2**20, 10)
    assert 15 <= small < 20 and big > 1000
    assert run_limit_s(req(duration_s=5.0), "lat", 8, 10) == 5 + 4 + 10 + 5


# --- pure readers ---------------------------------------------------------------------------------------


def test_listening_ports_read_proc_net_tcp():
    text = (
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
        "   0: 00000000:4844 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1\n"
        "   1: 0100007F:9C40 0100007F:D2F0 01 00000000:00000000 00:00000000 00000000     0        0 2 1\n"
        "   2: 00000000000000000000000000000000:1F90 00000000000000000000000000000000:0000 0A 0:0 0:0 0 0 0 3\n"
        "   garbage\n"
    )
    assert listening_ports(text) == {0x4844, 0x1F90}


def test_version_and_error_lines():
    assert parse_version("Version: 6.06\n") == "6.06"
    assert parse_version("nothing") is None
    out = "---\n Did not detect devices \n If device exists, check if driver is up\n Unable to find the Infiniband/RoCE device\n"
    assert "Did not detect devices" in error_lines(out) and "Unable to find" in error_lines(out)
    glued = " 65536      0                0.00               0.00   \t\t   0.000000ethernet_read_keys: Couldn't read remote address\n"
    assert error_lines(glued) == "ethernet_read_keys: Couldn't read remote address"
    assert status_text(-9) == "killed by signal 9 (SIGKILL)" and status_text(1) == "exit status 1"


def test_results_come_from_the_perftest_importer():
    bw = read_result(
        (LOGS / "perftest-ib_write_bw-MiB-roce.log").read_text(), 65536, "bw", "write", "t"
    )
    assert (
        bw.bw_gbs == pytest.approx(11433.41 * 2**20 / 1e9)
        and bw.msg_rate_mpps == pytest.approx(0.182935)
        and bw.iters == 5000
    )
    lat = read_result((LOGS / "perftest-ib_write_lat.log").read_text(), 8, "lat", "write", "t")
    assert lat.lat_us is not None and lat.lat_us.p50_us == 1.00 and lat.lat_us.p999_us == 3.94
    read = read_result((LOGS / "perftest-ib_write_lat.log").read_text(), 8, "lat", "read", "t")
    assert (
        read.lat_us is not None and read.lat_us.p50_us == 0.5 and read.lat_us.max_us == 3.94 / 2
    )  # READ: perftest's round trip halved
    row = merge(8, None, lat)
    assert row.lat_iters == 1000 and row.bw_gbs is None and row.lat_us == lat.lat_us


def test_output_without_the_size_is_a_cannot_run_error():
    with pytest.raises(CannotRunError, match="no 1 MiB row"):
        read_result(
            (LOGS / "perftest-ib_write_lat.log").read_text(),
            2**20,
            "lat",
            "write",
            "ib_write_lat 1 MiB",
        )
    with pytest.raises(CannotRunError, match="no result"):
        read_result(" Did not detect devices\n", 8, "lat", "write", "x")


def test_a_bandwidth_row_of_zero_is_unreadable_not_a_rate():
    # ib_send_bw -q 2 under Soft-RoCE once printed this average for a run that exited 0 (a CI failure).
    text = (
        " #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]\n"
        " 4096       200              0.00               0.00   \t\t   0.000000\n"
    )
    with pytest.raises(UnreadableResult, match="no bandwidth"):
        read_result(text, 4096, "bw", "send", "ib_send_bw 4 KiB")


class FlakyPerftestSide:
    """A fake client side (no RDMA device here): its perftest "prints" an unreadable result the first
    ``unreadable`` times, as ib_write_lat under emulation now and then does, then a real log."""

    def __init__(self, unreadable: int) -> None:
        self.unreadable, self.runs = unreadable, 0

    def run(self, size: int, kind: str):
        self.runs += 1
        text = (
            " 8       1000     inf     3.94     1.00\n"
            if self.runs <= self.unreadable
            else (LOGS / "perftest-ib_write_lat.log").read_text()
        )
        return read_result(text, size, kind, "write", f"ib_write_lat run {self.runs}")


def test_an_unreadable_perftest_result_is_run_again_at_most_twice():
    side = FlakyPerftestSide(unreadable=2)
    (row,) = drive.run_all(side, [8], ("lat",), None)
    assert side.runs == 3 and row.lat_us is not None and row.lat_us.p50_us == 1.00
    side = FlakyPerftestSide(unreadable=3)
    with pytest.raises(
        UnreadableResult, match="^ib_write_lat run 3: perftest.s output has no result"
    ):
        drive.run_all(side, [8], ("lat",), None)
    assert side.runs == 3


def test_the_provenance_round_trips_through_the_saved_json():
    info = ToolRuns(
        "perftest",
        "6.06",
        "6.10",
        ("ib_write_bw -d rxe0 -s 8 -p 1 -F 10.0.0.1",),
        ("ib_write_bw -d rxe0 -s 8 -p 1 -F",),
    )
    setup = P2PSetup(peer="h:1", engine="perftest", tools=(info,))
    doc = setup.to_json("rdma")
    assert (
        doc["engine"] == "perftest"
        and doc["perftest_version"] == "6.06"
        and doc["perftest_commands"] == list(info.commands)
    )
    assert P2PSetup.read(Fields(doc, "t")) == setup


def test_auto_picks_perftest_only_where_pyverbs_is_missing_and_perftest_can_run(tmp_path):
    (tmp_path / "ib_write_bw").write_text("#!/bin/sh\n")
    (tmp_path / "ib_write_bw").chmod(0o755)
    plain = req(engine="ibdiag")
    none = {"have_pyverbs": False}
    assert pe.resolve_engine(plain, str(tmp_path), **none) == "perftest"
    assert pe.resolve_engine(plain, str(tmp_path), have_pyverbs=True) == "ibdiag"
    assert (
        pe.resolve_engine(req(engine="ibdiag", warmup=3), str(tmp_path), **none) == "ibdiag"
    )  # perftest cannot do it
    assert (
        pe.resolve_engine(req(engine="ibdiag", mode="both"), str(tmp_path), **none) == "ibdiag"
    )  # no ib_write_lat there
    assert pe.resolve_engine(plain, str(tmp_path / "none"), **none) == "ibdiag"
    assert (
        pe.resolve_engine(RunRequest(transport="tcp", mode="bw", sizes=(8,)), str(tmp_path), **none)
        == "ibdiag"
    )
    assert pe.pyverbs_available() in (True, False)


# --- the command line (in-process) -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "args,code,text",
    [
        (
            ("--transport", "tcp", "--engine", "perftest"),
            2,
            "--engine perftest applies to --transport rdma",
        ),
        (
            ("--transport", "rdma", "--engine", "perftest", "--warmup", "3"),
            2,
            "--warmup has no perftest equivalent",
        ),
        (("--transport", "rdma", "--engine", "perftest", "--duration", "1.5"), 2, "whole seconds"),
        (
            ("--transport", "rdma", "--engine", "perftest", "--mode", "lat", "--qps", "2"),
            2,
            "one queue pair",
        ),
        (("--transport", "rdma", "--engine", "perftest", "--iters", "3"), 2, "-n takes 5"),
        (("--transport", "rdma", "--engine", "nccl"), 2, "nccl"),
    ],
)
def test_cli_refuses_before_connecting(cli, args, code, text):
    r = cli("bench", "p2p", "127.0.0.1", "--port", "1", "--sizes", "4K", *args)
    assert r.exit_code == code, r.stderr
    assert text in r.stderr and "Traceback" not in r.stderr


def test_cli_missing_perftest_is_exit_3_with_the_install_hint(cli, tmp_path):
    r = cli(
        "bench",
        "p2p",
        "127.0.0.1",
        "--port",
        "1",
        "--transport",
        "rdma",
        "--engine",
        "perftest",
        "--sizes",
        "4K",
        env={"PATH": str(tmp_path)},
    )
    assert r.exit_code == 3, r.stderr
    assert (
        "ib_write_bw is not installed on this host" in r.stderr
        and "apt install perftest" in r.stderr
    )


def test_cli_help_documents_the_engine(cli):
    r = cli("bench", "p2p", "--help", columns=200)
    assert "--engine" in r.stdout and "auto" in r.stdout


# --- real processes --------------------------------------------------------------------------------------


@pytest.mark.skipif(
    not HAVE_PERFTEST or not NO_RDMA,
    reason="needs perftest installed and no RDMA device (the real ib_write_bw then fails)",
)
def test_the_real_perftest_fails_on_the_server_and_the_client_hears_why():
    """The server's ib_write_bw (real, on a sysfs fixture naming rxe0) exits before it listens: the
    client gets perftest's own words and the server's command, exit 3; no process is left."""
    with server_thread(sysfs=SysfsRoot(RXE_ROOT)) as (port, log, _):
        opts = ClientOptions(host="127.0.0.1", port=port, timeout_s=10.0, sysfs=SysfsRoot(RXE_ROOT))
        with pytest.raises(RemoteError) as e:
            run_p2p(req(iters=5), opts)
        log.wait_for(r"dropped: perftest on the server")
    err = e.value
    assert err.exit_status == 3
    assert (
        "perftest on the server (ib_write_bw) failed before the client could connect (exit status 1)"
        in err.message
    )
    assert "Did not detect devices" in err.message or "Unable to find" in err.message
    assert "-d rxe0" in (err.hint or "") and " -F" in (err.hint or "")
    assert live_count() == 0 and perftest_processes(os.getpid()) == []


@pytest.mark.skipif(not HAVE_PERFTEST, reason="needs perftest installed")
def test_perftest_missing_on_the_server_is_a_clear_error(tmp_path):
    with server_thread(sysfs=SysfsRoot(RXE_ROOT), perftest_path=str(tmp_path)) as (port, log, _):
        opts = ClientOptions(host="127.0.0.1", port=port, timeout_s=10.0, sysfs=SysfsRoot(RXE_ROOT))
        with pytest.raises(RemoteError) as e:
            run_p2p(req(iters=5, mode="lat", sizes=(8,)), opts)
        log.wait_for(r"dropped: perftest's ib_write_lat is not installed on the server")
    assert (
        e.value.exit_status == 3
        and "ib_write_lat is not installed on the server" in e.value.message
    )
    assert "apt install perftest" in (e.value.hint or "")


@pytest.mark.skipif(not HAVE_PERFTEST, reason="needs perftest installed")
def test_a_dead_client_gets_the_servers_perftest_killed(tmp_path):
    """A client that asks for a phase and vanishes: the server's perftest (a real process, here one
    that waits as perftest's server waits for its client) is killed and reaped."""
    script = tmp_path / "ib_write_bw"
    # A stand-in for perftest's server (named so): listens on -p's port and waits, like ib_write_bw does.
    script.write_text(
        "#!/usr/bin/env python3\nimport socket, sys, time\n"
        "p = int(sys.argv[sys.argv.index('-p') + 1])\ns = socket.socket(); s.bind(('', p)); s.listen(1)\ntime.sleep(300)\n"
    )
    script.chmod(0o755)
    with server_thread(sysfs=SysfsRoot(RXE_ROOT), perftest_path=str(tmp_path), timeout_s=2.0) as (
        port,
        log,
        _,
    ):
        sock = socket.create_connection(("127.0.0.1", port))
        ch = Channel(sock, "server", 5)
        client_handshake(ch, token=None, host="t", version="t")
        ch.send({"type": "run", "request": req(iters=5).to_json()})
        ready = ch.expect("ready", "ready")
        assert ready["engine"] == "perftest"
        ch.expect("connected", "connected")
        ch.send({"type": "phase", "kind": "bw", "bytes": 65536, "warmup": 0})
        go = ch.expect("go", "go")
        assert 1 <= go["perftest_port"] <= 65535 and "-d rxe0" in go["command"]
        assert live_count() == 1
        sock.close()  # the client dies
        deadline = time.monotonic() + 10
        while live_count() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert live_count() == 0
        log.wait_for(r"client|dropped")
    assert perftest_processes(os.getpid()) == []


def test_a_server_without_pyverbs_serves_perftest_clients(monkeypatch, tmp_path):
    """``bench serve --transport rdma`` where pyverbs is missing (simulated: the selection raises what
    ibdiag.bench.p2p.rdma.verbs raises then) but perftest is installed: it starts, saying what it serves."""
    from ibdiag.bench.p2p.rdma import device as rdma_device
    from ibdiag.bench.p2p.serve import ServeOptions, preflight_rdma

    def no_pyverbs(*a: object) -> None:
        raise CannotRunError("pyverbs is not installed (No module named 'pyverbs')")

    monkeypatch.setattr(rdma_device, "select_rdma", no_pyverbs)
    (tmp_path / "ib_write_bw").write_text("#!/bin/sh\n")
    (tmp_path / "ib_write_bw").chmod(0o755)
    line = preflight_rdma(ServeOptions(sysfs=SysfsRoot(RXE_ROOT), perftest_path=str(tmp_path)))
    assert line.startswith("rxe0 port 1") and "serving --engine perftest clients only" in line
    with pytest.raises(CannotRunError, match="pyverbs"):
        preflight_rdma(
            ServeOptions(sysfs=SysfsRoot(RXE_ROOT), perftest_path=str(tmp_path / "none"))
        )


# --- processes that do not outlive ibdiag, and perftest's port taken before it binds ------------------


def _gone(pid: int, timeout_s: float) -> bool:
    """True when process ``pid`` has exited (or is a zombie nobody reaps yet) within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


def _kill_if_alive(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@pytest.mark.parametrize("in_thread", [False, True], ids=["main-thread", "worker-thread"])
def test_a_perftest_process_dies_with_its_sigkilled_parent(in_thread):
    """A real parent process starts a long-running real program (``sleep``) through the same helper
    that starts perftest, from its main thread or, as ``bench serve`` does, from a connection's
    thread that waits on it; the parent is SIGKILLed: the kernel kills the child too."""
    start = "p = ToolProcess(['sleep', '300'], 'no hint'); print(p.proc.pid, flush=True); time.sleep(300)"
    if in_thread:
        start = (
            f"threading.Thread(target=lambda: exec({start!r}, globals())).start(); time.sleep(300)"
        )
    code = f"import threading, time\nfrom ibdiag.bench.p2p.external.process import ToolProcess\n{start}\n"
    parent = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=REPO
    )
    child = None
    try:
        child = int(parent.stdout.readline())  # type: ignore[union-attr]
        assert not _gone(child, 0.3), "the child did not run"
        parent.kill()
        parent.wait(10)
        assert _gone(child, 10), "the child outlived its SIGKILLed parent"
    finally:
        parent.kill()
        parent.wait(10)
        if child is not None:
            _kill_if_alive(child)


def test_a_child_whose_parent_died_before_the_prctl_kills_itself():
    """The race the helper closes: the parent dies between fork and ``prctl``, so no signal will come;
    the child notices it has another parent than the one it was forked from. Driven by naming a
    parent that is not this process (-1 is nobody's pid)."""
    from ibdiag.runtime.parentdeath import die_with_parent

    p = subprocess.Popen(["sleep", "300"], preexec_fn=die_with_parent(parent_pid=-1))
    try:
        assert p.wait(10) == -signal.SIGKILL
    finally:
        p.kill()
        p.wait(10)
    own = subprocess.Popen(
        ["sleep", "300"], preexec_fn=die_with_parent()
    )  # this process is its parent: it runs
    try:
        assert own.poll() is None and not _gone(own.pid, 0.3)
    finally:
        own.kill()
        own.wait(10)


def _stand_in_perftest_server(directory: Path) -> None:
    """A stand-in for perftest's ``ib_write_bw`` server (named so: no RDMA device here): like perftest
    it binds ``-p``'s port (SO_REUSEADDR), listens and waits for a client, and when the port is taken
    prints perftest's "Couldn't listen to port N" and exits 1."""
    script = directory / "ib_write_bw"
    script.write_text(
        f"#!{sys.executable}\nimport socket, sys, time\n"
        "p = int(sys.argv[sys.argv.index('-p') + 1])\ns = socket.socket()\n"
        "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
        "try:\n    s.bind(('', p)); s.listen(1)\n"
        'except OSError:\n    print(f"Couldn\'t listen to port {p}"); sys.exit(1)\n'
        "time.sleep(300)\n"
    )
    script.chmod(0o755)


def _phase_client(port: int) -> Channel:
    sock = socket.create_connection(("127.0.0.1", port))
    ch = Channel(sock, "server", 10)
    client_handshake(ch, token=None, host="t", version="t")
    ch.send({"type": "run", "request": req(iters=5).to_json()})
    assert ch.expect("ready", "ready")["engine"] == "perftest"
    ch.expect("connected", "connected")
    ch.send({"type": "phase", "kind": "bw", "bytes": 65536, "warmup": 0})
    return ch


@pytest.fixture
def taken_port():
    """A port another program listens on (a real socket), and the picks ``free_port`` then makes."""
    with socket.socket() as s:
        s.bind(("", 0))
        s.listen(1)
        yield s.getsockname()[1]


def test_a_perftest_port_taken_before_perftest_binds_it_is_replaced_by_another(
    tmp_path, monkeypatch, taken_port
):
    """The race between picking a free port and perftest binding it, made certain: the first pick is a
    port another socket listens on (the kernel's pick is replaced for the first call only). perftest
    (the stand-in) cannot listen there; the server starts it on a new port and tells the client that
    one, where perftest itself listens (the other program listening on the first one does not count)."""
    _stand_in_perftest_server(tmp_path)
    real = drive.free_port
    picks: list[int] = []
    monkeypatch.setattr(
        drive, "free_port", lambda: picks.append(taken_port if not picks else real()) or picks[-1]
    )
    with server_thread(sysfs=SysfsRoot(RXE_ROOT), perftest_path=str(tmp_path), timeout_s=5.0) as (
        port,
        log,
        _,
    ):
        ch = _phase_client(port)
        go = ch.expect("go", "go")
        assert picks[0] == taken_port and go["perftest_port"] == picks[1] != taken_port
        assert f"-p {picks[1]} " in go["command"]
        (proc,) = list(_live)
        assert listens_on(proc.proc.pid, picks[1]) and not listens_on(proc.proc.pid, taken_port)
        log.wait_for(
            rf"could not listen on port {taken_port} \(taken since it was picked free\); starting it on another"
        )
        ch.sock.close()
    assert perftest_processes(os.getpid()) == [] and live_count() == 0


def test_a_perftest_port_taken_every_time_is_a_clear_exit_3(tmp_path, monkeypatch, taken_port):
    """Every pick taken: after LISTEN_TRIES tries the client hears why (exit 3, a hint), nothing is left."""
    _stand_in_perftest_server(tmp_path)
    monkeypatch.setattr(drive, "free_port", lambda: taken_port)
    with server_thread(sysfs=SysfsRoot(RXE_ROOT), perftest_path=str(tmp_path), timeout_s=5.0) as (
        port,
        log,
        _,
    ):
        ch = _phase_client(port)
        with pytest.raises(RemoteError) as e:
            ch.expect("go", "go")
        ch.sock.close()
        log.wait_for(r"dropped: perftest on the server")
    err = e.value
    assert err.exit_status == 3
    assert (
        f"perftest on the server (ib_write_bw) could not listen on its TCP port: {drive.LISTEN_TRIES} ports picked free ({', '.join([str(taken_port)] * drive.LISTEN_TRIES)})"
        in err.message
    )
    assert "ss -tlnp" in (err.hint or "")
    assert perftest_processes(os.getpid()) == [] and live_count() == 0


def test_listening_sockets_and_who_holds_them():
    """``/proc/net/tcp``'s inode column ties a listening port to the process holding the socket."""
    table = (
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
        "   0: 00000000:4A34 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1234 1 0 100 0 0 10 0\n"
        "   1: 0100007F:4A34 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 999 1 0 20 4 30 10 -1\n"
    )
    assert listening_sockets(table) == {0x4A34: {1234}} and listening_ports(table) == {0x4A34}
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        assert not listens_on(os.getpid(), s.getsockname()[1])  # bound, not listening
        s.listen(1)
        assert listens_on(os.getpid(), s.getsockname()[1])
        with subprocess.Popen(["sleep", "30"]) as other:
            try:
                assert not listens_on(
                    other.pid, s.getsockname()[1]
                )  # someone listens there, not it
            finally:
                other.kill()

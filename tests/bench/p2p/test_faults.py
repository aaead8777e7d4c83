"""Real processes on loopback: the ``ibdiag`` console script as server and client, and what each
does when the other misbehaves or dies. Documented behaviour (docs/readme/bench-p2p.md):

* the server survives any client (garbage, wrong version/token, stalls, disconnects, oversized
  requests): one log line on stderr each, and the next client is served;
* a peer that dies or hangs mid-run makes the other side give up within --timeout + 2 s: the client
  exits 3 naming what it waited for, the server logs and goes on;
* Ctrl-C exits 130 and releases the listening socket.
"""

from __future__ import annotations

import json
import signal
import socket
import struct
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.p2p import ServerProcess, client_env, write_token

pytestmark = pytest.mark.slow

QUICK = ["--sizes", "64K", "--iters", "20", "--warmup", "2", "-o", "json"]
LONG = ["--sizes", "1M", "--duration", "30", "-o", "json"]


@pytest.fixture
def serve(ibdiag_exe):
    started: list[ServerProcess] = []

    def start(*args: str, env: dict[str, str] | None = None) -> ServerProcess:
        s = ServerProcess(ibdiag_exe, "--bind", "127.0.0.1", "--port", "0", *args, env=env)
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()


def _client(
    exe: str, port: int, *args: str, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [exe, "bench", "p2p", "127.0.0.1", "--port", str(port), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=client_env(env),
    )


def _run_client(
    exe: str, port: int, *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [exe, "bench", "p2p", "127.0.0.1", "--port", str(port), *args],
        capture_output=True,
        text=True,
        env=client_env(env),
        timeout=timeout,
    )


def _good_run(exe: str, port: int, **kw: object) -> None:
    r = _run_client(exe, port, *QUICK, **kw)  # type: ignore[arg-type]
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["results"][0]["bw_gbs"] > 0


def _wait(proc: subprocess.Popen[str], timeout: float) -> tuple[int, str, str, float]:
    t0 = time.monotonic()
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err, time.monotonic() - t0


def test_loopback_run_between_two_processes(serve, ibdiag_exe):
    s = serve()
    r = _run_client(ibdiag_exe, s.port, "--sizes", "4K,1M", "--mode", "both", "--iters", "100")
    assert r.returncode == 0, r.stderr
    assert "BW Gb/s" in r.stdout and "p99.9 µs" in r.stdout and "status: OK" in r.stdout
    s.log.wait_for(r"127\.0\.0\.1:\d+: running tcp bw\+lat, 2 sizes 4 KiB\.\.1 MiB")
    s.log.wait_for(r"done in \d+\.\d s")


def test_server_killed_mid_run_client_exits_3(serve, ibdiag_exe):
    s = serve("--timeout", "3")
    c = _client(ibdiag_exe, s.port, *LONG, "--timeout", "3")
    s.log.wait_for(r"running tcp bw")
    time.sleep(0.5)
    s.signal(signal.SIGKILL)
    rc, _, err, waited = _wait(c, 3 + 2 + 5)
    assert rc == 3, err
    assert waited <= 3 + 2
    assert "ibdiag: error: 127.0.0.1:" in err
    assert "1 MiB bandwidth test" in err  # names what it was waiting for
    assert "Traceback" not in err


def _processes_with_cmdline(cmdline: list[str]) -> list[int]:
    """Live processes whose command line is ``cmdline`` (a client and its forked sender processes)."""
    want = "\0".join(cmdline).encode() + b"\0"
    found = []
    for pid in Path("/proc").iterdir():
        if not pid.name.isdigit():
            continue
        try:
            if (pid / "cmdline").read_bytes() == want and b"\nState:\tZ" not in (
                pid / "status"
            ).read_bytes():
                found.append(int(pid.name))
        except OSError:
            continue
    return found


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSTOP])
def test_server_killed_or_hung_with_several_streams_no_sender_process_is_left(
    serve, ibdiag_exe, sig
):
    """--streams 3 sends from three forked processes: a dead (RST) or hung (no RST) server ends them
    all within --timeout + 2 s, the client exits 3 naming the wait, and none of them is left."""
    s = serve("--timeout", "3")
    c = _client(ibdiag_exe, s.port, *LONG, "--streams", "3", "--timeout", "2")
    s.log.wait_for(r"running tcp bw")
    time.sleep(1.0)
    cmdline = Path(f"/proc/{c.pid}/cmdline").read_bytes().rstrip(b"\0").decode().split("\0")
    assert len(_processes_with_cmdline(cmdline)) == 4  # the client and its three senders
    s.signal(sig)
    rc, _, err, waited = _wait(c, 2 + 2 + 10)
    assert rc == 3, err
    assert waited <= 2 + 2 + 1, waited
    assert "ibdiag: error: " in err and "1 MiB bandwidth test" in err and "Traceback" not in err
    time.sleep(0.5)
    assert _processes_with_cmdline(cmdline) == []


def test_server_hung_mid_run_client_times_out(serve, ibdiag_exe):
    """SIGSTOP: the server host hangs without closing anything (no RST) — only the timeout can tell."""
    s = serve("--timeout", "3")
    c = _client(ibdiag_exe, s.port, *LONG, "--timeout", "2")
    s.log.wait_for(r"running tcp bw")
    time.sleep(0.5)
    s.signal(signal.SIGSTOP)
    t0 = time.monotonic()
    rc, _, err, _ = _wait(c, 15)
    waited = time.monotonic() - t0
    assert rc == 3, err
    assert waited <= 2 + 2
    assert (
        "no answer from 127.0.0.1:" in err and "within 2 s" in err and "1 MiB bandwidth test" in err
    )


def test_client_killed_mid_run_server_keeps_serving(serve, ibdiag_exe):
    s = serve("--timeout", "3")
    c = _client(ibdiag_exe, s.port, *LONG)
    s.log.wait_for(r"running tcp bw")
    time.sleep(0.5)
    c.kill()
    c.communicate()
    t0 = time.monotonic()
    line = s.log.wait_for(r"dropped: ", timeout=3 + 2)
    assert time.monotonic() - t0 <= 3 + 2
    assert "the client closed the connection" in line
    _good_run(ibdiag_exe, s.port)
    assert s.proc.poll() is None


def test_client_hung_mid_run_server_drops_it_after_timeout(serve, ibdiag_exe):
    s = serve("--timeout", "2")
    c = _client(ibdiag_exe, s.port, *LONG)
    try:
        s.log.wait_for(r"running tcp bw")
        time.sleep(0.5)
        c.send_signal(signal.SIGSTOP)
        t0 = time.monotonic()
        line = s.log.wait_for(r"dropped: ", timeout=2 + 2 + 1)
        assert time.monotonic() - t0 <= 2 + 2
        assert "no answer from the client within 2 s" in line and "1 MiB messages" in line
        _good_run(ibdiag_exe, s.port)
    finally:
        c.kill()
        c.communicate()


def test_wrong_token_is_refused_and_the_server_goes_on(serve, ibdiag_exe, tmp_path):
    token = write_token(tmp_path / "token", "right-token")
    s = serve("--token-file", str(token))
    r = _run_client(ibdiag_exe, s.port, *QUICK, env={"IBDIAG_TOKEN": "wrong-token"})
    assert r.returncode == 3
    assert (
        "authentication failed: the tokens differ" in r.stderr
        and "hint: give both sides the same token" in r.stderr
    )
    s.log.wait_for(r"refused: wrong token")
    assert "right-token" not in s.log.text() and "wrong-token" not in s.log.text()
    _good_run(ibdiag_exe, s.port, env={"IBDIAG_TOKEN": "right-token"})


def test_garbage_hello_is_refused(serve, ibdiag_exe):
    s = serve()
    with socket.create_connection(("127.0.0.1", s.port), timeout=5) as raw:
        raw.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        data = b""
        while True:
            chunk = raw.recv(4096)
            if not chunk:
                break
            data += chunk
    assert b'"code":"protocol"' in data  # told why, then hung up on
    s.log.wait_for(r"refused: the client is not speaking the ibdiag p2p protocol")
    _good_run(ibdiag_exe, s.port)


def test_wrong_protocol_version_is_refused(serve, ibdiag_exe):
    s = serve()
    with socket.create_connection(("127.0.0.1", s.port), timeout=5) as raw:
        body = json.dumps(
            {"type": "hello", "proto": "ibdiag-p2p", "version": 99, "nonce": "00" * 32}
        ).encode()
        raw.sendall(struct.pack("!I", len(body)) + body)
        data = b""
        while chunk := raw.recv(4096):
            data += chunk
    assert b'"code":"version"' in data
    s.log.wait_for(
        r"refused: protocol version mismatch: the client speaks 99, this server speaks 2"
    )
    _good_run(ibdiag_exe, s.port)


def test_oversized_request_exit_2(serve, ibdiag_exe):
    s = serve("--max-size", "1M")
    r = _run_client(ibdiag_exe, s.port, "--sizes", "64K,2M", "--iters", "5")
    assert r.returncode == 2
    assert "2 MiB buffers, more than this server's --max-size of 1 MiB" in r.stderr
    s.log.wait_for(r"refused: a 2 MiB message needs 2 MiB buffers")
    _good_run(ibdiag_exe, s.port)


def test_stalled_handshake_blocks_nobody_and_is_dropped(serve, ibdiag_exe):
    s = serve("--timeout", "4")
    staller = socket.create_connection(("127.0.0.1", s.port))
    staller.sendall(struct.pack("!I", 50) + b'{"type":')  # half a message, then nothing
    try:
        t0 = time.monotonic()
        _good_run(ibdiag_exe, s.port)  # served while the staller hangs on
        assert time.monotonic() - t0 < 4
        line = s.log.wait_for(
            r"dropped: no answer from the client within 4 s while waiting for the client's hello",
            timeout=4 + 2,
        )
        assert line
    finally:
        staller.close()


def test_ctrl_c_stops_the_server_with_130_and_frees_the_port(serve, ibdiag_exe):
    s = serve()
    c = _client(ibdiag_exe, s.port, *LONG, "--timeout", "3")
    s.log.wait_for(r"running tcp bw")
    s.signal(signal.SIGINT)
    assert s.proc.wait(15) == 130  # at once alone; 15 s leaves room for a loaded 2-core CI machine
    rc, _, err, _ = _wait(c, 3 + 2 + 5)
    assert rc == 3, err
    # The listening socket is gone: a new server can take the same port at once.
    again = ServerProcess(ibdiag_exe, "--bind", "127.0.0.1", "--port", str(s.port))
    try:
        assert again.port == s.port
        _good_run(ibdiag_exe, again.port)
    finally:
        again.stop()


def test_ctrl_c_stops_the_client_with_130(serve, ibdiag_exe):
    s = serve()
    c = _client(ibdiag_exe, s.port, *LONG)
    s.log.wait_for(r"running tcp bw")
    time.sleep(0.5)
    c.send_signal(signal.SIGINT)
    rc, _, err, waited = _wait(c, 20)
    assert rc == 130 and "interrupted" in err and waited < 15  # at once alone; room for load
    s.log.wait_for(r"(client gave up: the client was interrupted|dropped: the client closed)")
    _good_run(ibdiag_exe, s.port)


def test_once_exits_after_one_run(serve, ibdiag_exe):
    s = serve("--once")
    _good_run(ibdiag_exe, s.port)
    assert s.proc.wait(10) == 0
    s.log.wait_for(r"exiting after one run")


def test_once_server_exits_3_when_its_client_dies(serve, ibdiag_exe):
    s = serve("--once", "--timeout", "3")
    c = _client(ibdiag_exe, s.port, *LONG)
    s.log.wait_for(r"running tcp bw")
    time.sleep(0.3)
    c.kill()
    c.communicate()
    t0 = time.monotonic()
    assert s.proc.wait(3 + 2 + 3) == 3
    assert time.monotonic() - t0 <= 3 + 2
    s.log.wait_for(r"dropped: the client closed the connection")

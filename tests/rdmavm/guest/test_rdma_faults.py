"""Faults over real RDMA (Soft-RoCE): what each side does when the other dies or never connects.

The documented behaviour (docs/bench-p2p.md) is the same as over TCP: a peer that dies mid-run
makes the other side give up within about ``--timeout``; the client exits 3 with a message, the
server logs one line and serves the next client. Here the data path is a real RC queue pair,
so the client may learn of the death from a failed completion rather than from the socket.
"""

from __future__ import annotations

import time

import pytest

from tests.rdmavm.guest.conftest import ADDR, START_S, Forked, client

TIMEOUT = "3"
#: Seconds a dying peer may take to be noticed: --timeout, the RC retry budget (7 x ~67 ms ACK
#: timeouts) and slack for the emulated CPU.
NOTICE_S = 3 + 2 + 6


def _client(port: int, token, *args: str) -> Forked:
    return client(port, token, "--timeout", TIMEOUT, *args)


def _finish(proc: Forked, timeout: float) -> tuple[int, str, float]:
    t0 = time.monotonic()
    rc = proc.wait(timeout)
    return rc, proc.stderr, time.monotonic() - t0


def _quick(port: int, token) -> Forked:
    c = client(port, token, "--sizes", "64K", "--iters", "20", "--warmup", "0")
    c.wait(60)
    return c


@pytest.mark.parametrize("mode,size", [("bw", "64K"), ("lat", "8")])
def test_server_killed_mid_run_client_exits_3(server, token, mode, size):
    s = server("--timeout", TIMEOUT)
    # ibdiag's own loops (auto would measure the latency with ib_write_lat: test_perftest_engine.py)
    c = _client(
        s.port, token, "--engine", "ibdiag", "--mode", mode, "--sizes", size, "--duration", "60"
    )
    s.log.wait_for(rf"running rdma {mode}", timeout=START_S)
    time.sleep(1.0)
    s.kill()
    rc, err, waited = _finish(c, NOTICE_S + 20)
    assert rc == 3, err
    assert waited <= NOTICE_S, f"{waited:.1f} s to notice"
    assert err.startswith("ibdiag: error: "), err
    assert "hint: " in err and "Traceback" not in err
    assert "rdma write" in err.lower() or f"{ADDR}:{s.port}" in err, err


@pytest.mark.parametrize("mode,size", [("bw", "64K"), ("lat", "8")])
def test_client_killed_mid_run_server_serves_the_next(server, token, mode, size):
    s = server("--timeout", TIMEOUT)
    # ibdiag's own loops (auto would measure the latency with ib_write_lat: test_perftest_engine.py)
    c = _client(
        s.port, token, "--engine", "ibdiag", "--mode", mode, "--sizes", size, "--duration", "60"
    )
    s.log.wait_for(rf"running rdma {mode}", timeout=START_S)
    time.sleep(1.0)
    c.kill()
    t0 = time.monotonic()
    line = s.log.wait_for(r"dropped: |client gave up|refused: ", timeout=NOTICE_S)
    assert time.monotonic() - t0 <= NOTICE_S
    assert "Traceback" not in s.log.text()
    r = _quick(s.port, token)
    assert r.returncode in (0, 1), r.stderr
    assert s.poll() is None, line


def _never_connect() -> None:
    """In the server's process: its queue pair reads the client's details and is never connected,
    so the client's WRITEs reach a QP in INIT that drops them (a misbehaving peer; the client,
    the code under test, is unchanged)."""
    from ibdiag.bench.p2p.rdma import session

    def connect(self) -> None:
        self.ch.expect("qp", "the client's queue pair details")

    session.RdmaServerSide.connect = connect


def test_peer_whose_qp_is_never_connected(server, token):
    s = server("--timeout", TIMEOUT, before=_never_connect)
    c = _client(s.port, token, "--mode", "bw", "--sizes", "64K", "--duration", "5")
    rc, err, waited = _finish(c, NOTICE_S + 20)
    assert rc == 3, err
    assert err.startswith("ibdiag: error: "), err
    assert "RDMA WRITE completed with error status" in err or "no RDMA WRITE completion" in err, err
    assert "Traceback" not in err

"""Faults across two kernels: node 0's server SIGKILLed mid-run, node 1's link going down mid-run.

The documented behaviour (docs/bench-p2p.md, README "Exit status") is the single node's
(tests/rdmavm/guest/test_rdma_faults.py, whose timings and helpers these reuse): the side left
waiting exits 3 within about ``--timeout`` with ``ibdiag: error: ...`` and a hint, never a
traceback; a server logs the client it lost and serves the next one.
"""

from __future__ import annotations

import time

import pytest

from tests.rdmavm.guest.conftest import START_S
from tests.rdmavm.guest.test_rdma_faults import NOTICE_S, TIMEOUT, _finish
from tests.rdmavm.pair.conftest import PEER, ip_link, record, remote_client

#: A path that goes down is noticed by the RC retry budget or the control socket's --timeout,
#: whichever comes first; the emulated CPU of two guests adds slack.
LINK_NOTICE_S = NOTICE_S + 10


def _quick(port: int, token):
    c = remote_client(
        port, token, "--sizes", "64K", "--iters", "20", "--warmup", "0", "--timeout", "20"
    )
    rc = c.wait(120)
    return rc, c.stderr


@pytest.mark.parametrize("mode,size", [("bw", "64K"), ("lat", "8")])
def test_server_on_node0_killed_mid_run_client_exits_3(remote_server, token, mode, size):
    s = remote_server("--timeout", TIMEOUT)
    c = remote_client(
        s.port,
        token,
        "--timeout",
        TIMEOUT,
        "--engine",
        "ibdiag",  # ibdiag's own loops; auto's ib_write_lat for latency is tested on one guest
        "--mode",
        mode,
        "--sizes",
        size,
        "--duration",
        "60",
    )
    s.wait_for(rf"running rdma {mode}")
    time.sleep(1.0)
    s.kill()
    rc, err, waited = _finish(c, NOTICE_S + 30)
    record(f"server_killed_{mode}", {"exit": rc, "waited_s": round(waited, 1), "stderr": err})
    assert rc == 3, err
    assert waited <= NOTICE_S + 5, (
        f"{waited:.1f} s to notice"
    )  # +5: the kill travels through the agent
    assert err.startswith("ibdiag: error: "), err
    assert "hint: " in err and "Traceback" not in err
    assert "rdma write" in err.lower() or f"{PEER}:{s.port}" in err, err


def test_link_down_mid_run_client_exits_3_and_the_server_serves_the_next(remote_server, token):
    s = remote_server("--timeout", TIMEOUT)
    c = remote_client(
        s.port, token, "--timeout", TIMEOUT, "--mode", "bw", "--sizes", "64K", "--duration", "60"
    )
    s.wait_for(r"running rdma bw")
    time.sleep(1.0)
    ip_link("down")
    try:
        rc, err, waited = _finish(c, LINK_NOTICE_S + 30)
    finally:
        ip_link("up")
    record("link_down_client", {"exit": rc, "waited_s": round(waited, 1), "stderr": err})
    assert rc == 3, err
    assert waited <= LINK_NOTICE_S, f"{waited:.1f} s to notice"
    assert err.startswith("ibdiag: error: "), err
    assert "hint: " in err and "Traceback" not in err
    assert "rdma write" in err.lower() or PEER in err, err  # it names what it waited for
    # node 0 lost its client without a word (the FIN never crossed): it gives up within its --timeout
    line = s.wait_for(r"dropped: |client gave up|refused: ", timeout=60)
    record("link_down_server", {"line": line})
    log, alive = s.log()
    assert alive is None and "Traceback" not in log, log
    _wait_active(60)
    rc2, err2 = _quick(s.port, token)
    assert rc2 in (0, 1), (
        f"the next run after the link came back: exit {rc2}: {err2} (server: {line})"
    )


def test_client_killed_mid_run_server_on_node0_serves_the_next(remote_server, token):
    s = remote_server("--timeout", TIMEOUT)
    c = remote_client(
        s.port, token, "--timeout", TIMEOUT, "--mode", "bw", "--sizes", "64K", "--duration", "60"
    )
    s.wait_for(r"running rdma bw", timeout=START_S)
    time.sleep(1.0)
    c.kill()
    s.wait_for(r"dropped: |client gave up|refused: ", timeout=NOTICE_S + 5)
    rc, err = _quick(s.port, token)
    assert rc in (0, 1), err
    log, alive = s.log()
    assert alive is None and "Traceback" not in log, log


def _wait_active(timeout: float) -> None:
    """rxe0 follows eth0: after ``ip link set eth0 up`` its port is ACTIVE again within seconds."""
    from tests.rdmavm.guest.conftest import PORT_DIR

    deadline = time.monotonic() + timeout
    while "ACTIVE" not in (PORT_DIR / "state").read_text():
        assert time.monotonic() < deadline, (
            f"rxe0 port 1 is {(PORT_DIR / 'state').read_text().strip()} {timeout:g} s after eth0 came up"
        )
        time.sleep(0.5)

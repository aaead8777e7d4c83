"""``sweep --transport`` on nodes without RDMA (issue #27): ``rdma`` is a transport asked for, so a
node that cannot give it stops the sweep with exit 3 on every rank, never a silent TCP measurement;
``auto`` (the default) falls back to TCP and says so in the result and the line. Real ranks on
loopback; this machine has no RDMA adapter (the tests skip where one is)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.support.sweep import free_port, slurm_env

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _no_rdma_here():
    if os.path.isdir("/sys/class/infiniband") and os.listdir("/sys/class/infiniband"):
        pytest.skip("this machine has an RDMA device")


def _sweep(ibdiag_exe, *extra):
    port = free_port()
    args = [ibdiag_exe, "sweep", "--sizes", "64K", "--duration", "0.2", "--timeout", "5", *extra]
    procs = [
        subprocess.Popen(
            args,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=slurm_env(r, 2, port),
        )
        for r in range(2)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    return [p.returncode for p in procs], outs


def test_transport_rdma_without_rdma_is_exit_3_on_every_rank_with_the_reason(ibdiag_exe):
    codes, outs = _sweep(ibdiag_exe, "--transport", "rdma", "-o", "line")
    assert codes == [3, 3], outs
    for _, err in outs:
        assert "--transport rdma: no RDMA adapter on this node" in err, err
        assert "--transport auto" in err and "Traceback" not in err
    assert outs[0][0].startswith("UNKNOWN ibdiag: ")  # -o line still gives its one line


def test_transport_auto_falls_back_to_tcp_and_says_so(ibdiag_exe):
    codes, outs = _sweep(ibdiag_exe, "-o", "json")  # auto is the default
    assert codes[1] == 0 and codes[0] in (0, 1), outs  # 1: a loopback pair may look slow
    doc = json.loads(outs[0][0])
    assert doc["sweep"]["transport"] == "tcp" and doc["sweep"]["transport_requested"] == "auto"
    fallback = [f for f in doc["findings"] if f["check"] == "sweep.tcp_fallback"]
    assert len(fallback) == 2 and all(f["severity"] == "warn" for f in fallback)
    assert "measured it over TCP" in fallback[0]["message"]
    codes, outs = _sweep(ibdiag_exe, "--transport", "auto", "-o", "line")
    assert "2 nodes over TCP" in outs[0][0] and outs[0][0].startswith("sweep ")


def test_transport_tcp_is_not_a_fallback(ibdiag_exe):
    codes, outs = _sweep(ibdiag_exe, "--transport", "tcp", "-o", "json")
    doc = json.loads(outs[0][0])
    assert doc["sweep"]["transport_requested"] == "tcp"
    assert not [f for f in doc["findings"] if f["check"] == "sweep.tcp_fallback"]

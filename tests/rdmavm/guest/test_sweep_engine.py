"""``ibdiag sweep --engine perftest`` on a real RDMA stack: a two-rank Slurm-style job in the guest,
both ranks on rxe0 (rxe loops the pair back inside the kernel), each pair test run by perftest's
real ``ib_write_bw`` on both ends, started by the serving rank's server; the sweep document says so,
per pair and in sum."""

from __future__ import annotations

import json
import subprocess

from tests.rdmavm.guest.conftest import START_S, ibdiag_cmd
from tests.rdmavm.guest.test_perftest_engine import no_perftest_left
from tests.support.sweep import free_port, slurm_env


def test_a_two_rank_sweep_measures_its_rdma_pairs_with_perftest(tmp_path):
    port = free_port()
    args = ibdiag_cmd(
        "sweep",
        "--transport",
        "rdma",
        "--engine",
        "perftest",
        "--sizes",
        "64K",
        "--duration",
        "1",
        "--timeout",
        "30",
        "--no-second-pass",
        "-o",
        "json",
    )
    # the sweep's own token: rank 0 hands it to the others through its rendezvous store
    procs = [
        subprocess.Popen(
            args,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=slurm_env(rank, 2, port),
            cwd=tmp_path,
        )
        for rank in range(2)
    ]
    outs = [p.communicate(timeout=2 * START_S + 120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-2000:] for o in outs]
    doc = json.loads(outs[0][0])
    assert doc["sweep"]["engine"] == "perftest" and doc["sweep"]["transport"] == "rdma"
    assert [n["rails"][0]["adapter"] for n in doc["nodes"]] == ["rxe0", "rxe0"]
    rows = doc["pairs"]["rows"]
    assert rows and all(r[9] is None for r in rows), rows  # no pair failed
    assert all(r[7] is not None and r[7] > 0 for r in rows), rows  # each measured a bandwidth
    assert (
        all(r[11] == "perftest" for r in rows) and doc["sweep"]["engine_requested"] == "perftest"
    ), rows  # each pair says who measured it
    no_perftest_left()

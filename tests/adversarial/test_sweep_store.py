"""A hostile rank in a real sweep (issue 28, cases 2, 3 and 10): two honest ibdiag ranks and a third
process that joins the job's real rendezvous store (torch's TCPStore) and writes what it likes.

* ``"[" * 100000`` as its round report or as its node description fails that rank, not the sweep
  (before: rank 0 died with RecursionError and every rank exited 3);
* ``done/<i>/all`` set at the start of every round does not make rank 0 stop waiting: completion is
  counted from the reports rank 0 reads (before: the honest rank 1 was named unreachable, "did not
  report within 5.2 s", though rank 0 had not waited);
* a round task with ``"expect": "many"`` does not crash an honest worker.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support.sweep import free_port, slurm_env

pytest.importorskip("torch.distributed")

#: The hostile rank: argv = port, rank, world, behaviour.
HOSTILE = r"""
import datetime, json, sys, time
import torch.distributed as dist
port, rank, world, how = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
store = dist.PrefixStore("ibdiag-sweep/0", dist.TCPStore("127.0.0.1", port, world, False,
    timeout=datetime.timedelta(seconds=30), wait_for_workers=False))
deep = "[" * 100000
node = {"rank": rank, "host": "evil", "address": "127.0.0.1",
        "rails": [{"rail": 0, "adapter": None, "port": None, "rate_gbps": None}], "ports": [9]}
store.set(f"node/{rank}", deep if how == "node" else json.dumps(node))
if how == "node":
    sys.exit(0)
deadline = time.monotonic() + 60
i = 0
while time.monotonic() < deadline:
    if how == "expect":  # a malformed task for the honest rank 1, before rank 0 writes its own
        store.set(f"round/{i}/1", json.dumps({"phase": "first", "expect": "many", "tests": []}))
    if store.check(["end"]):
        store.set(f"bye/{rank}", "1")
        sys.exit(0)
    if not store.check([f"round/{i}/{rank}"]):
        if how == "all":
            store.set(f"done/{i}/all", "1")
        time.sleep(0.005)
        continue
    if how == "all":
        store.set(f"done/{i}/all", "1")
    store.set(f"done/{i}/{rank}", deep if how == "report" else "[]")
    i += 1
"""

ARGS = ["sweep", "--transport", "tcp", "--sizes", "64K", "--duration", "0.3", "--timeout", "5"]


def _sweep(ibdiag_exe: str, how: str) -> tuple[list[tuple[int, str, str]], str]:
    port = free_port()
    ranks = [
        subprocess.Popen(
            [ibdiag_exe, *ARGS, "--no-second-pass", "-o", "json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=slurm_env(r, 3, port),
        )
        for r in range(2)
    ]
    hostile = subprocess.Popen(
        [sys.executable, "-c", HOSTILE, str(port), "2", "3", how],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    outs = [(p.wait(timeout=120), *p.communicate(timeout=10)) for p in ranks]
    try:
        hostile_out = hostile.communicate(timeout=30)[0]
    except subprocess.TimeoutExpired:
        hostile.kill()
        hostile_out = hostile.communicate()[0]
    return outs, hostile_out


def _pairs(out: str) -> list[list[object]]:
    doc = json.loads(out)
    return list(doc["pairs"]["rows"])


@pytest.mark.slow
@pytest.mark.parametrize("how", ["report", "node"])
def test_a_deeply_nested_value_fails_that_ranks_tests_not_the_sweep(ibdiag_exe, how):
    (code0, out0, err0), (code1, _, err1) = _sweep(ibdiag_exe, how)[0]
    assert "RecursionError" not in err0 + err1 and "internal error" not in err0, err0
    assert code0 in (0, 1) and code1 in (0, 1), (err0, err1)
    rows = _pairs(out0)
    honest = [r for r in rows if {r[3], r[5]} == {0, 1}]
    assert honest and all(r[7] is not None and r[7] > 0 for r in honest), rows
    hostile = [r for r in rows if 2 in (r[3], r[5])]
    if how == "report":  # its own measuring ends: refused, named so
        assert any("report refused" in (r[9] or "") for r in hostile), hostile
    else:  # no usable description: left out of the sweep as silent
        assert all(r[7] is None for r in hostile)


@pytest.mark.slow
def test_done_all_set_by_a_rank_does_not_end_the_wait_for_honest_ranks(ibdiag_exe):
    (code0, out0, err0), (code1, _, err1) = _sweep(ibdiag_exe, "all")[0]
    assert code0 in (0, 1) and code1 in (0, 1), (err0, err1)
    rows = _pairs(out0)
    honest = [r for r in rows if {r[3], r[5]} == {0, 1}]
    assert honest and all(r[9] is None and r[7] and r[7] > 0 for r in honest), honest
    assert "did not report" not in out0
    nodes = {n["rank"]: n["status"] for n in json.loads(out0)["nodes"]}
    assert nodes[1] == "ok", nodes


@pytest.mark.slow
def test_a_malformed_round_task_does_not_crash_an_honest_worker(ibdiag_exe):
    (code0, out0, err0), (code1, _, err1) = _sweep(ibdiag_exe, "expect")[0]
    assert "internal error" not in err1 and "Traceback" not in err1, err1
    assert code1 in (0, 1), err1
    nodes = {n["rank"]: n["status"] for n in json.loads(out0)["nodes"]}
    assert nodes[1] != "unreachable", (nodes, err0)

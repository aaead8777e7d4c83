"""The NCCL branch end to end on real processes, with CUDA replaced by the CPU stand-in (a test fake).

``IBDIAG_TEST_DEVICE=cpu-stand-in`` makes ``--backend nccl`` take the CUDA path of the runner (binding,
the GPU claim, events, the queue window, the separate gloo control group, abort on failure) with CPU
tensors and gloo underneath. These tests prove that control flow; they do not show that NCCL or a GPU
works (``make gpu-check`` does that on a GPU machine). Also: the failure path writes its diagnosis before
any teardown, a failure before the first step says what it was, torch too old, the gloo interface.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

from ibdiag.collectives import OPS

pytestmark = pytest.mark.slow

CLEAN = {
    k: ""
    for k in (
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "OMPI_COMM_WORLD_RANK",
        "OMPI_COMM_WORLD_SIZE",
        "PMI_RANK",
        "PMI_SIZE",
        "SLURM_PROCID",
        "SLURM_STEP_ID",
        "SLURM_STEPID",
        "IBDIAG_COLLECTIVE_REPORT_DIR",
        "IBDIAG_TEST_HOOK",
        "CUDA_VISIBLE_DEVICES",
        "GLOO_SOCKET_IFNAME",
        "NCCL_SOCKET_IFNAME",
    )
}
STAND_IN = {
    **CLEAN,
    "IBDIAG_TEST_DEVICE": "cpu-stand-in",
    "CUDA_VISIBLE_DEVICES": None,
}  # unset: "" would hide every GPU, as in CUDA
QUICK = ["--backend", "nccl", "--iters", "3", "--warmup", "2", "--timeout", "60"]


def _env(**extra: str) -> dict[str, str]:
    import os

    env = {k: v for k, v in os.environ.items() if k not in CLEAN}
    env.update(IBDIAG_TEST_DEVICE="cpu-stand-in", **extra)
    return env


@pytest.mark.parametrize("op", list(OPS))
def test_every_op_through_the_nccl_branch(cli, op):
    res = cli(
        "bench",
        "collective",
        "--nproc",
        "2",
        "--op",
        op,
        "--sizes",
        "4K,256K",
        *QUICK,
        "-o",
        "json",
        env=STAND_IN,
    )
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert (
        doc["backend"] == "nccl-stand-in"
        and "stand-in" in doc["timing"]
        and "test fake" in doc["timing"]
    )
    assert [p["device"].split()[0] for p in doc["per_rank"]] == [
        "cuda:0",
        "cuda:1",
    ]  # bound by local rank
    assert all("CPU stand-in" in p["device"] for p in doc["per_rank"])
    assert {r["in_place"] for r in doc["results"]} == set(OPS[op].placements)
    assert all(r["wrong"] == 0 for r in doc["results"]), doc["results"]
    assert all(r["time_us"] > 0 for r in doc["results"])


def test_ranks_sharing_one_gpu_are_refused(cli):
    res = cli(
        "bench",
        "collective",
        "--nproc",
        "2",
        "--sizes",
        "4K",
        *QUICK,
        env={**STAND_IN, "CUDA_VISIBLE_DEVICES": "3"},
    )
    assert res.exit_code == 3, res.stderr
    assert (
        "GPU stand-in-gpu-3 (cuda:0)" in res.stderr
        and "already rank" in res.stderr
        and "CUDA_VISIBLE_DEVICES='3'" in res.stderr
    )
    assert "Traceback" not in res.stderr


def _run_hung(
    ibdiag_exe: str, tmp_path: Path, teardown: str, timeout: int = 4
) -> tuple[int, str, float]:
    marks = tmp_path / "marks"
    marks.mkdir()
    env = _env(IBDIAG_TEST_HOOK=f"hang:rank=1,step=2;mark:dir={marks};teardown:action={teardown}")
    cmd = [
        ibdiag_exe,
        "bench",
        "collective",
        "--nproc",
        "3",
        "--backend",
        "nccl",
        "--sizes",
        "64K,128K,256K",
        "--iters",
        "3",
        "--warmup",
        "1",
        "--timeout",
        str(timeout),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 120
        while not (marks / "rank0.step2").exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.05)
        t0 = time.monotonic()
        _, err = proc.communicate(timeout=timeout + 90)
        return proc.returncode, err, time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_teardown_that_hangs_still_reports_the_diagnosis_and_ends(ibdiag_exe, tmp_path):
    # destroy_process_group() can hang on a broken communicator: the diagnosis is written first, and
    # ibdiag's watchdog (kept alive through the teardown) ends the rank
    code, err, elapsed = _run_hung(ibdiag_exe, tmp_path, "hang")
    assert code == 3, err
    assert "rank 1 on" in err and "alive but did not reach step 2" in err, err
    assert "rank 2 on" not in err
    assert elapsed < 4 + 10 + 5 + 15, (
        f"took {elapsed:.1f} s"
    )  # timeout, diagnosis, teardown bound, slack


def test_a_rank_aborted_after_writing_its_diagnosis_does_not_make_healthy_ranks_blamed(
    ibdiag_exe, tmp_path
):
    # NCCL's watchdog aborts (SIGABRT) the ranks tearing down a broken communicator
    code, err, _ = _run_hung(ibdiag_exe, tmp_path, "abort")
    assert code == 3, err
    assert "alive but did not reach step 2" in err and "rank 1 on" in err, err
    assert "ranks that did not answer: rank 0" not in err and "rank 2 (pid" not in err
    assert "killed by SIGABRT" not in err.split("afterwards")[0]


def test_a_failure_before_the_first_step_says_what_it_was(cli, tmp_path):
    # torch without numpy: the memory check (an object collective) fails on every rank
    shadow = tmp_path / "shadow" / "numpy"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text(
        "raise ModuleNotFoundError('numpy hidden by the test', name='numpy')\n"
    )
    res = cli(
        "bench",
        "collective",
        "--nproc",
        "2",
        "--backend",
        "gloo",
        "--sizes",
        "4K",
        "--iters",
        "2",
        "--timeout",
        "30",
        env={**CLEAN, "PYTHONPATH": str(shadow.parent)},
    )
    assert res.exit_code == 3, res.stderr
    assert "setup (checking memory on every rank) failed" in res.stderr and "numpy" in res.stderr, (
        res.stderr
    )
    assert (
        "every rank is alive and reached this step" not in res.stderr
        and "rendezvous" not in res.stderr
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _one_rank(**extra: str) -> dict[str, str]:
    return {
        **STAND_IN,
        "RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(_free_port()),
        **extra,
    }


def test_torch_too_old_for_nccl_is_a_clear_exit_3(cli, monkeypatch):
    import torch

    monkeypatch.setattr(torch, "__version__", "2.1.2+cu121")
    res = cli("bench", "collective", "--sizes", "4K", *QUICK, env=_one_rank())
    assert res.exit_code == 3, (res.stderr, res.exception)
    assert (
        "torch 2.1.2+cu121 is too old for --backend nccl" in res.stderr
        and "internal error" not in res.stderr
    )


def test_the_gloo_interface_is_honoured_and_reported(cli):
    res = cli(
        "bench",
        "collective",
        "--sizes",
        "4K",
        *QUICK,
        "-o",
        "json",
        env=_one_rank(GLOO_SOCKET_IFNAME="lo"),
    )
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["per_rank"][0]["interface"] == "lo (GLOO_SOCKET_IFNAME)"
    assert doc["settings"]["GLOO_SOCKET_IFNAME"] == "lo"
    res = cli(
        "bench",
        "collective",
        "--sizes",
        "4K",
        *QUICK,
        env=_one_rank(GLOO_SOCKET_IFNAME="nosuchif0"),
    )
    assert (
        res.exit_code == 2
        and "GLOO_SOCKET_IFNAME='nosuchif0': no interface nosuchif0" in res.stderr
    ), res.stderr

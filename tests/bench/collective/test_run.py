"""Real torch.distributed (gloo) runs on loopback: --nproc 2/3, torchrun 2/3, a killed rank, a hung rank,
a slow rank (test hook), --save. Every rank is a real process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

from ibdiag.bench.results.model import load_bench_file
from ibdiag.collectives import OPS

pytestmark = pytest.mark.slow

TORCHRUN = Path(sys.executable).parent / "torchrun"
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
    )
}
QUICK = ["--backend", "gloo", "--iters", "3", "--warmup", "1", "--timeout", "60"]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in CLEAN}
    env.update(extra)
    return env


def _check_run(doc: dict, op: str, n: int, dtype: str) -> None:
    spec = OPS[op]
    assert (
        doc["schema"],
        doc["kind"],
        doc["op"],
        doc["backend"],
        doc["world_size"],
        doc["dtype"],
    ) == ("ibdiag.bench/1", "collective", op, "gloo", n, dtype)
    rows = doc["results"]
    assert {r["in_place"] for r in rows} == set(spec.placements)
    assert rows and all(r["wrong"] == 0 for r in rows), (
        rows
    )  # every element validated on every rank
    for r in rows:
        assert r["busbw_gbs"] == pytest.approx(r["algbw_gbs"] * spec.busbw_factor(n))
        assert r["algbw_gbs"] == pytest.approx(r["bytes"] / (r["time_us"] * 1e-6) / 1e9)
        assert r["time_us_min"] <= r["time_us"] <= r["time_us_max"]
    assert doc["avg_busbw_gbs"] == pytest.approx(sum(r["busbw_gbs"] for r in rows) / len(rows))
    assert len(doc["per_rank"]) == n and all(p["setup_s"] > 0 for p in doc["per_rank"])
    assert doc["setup_s"] >= doc["setup_s_min"] > 0
    assert {f["check"]: f["severity"] for f in doc["findings"]}["collective.wrong"] == "ok"


OPS_3 = [
    ("all_reduce", "float32"),
    ("all_gather", "bfloat16"),
    ("reduce_scatter", "float16"),
    ("broadcast", "float32"),
    ("reduce", "bfloat16"),
    ("all_to_all", "float16"),
    ("sendrecv", "float32"),
]


@pytest.mark.parametrize(("op", "dtype"), OPS_3)
def test_three_local_ranks_every_op(cli, op, dtype):
    res = cli(
        "bench",
        "collective",
        "--nproc",
        "3",
        "--op",
        op,
        "--dtype",
        dtype,
        "--sizes",
        "4K,1M",
        *QUICK,
        "-o",
        "json",
        env=CLEAN,
    )
    assert res.exit_code == 0, res.stderr
    _check_run(json.loads(res.stdout), op, 3, dtype)


OPS_2 = [
    ("all_reduce", ["--blocking"]),
    ("all_gather", []),
    ("reduce_scatter", ["--blocking"]),
    ("broadcast", []),
    ("reduce", []),
    ("all_to_all", []),
    ("sendrecv", []),
]


@pytest.mark.parametrize(("op", "extra"), OPS_2)
def test_two_local_ranks_every_op(cli, op, extra):
    res = cli(
        "bench",
        "collective",
        "--nproc",
        "2",
        "--op",
        op,
        "--sizes",
        "64K:256K",
        *QUICK,
        *extra,
        "-o",
        "json",
        env=CLEAN,
    )
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    _check_run(doc, op, 2, "float32")
    assert doc["blocking"] is ("--blocking" in extra)
    assert [r["bytes"] for r in doc["results"] if r["in_place"] is OPS[op].placements[0]] == [
        65536,
        131072,
        262144,
    ]


def test_without_validation_wrong_is_not_available(cli):
    res = cli(
        "bench",
        "collective",
        "--nproc",
        "2",
        "--op",
        "all_gather",
        "--sizes",
        "64K",
        *QUICK,
        "--no-check",
        "-o",
        "json",
        env=CLEAN,
    )
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert all(r["wrong"] is None for r in doc["results"]) and doc["validation"] is False
    assert "collective.wrong" not in {f["check"] for f in doc["findings"]}


@pytest.mark.parametrize(("n", "op"), [(2, "all_reduce"), (3, "reduce_scatter")])
def test_under_torchrun(n, op, tmp_path):
    cmd = [
        str(TORCHRUN),
        "--standalone",
        "--nproc-per-node",
        str(n),
        "-m",
        "ibdiag",
        "bench",
        "collective",
        "--op",
        op,
        "--sizes",
        "256K,1M",
        *QUICK,
        "-o",
        "json",
    ]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=240, env=_env(), cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)  # one document: only rank 0 printed
    _check_run(doc, op, n, "float32")
    assert doc["launcher"] == "torchrun"
    assert sorted(p["rank"] for p in doc["per_rank"]) == list(range(n))


def _children_with_rank(parent_pid: int, rank: int) -> int | None:
    import psutil

    for child in psutil.Process(parent_pid).children(recursive=True):
        try:
            if (
                child.environ().get("RANK") == str(rank)
                and "IBDIAG_COLLECTIVE_REPORT_DIR" in child.environ()
            ):
                return child.pid
        except psutil.Error:
            continue
    return None


def _wait_for(path: Path, proc: subprocess.Popen, limit: float = 120.0) -> None:
    deadline = time.monotonic() + limit
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def test_a_killed_rank_ends_the_run_with_exit_3_naming_it(ibdiag_exe, tmp_path):
    timeout = 20
    marks = tmp_path / "marks"
    marks.mkdir()
    env = _env(IBDIAG_TEST_HOOK=f"slow:rank=2,seconds=0.05;mark:dir={marks}")
    cmd = [
        ibdiag_exe,
        "bench",
        "collective",
        "--nproc",
        "3",
        "--backend",
        "gloo",
        "--sizes",
        "64K:16M",
        "--iters",
        "20",
        "--warmup",
        "1",
        "--timeout",
        str(timeout),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        _wait_for(marks / "rank1.step2", proc)  # mid-run: rank 1 is in its second size
        victim = _children_with_rank(proc.pid, 1)
        assert victim is not None
        os.kill(victim, signal.SIGKILL)
        killed_at = time.monotonic()
        out, err = proc.communicate(timeout=timeout + 30)
        elapsed = time.monotonic() - killed_at
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 3, err
    assert elapsed < timeout, f"took {elapsed:.1f} s"
    assert f"rank 1 (pid {victim}) was killed by SIGKILL" in err and "Traceback" not in err
    assert err.startswith("ibdiag: error:") and "hint:" in err
    assert out == ""


def test_a_hung_rank_ends_the_run_within_the_timeout(ibdiag_exe, tmp_path):
    timeout = 4
    marks = tmp_path / "marks"
    marks.mkdir()
    env = _env(IBDIAG_TEST_HOOK=f"hang:rank=1,step=2;mark:dir={marks}")
    cmd = [
        ibdiag_exe,
        "bench",
        "collective",
        "--nproc",
        "3",
        "--backend",
        "gloo",
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
        _wait_for(marks / "rank0.step2", proc)
        stuck_at = time.monotonic()
        out, err = proc.communicate(timeout=timeout + 60)
        elapsed = time.monotonic() - stuck_at
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 3, err
    # gloo's timeout, then 2.5 s watching heartbeats to name who did not answer
    assert elapsed < timeout + 6, f"took {elapsed:.1f} s"
    assert "did not complete within 4 s" in err
    assert "rank 1 on" in err and "alive but did not reach step 2" in err
    assert "rank 2 on" not in err  # the waiting peer is not blamed
    import psutil

    assert not [
        c for c in psutil.Process().children(recursive=True) if "ibdiag" in " ".join(c.cmdline())
    ]  # nothing left running


def test_a_slow_rank_is_named_as_a_straggler(cli):
    env = {**CLEAN, "IBDIAG_TEST_HOOK": "slow:rank=2,seconds=0.02"}
    res = cli(
        "bench",
        "collective",
        "--nproc",
        "3",
        "--backend",
        "gloo",
        "--sizes",
        "16K:256K",
        "--iters",
        "8",
        "--warmup",
        "1",
        "-o",
        "json",
        env=env,
    )
    assert res.exit_code == 0, res.stderr  # a straggler is a warning
    doc = json.loads(res.stdout)
    st = [f for f in doc["findings"] if f["check"] == "collective.straggler"]
    assert [f["subject"] for f in st if f["severity"] == "warn"] == [f"rank 2 ({doc['hosts'][0]})"]
    assert st[0]["value"] > 0.5  # the others waited ~20 ms of each few-ms collective
    assert all(s["latest_rank"] == 2 for s in doc["spread"])
    assert doc["status"] == "warn"


def test_save_and_table_through_the_console_script(ibdiag_exe, tmp_path):
    saved = tmp_path / "run.json"
    cmd = [
        ibdiag_exe,
        "bench",
        "collective",
        "--nproc",
        "2",
        "--sizes",
        "1M",
        *QUICK,
        "--save",
        str(saved),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=_env())
    assert proc.returncode == 0, proc.stderr
    assert (
        "#       size         count      type   redop    root" in proc.stdout
        and "# Avg bus bandwidth" in proc.stdout
    )
    assert "setup (rendezvous + first collective)" in proc.stdout
    run = load_bench_file(saved)
    assert (
        run.kind == "collective"
        and run.meta.world_size == 2
        and run.meta.measured.launcher == "ibdiag"
    )
    assert [r.bytes for r in run.results] == [1048576]


def test_sizes_that_do_not_fit_are_refused_on_every_rank(cli):
    res = cli("bench", "collective", "--nproc", "2", "--sizes", "1T", *QUICK, env=CLEAN)
    assert res.exit_code == 2, res.stderr
    assert "the largest size needs 1 TiB of buffers" in res.stderr and "--sizes" in res.stderr

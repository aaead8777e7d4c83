"""``bench collective --nproc``: a rank count the node cannot hold is refused before anything is
spawned; the rank-log directory never outlives the run, however the supervisor ends (SIGINT, SIGTERM,
SIGKILL: the next run removes what a killed one left); a stopped rank is named within --timeout + 1 s.
Every rank is a real process (gloo on loopback)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

import psutil

from tests.adversarial.net_support import wait_gone

pytestmark = pytest.mark.slow

LAUNCH_VARS = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
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


def _env(tmpdir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS}
    env["TMPDIR"] = str(tmpdir)
    env.update(extra)
    return env


def _rank_dirs(tmpdir: Path) -> list[Path]:
    return sorted(tmpdir.glob("ibdiag-collective-*"))


def _ranks(parent: int) -> list[psutil.Process]:
    out = []
    for child in psutil.Process(parent).children(recursive=True):
        try:
            if "IBDIAG_COLLECTIVE_REPORT_DIR" in child.environ():
                out.append(child)
        except psutil.Error:
            continue
    return out


def _start_long_run(
    exe: str, tmpdir: Path, marks: Path, *extra: str, nproc: int = 2, timeout: int = 30
) -> subprocess.Popen[str]:
    cmd = [
        exe,
        "bench",
        "collective",
        "--nproc",
        str(nproc),
        "--backend",
        "gloo",
        "--sizes",
        "64K,128K,256K",
        "--iters",
        "200000",
        "--warmup",
        "1",
        "--timeout",
        str(timeout),
        *extra,
    ]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(tmpdir, IBDIAG_TEST_HOOK=f"mark:dir={marks}"),
    )
    deadline = time.monotonic() + 120
    while not all(
        (marks / f"rank{r}.step1").exists() for r in range(nproc)
    ):  # every rank is measuring
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the ranks never started measuring"
        time.sleep(0.05)
    return proc


@pytest.fixture
def dirs(tmp_path):
    tmpdir, marks = tmp_path / "tmp", tmp_path / "marks"
    tmpdir.mkdir()
    marks.mkdir()
    return tmpdir, marks


def test_a_rank_count_this_node_cannot_hold_is_refused_before_spawning(ibdiag_exe, dirs):
    tmpdir, _ = dirs
    t0 = time.monotonic()
    r = subprocess.run(
        [
            ibdiag_exe,
            "bench",
            "collective",
            "--nproc",
            "4096",
            "--backend",
            "gloo",
            "--sizes",
            "4K",
        ],
        capture_output=True,
        text=True,
        env=_env(tmpdir),
        timeout=60,
    )
    assert r.returncode == 2, r.stderr
    assert time.monotonic() - t0 < 20  # no rank imported torch
    assert r.stderr.startswith("ibdiag: error: --nproc 4096: this node cannot hold 4096 ranks")
    cpus = len(os.sched_getaffinity(0))
    assert f"{cpus} CPU" in r.stderr and "MiB per rank" in r.stderr and "available" in r.stderr, (
        r.stderr
    )
    assert "hint: " in r.stderr and "Traceback" not in r.stderr
    assert not _rank_dirs(tmpdir)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_the_rank_logs_go_when_the_supervisor_is_interrupted(ibdiag_exe, dirs, sig):
    tmpdir, marks = dirs
    proc = _start_long_run(ibdiag_exe, tmpdir, marks)
    ranks = _ranks(proc.pid)
    assert len(ranks) == 2 and len(_rank_dirs(tmpdir)) == 1
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert all(wait_gone(p.pid, 10) for p in ranks), "a rank outlived its supervisor"
    assert not _rank_dirs(tmpdir), "the rank-log directory stayed behind"


def test_the_rank_logs_of_a_killed_supervisor_are_removed_by_the_next_run(ibdiag_exe, dirs):
    tmpdir, marks = dirs
    proc = _start_long_run(ibdiag_exe, tmpdir, marks)
    ranks = _ranks(proc.pid)
    left = _rank_dirs(tmpdir)
    assert len(ranks) == 2 and len(left) == 1
    proc.kill()
    proc.communicate(timeout=30)
    assert all(wait_gone(p.pid, 10) for p in ranks), (
        "a rank outlived its killed supervisor"
    )  # PR_SET_PDEATHSIG
    r = subprocess.run(
        [
            ibdiag_exe,
            "bench",
            "collective",
            "--nproc",
            "1",
            "--backend",
            "gloo",
            "--sizes",
            "4K",
            "--iters",
            "1",
            "--warmup",
            "0",
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
        env=_env(tmpdir),
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert not _rank_dirs(tmpdir), "the killed run's rank logs are still there"


def test_a_stopped_rank_is_named_within_the_timeout(ibdiag_exe, dirs):
    tmpdir, marks = dirs
    timeout = 8  # the supervisor's start-up backstop is timeout + 15 s: 3 ranks importing torch on a loaded 2-CPU box need it
    proc = _start_long_run(ibdiag_exe, tmpdir, marks, nproc=3, timeout=timeout)
    victim = next(p for p in _ranks(proc.pid) if p.environ().get("RANK") == "1")
    try:
        victim.send_signal(signal.SIGSTOP)
        t0 = time.monotonic()
        assert proc.stderr is not None
        first = proc.stderr.readline()
        waited = time.monotonic() - t0
        err = first + proc.stderr.read()
        proc.wait(30)
    finally:
        try:
            victim.send_signal(signal.SIGCONT)
        except psutil.Error:
            pass
        if proc.poll() is None:
            proc.kill()
    print(f"stopped rank named after {waited:.2f} s (--timeout {timeout})")
    assert proc.returncode == 3, err
    assert "rank 1 " in err and f"pid {victim.pid})" in err and "stopped" in err, err
    assert (
        "rank 2 " not in err.split("hint:")[0] and "rank 0 on" not in err
    )  # the waiting ranks are not blamed
    assert waited <= timeout + 1 + 2, (
        f"the stopped rank was named after {waited:.1f} s (--timeout {timeout})"
    )
    assert wait_gone(victim.pid, 10)


def test_capacity_is_the_smaller_of_the_cpu_and_memory_bounds():
    from ibdiag.bench.collective.spawn import MAX_RANKS_PER_CPU, RANK_MEMORY_BYTES, check_capacity
    from ibdiag.errors import UsageError

    check_capacity(2 * MAX_RANKS_PER_CPU, cpus=2, available_bytes=10**12)
    with pytest.raises(
        UsageError,
        match=rf"it has 2 CPUs \(at most {MAX_RANKS_PER_CPU} ranks each: {2 * MAX_RANKS_PER_CPU}\)",
    ):
        check_capacity(2 * MAX_RANKS_PER_CPU + 1, cpus=2, available_bytes=10**12)
    check_capacity(10, cpus=64, available_bytes=10 * RANK_MEMORY_BYTES)
    with pytest.raises(UsageError, match=r"300 MiB per rank before its buffers: 10\)") as e:
        check_capacity(11, cpus=64, available_bytes=10 * RANK_MEMORY_BYTES)
    assert "--nproc 10 or fewer" in (e.value.hint or "")

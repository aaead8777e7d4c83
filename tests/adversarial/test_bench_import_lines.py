"""``bench import`` of crafted logs (issue 42, item 1): lines of 32 KB built so the importers' old
patterns backtracked (a perftest banner key of letters, spaces after ``NET/Plugin``, ``NET/Plugin``
repeated, digits after ``Out of bounds values :``), a 5000-digit range in ``srun -w``, and the same
log gzipped. Each log of about 130 KB took from seconds to minutes, or ended in an internal error
(Python's int-digit ValueError); now each is read within a few CPU seconds and ends in a result or an
input error, never exit 3. Run as a real process under RLIMIT_CPU, so a regression fails in seconds
instead of hanging the suite."""

from __future__ import annotations

import gzip
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

N = 32 * 1024
#: What makes the log perftest's, so its banner reader sees the next line.
PERFTEST = (
    "                    RDMA_Write BW Test\n Dual-port       : OFF\t\tDevice         : mlx5_0\n"
)
CRAFTED = {
    "banner key of letters": PERFTEST + "A" * N,
    "banner key then spaces": PERFTEST + "Dual-port" + " " * N + "x",
    "spaces after NET/Plugin": "node01:1:1 [0] NCCL INFO NET/Plugin" + " " * N + "x",
    "NET/Plugin repeated": "node01:1:1 [0] NCCL INFO " + "NET/Plugina" * (N // 11),
    "libibverbs repeated": "node01:1:1 [0] NCCL WARN " + "libibverbsa" * (N // 11),
    "a perftest column of digits": "t_" + "0" * N,
    "bracketed perftest columns": "#bytes " + "BW peak[a" * (N // 9),
    "digits after Out of bounds": "# Out of bounds values : " + "0" * N + " OK",
    "digits after Avg bus bandwidth": "# Avg bus bandwidth : " + "0" * N + " OK",
    "a host prefix of a0a0": "a0" * (N // 2) + " NCCL INFO Using network IB",
    "a 5000-digit node range": "srun -w gpu[1-" + "9" * 5000 + "] ./all_reduce_perf -b 8 -e 8M",
    "a node range of a superscript": "srun -w gpu[1-\u00b2] ./all_reduce_perf -b 8 -e 8M",
    "bare perftest JSON keys": '{"MsgSize": 1, ' + "a" * N + "}",
    "bare perftest JSON values": '{"MsgSize": 1, "x": A' + " " * N + "x}",
}
#: CPU seconds one import may take (a Python start and a 130 KB log take well under one).
CPU_LIMIT_S = 5


def _run(path: Path) -> tuple[subprocess.CompletedProcess[str], float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_CPU, (CPU_LIMIT_S * 4, CPU_LIMIT_S * 4))

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    res = subprocess.run(
        [sys.executable, "-m", "ibdiag", "bench", "import", str(path), "-o", "json"],
        capture_output=True,
        text=True,
        preexec_fn=limit,
        env=env,
        timeout=600,
        check=False,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return res, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


@pytest.mark.slow
@pytest.mark.parametrize("what", list(CRAFTED))
@pytest.mark.parametrize("packed", [False, True], ids=["plain", "gzip"])
def test_a_crafted_log_is_read_in_linear_time(tmp_path: Path, what: str, packed: bool) -> None:
    text = "\n".join([CRAFTED[what]] * 4) + "\n"
    path = tmp_path / ("crafted.log.gz" if packed else "crafted.log")
    if packed:
        path.write_bytes(gzip.compress(text.encode()))
        assert path.stat().st_size < 2000  # what the 994-byte log was: tiny when packed
    else:
        path.write_text(text)
    res, cpu_s = _run(path)
    assert res.returncode in (0, 1, 2), (res.returncode, res.stderr[-600:])
    assert "internal error" not in res.stderr, res.stderr[-600:]
    assert cpu_s < CPU_LIMIT_S, f"{what}: {cpu_s:.1f} CPU seconds"
    assert len(res.stderr) < 4000, res.stderr[:400]  # no 32 KB of the log echoed back

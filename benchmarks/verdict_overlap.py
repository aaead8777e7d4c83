#!/usr/bin/env python3
"""The verdict's overlap model: closed form (what ``ibdiag verdict`` uses) beside the bucket-by-bucket
definition it must agree with, on the work one verdict does (its job, the bucket-size search over powers of
two from 1 MiB to S, and the scaling table up to 16384 ranks), plus the whole command as a process.

    python benchmarks/verdict_overlap.py [--runs 5]

Both implementations run alternately in the same process; we report the min and median per verdict's
worth of work and their ratio, and check that both give the same exposed times.
"""

from __future__ import annotations

import argparse
import math
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from ibdiag.verdict import model  # noqa: E402
from tests.support.verdict_oracle import simulate_overlap_stepwise  # noqa: E402

MIB = 2**20

# (label, gradient bytes, strategy, ranks, ranks per node, backward s, busbw GB/s, latency s)
WORKLOADS = (
    ("8e9 bf16, 512 ranks (seed)", 16_000_000_000, "ddp", 512, 1, 0.5, 50.0, 50e-6),
    ("70B bf16 fsdp, 1024 ranks", 140_000_000_000, "fsdp", 1024, 8, 1.2, 360.0, 50e-6),
    ("70B fp32 ddp, 1024 ranks", 280_000_000_000, "ddp", 1024, 8, 1.2, 360.0, 50e-6),
)


def verdict_work(sim, grad, strategy, ranks, rpn, backward, busbw, lat) -> float:
    """What judge() computes, with ``sim`` as the overlap model; returns a checksum of exposed times."""
    f = model.traffic_factor(strategy, ranks)
    total = sim(grad, 25 * MIB, backward, f, busbw, lat).exposed_s
    for size in model.candidate_buckets(grad):
        total += sim(grad, size, backward, f, busbw, lat).exposed_s
    for n in model.scaling_ranks(ranks, rpn, 16384):
        if n > rpn:
            total += sim(
                grad, 25 * MIB, backward * ranks / n, model.traffic_factor(strategy, n), busbw, lat
            ).exposed_s
    return total


def timed(fn, *args) -> tuple[float, float]:
    t0 = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - t0, out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    print(f"python {sys.version.split()[0]}, runs: {args.runs}")
    for label, *w in WORKLOADS:
        closed, stepwise = [], []
        for _ in range(args.runs):
            t, a = timed(verdict_work, model.simulate_overlap, *w)
            closed.append(t)
            t, b = timed(verdict_work, simulate_overlap_stepwise, *w)
            stepwise.append(t)
        same = math.isclose(a, b, rel_tol=1e-9)
        ratio = statistics.median(stepwise) / statistics.median(closed)
        print(
            f"{label:30s} closed form: min {min(closed) * 1e3:8.3f} ms  median {statistics.median(closed) * 1e3:8.3f} ms | "
            f"bucket by bucket: min {min(stepwise) * 1e3:9.1f} ms  median {statistics.median(stepwise) * 1e3:9.1f} ms | "
            f"ratio {ratio:,.0f}x | same answer: {same}"
        )
    exe = shutil.which("ibdiag", path=str(Path(sys.executable).parent)) or shutil.which("ibdiag")
    if exe:
        cmd = [
            exe,
            "verdict",
            "--params",
            "70B",
            "--dtype",
            "fp32",
            "--ranks",
            "1024",
            "--compute-s",
            "1.2",
            "--busbw",
            "360",
            "--root",
            str(REPO / "fixtures" / "sysfs" / "dgx-h100"),
            "-o",
            "json",
        ]
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        times = []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
            times.append(time.perf_counter() - t0)
        print(
            f"whole process: ibdiag verdict --params 70B --dtype fp32 ... --root dgx-h100 -o json: min {min(times) * 1e3:.0f} ms  median {statistics.median(times) * 1e3:.0f} ms"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

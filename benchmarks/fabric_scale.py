#!/usr/bin/env python3
"""``ibdiag fabric -o json`` on a 4096-port simulated fabric against the raw tools it drives.

    python benchmarks/fabric_scale.py [--pairs 7]

The fabric: 128 hosts x 8 rails, 32 leaves (4 per rail), 16 spines, 1:1 — 48 switches, 1024 host
adapters, 4096 ports (tests/support/fabric_topology.py), run by ibsim with opensm (FABRIC-SIM.md).
A: ``ibdiag fabric -o json`` as a whole process (start-up, discovery, link states, every port's
counters, the subnet managers, judgement, JSON). B: what a user runs by hand for the same answer's raw
material, ``ibnetdiscover`` then ``ibqueryerrors --data --details`` (one whole-fabric counters query).
Interleaved A B, B A ... for ``--pairs`` pairs; the median ratio (target <= 1.5) and A's median wall
time (target < 1 s).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ratios import report, report_value, run_pairs

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.support.fabric_topology import rail_fat_tree  # noqa: E402
from tests.support.ibsim import SimFabric  # noqa: E402


def timed(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode not in (0, 1):
        raise SystemExit(f"{argv[0]} exited {done.returncode}: {done.stderr.decode()[-400:]}")
    return elapsed


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=7)
    args = ap.parse_args()
    topo = rail_fat_tree(hosts=128, rails=8, leaves_per_rail=4, spines=16)
    assert topo.port_count == 4096 and len(topo.switches) == 48
    with (
        tempfile.TemporaryDirectory() as tmp,
        SimFabric(topo.text(), Path(tmp) / "sim", timeout_s=60) as sim,
    ):
        env = {**sim.env(), "PYTHONPATH": str(REPO)}

        def ibdiag() -> float:
            return timed([sys.executable, "-m", "ibdiag", "fabric", "-o", "json"], env)

        def tools() -> float:
            return timed(["ibnetdiscover"], env) + timed(
                ["ibqueryerrors", "--data", "--details"], env
            )

        ibdiag(), tools()  # warm the page cache and the simulator's tables
        result = run_pairs(ibdiag, tools, args.pairs)
    report("fabric -o json vs ibnetdiscover + ibqueryerrors (4096 ports)", result, "<=", 1.5, "s")
    report_value(
        "fabric -o json wall time (4096 ports)",
        sorted(result.mine)[len(result.mine) // 2],
        "<",
        1.0,
        "s",
    )
    return 0


if __name__ == "__main__":
    os.chdir(Path(__file__).resolve().parent)
    raise SystemExit(main())

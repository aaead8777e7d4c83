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
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ratios import Paired, report, report_value, run_pairs

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.support.fabric_topology import rail_fat_tree  # noqa: E402
from tests.support.ibsim import SimFabric  # noqa: E402

CPU: dict[str, list[float]] = {"ibdiag": [], "tools": []}


def timed(argv: list[str], env: dict[str, str], side: str = "") -> float:
    """Wall seconds of one command; its CPU seconds (user + system, children included) go to CPU[side]."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, check=False)
    if (
        done.returncode < 0
    ):  # ibqueryerrors now and then dies by SIGSEGV here; ibdiag runs it again too
        print(f"  {argv[0]} died by signal {-done.returncode}; once more", flush=True)
        done = subprocess.run(argv, env=env, capture_output=True, check=False)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if side:
        CPU[side].append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
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
            return timed([sys.executable, "-m", "ibdiag", "fabric", "-o", "json"], env, "ibdiag")

        def tools() -> float:
            return timed(["ibnetdiscover"], env, "tools") + timed(
                ["ibqueryerrors", "--data", "--details"], env, "tools"
            )

        ibdiag(), tools()  # warm the page cache and the simulator's tables
        CPU["ibdiag"].clear()
        CPU["tools"].clear()
        result = run_pairs(ibdiag, tools, args.pairs)
    cpu_tools = [a + b for a, b in zip(CPU["tools"][::2], CPU["tools"][1::2], strict=True)]
    report(
        "fabric -o json CPU s vs the two tools' (4096 ports)",
        Paired(tuple(CPU["ibdiag"]), tuple(cpu_tools)),
        None,
        None,
        "CPU s",
    )
    print(f"load average during the run: {os.getloadavg()[0]:.1f}")
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

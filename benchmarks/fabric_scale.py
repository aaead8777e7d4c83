#!/usr/bin/env python3
"""``ibdiag fabric -o json`` on a 4096-port simulated fabric against the raw tools it drives.

    python benchmarks/fabric_scale.py [--pairs 7] [--against /path/to/other/checkout]

The fabric: 128 hosts x 8 rails, 32 leaves (4 per rail), 16 spines, 1:1 — 48 switches, 1024 host
adapters, 4096 ports (tests/support/fabric_topology.py), run by ibsim with opensm (FABRIC-SIM.md).
A: ``ibdiag fabric -o json`` as a whole process (start-up, discovery, link states, every port's
counters, the subnet managers, judgement, JSON). B: what a user runs by hand for the same answer's raw
material, ``ibnetdiscover`` then ``ibqueryerrors --data --details`` (one whole-fabric counters query).
Interleaved A B, B A ... for ``--pairs`` pairs. Targets (issue 39): ibdiag's CPU (user + system,
the tools it runs included) <= 2 x the two tools', its wall time <= 1.5 x theirs and < 1 s.

Then what ``--data-counters`` costs: ``fabric -o prom`` with and without it, interleaved (each
switch port's data and packet counters: one more ``ibqueryerrors --counters --switch`` beside the
others, parsed and exported). ``--against DIR``: ibdiag from another checkout (before/after),
interleaved with this one's.

Bytecode first, as an installed wheel has it: both checkouts are compiled (``compileall``) before
anything is timed (under ``PYTHONDONTWRITEBYTECODE=1``, set on the development VMs, every run would
otherwise compile ibdiag from source). CPU is the figure to trust on a shared machine: the load is
printed with each line.
"""

from __future__ import annotations

import argparse
import compileall
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from ratios import Paired, report, report_value, run_pairs

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.support.fabric_topology import rail_fat_tree  # noqa: E402
from tests.support.ibsim import SimFabric  # noqa: E402


def timed(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """Wall and CPU seconds (user + system, children included) of one command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, check=False, cwd=cwd)
    if (
        done.returncode < 0
    ):  # ibqueryerrors now and then dies by SIGSEGV here; ibdiag runs it again too
        print(f"  {argv[0]} died by signal {-done.returncode}; once more", flush=True)
        done = subprocess.run(argv, env=env, capture_output=True, check=False, cwd=cwd)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 1):
        raise SystemExit(f"{argv[0]} exited {done.returncode}: {done.stderr.decode()[-400:]}")
    return elapsed, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def load() -> str:
    return "load {:.1f} {:.1f} {:.1f}".format(*os.getloadavg())


def both(
    mine: Callable[[], tuple[float, float]], theirs: Callable[[], tuple[float, float]], pairs: int
) -> tuple[Paired, Paired]:
    """Interleaved pairs; (wall, CPU) of each side."""
    walls: dict[str, list[float]] = {"a": [], "b": []}
    cpus: dict[str, list[float]] = {"a": [], "b": []}

    def side(key: str, f: Callable[[], tuple[float, float]]) -> Callable[[], float]:
        def go() -> float:
            wall, cpu = f()
            walls[key].append(wall)
            cpus[key].append(cpu)
            return wall

        return go

    run_pairs(side("a", mine), side("b", theirs), pairs)
    return (
        Paired(tuple(walls["a"]), tuple(walls["b"])),
        Paired(tuple(cpus["a"]), tuple(cpus["b"])),
    )


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=7)
    ap.add_argument(
        "--against", type=Path, help="another checkout: its ibdiag interleaved with this one's"
    )
    args = ap.parse_args()
    for tree in [REPO, *([args.against] if args.against else [])]:
        compileall.compile_dir(str(tree / "ibdiag"), quiet=1)
    topo = rail_fat_tree(hosts=128, rails=8, leaves_per_rail=4, spines=16)
    assert topo.port_count == 4096 and len(topo.switches) == 48
    with (
        tempfile.TemporaryDirectory() as tmp,
        SimFabric(topo.text(), Path(tmp) / "sim", timeout_s=60) as sim,
    ):
        env = sim.env()
        work = Path(tmp)

        def ibdiag(tree: Path, *extra: str) -> Callable[[], tuple[float, float]]:
            argv = [sys.executable, "-m", "ibdiag", "fabric", *extra]
            return lambda: timed(argv, {**env, "PYTHONPATH": str(tree)}, tree)

        def tools() -> tuple[float, float]:
            a, b = (
                timed(["ibnetdiscover"], env, work),
                timed(["ibqueryerrors", "--data", "--details"], env, work),
            )
            return a[0] + b[0], a[1] + b[1]

        ibdiag(REPO, "-o", "json")(), tools()  # warm the page cache and the simulator's tables
        wall, cpu = both(ibdiag(REPO, "-o", "json"), tools, args.pairs)
        report(
            f"fabric -o json CPU vs the two tools' (4096 ports; {load()})", cpu, "<=", 2.0, "CPU s"
        )
        report(
            f"fabric -o json wall vs ibnetdiscover + ibqueryerrors (4096 ports; {load()})",
            wall,
            "<=",
            1.5,
            "s",
        )
        report_value(
            f"fabric -o json wall time, median (4096 ports; {load()})",
            statistics.median(wall.mine),
            "<",
            1.0,
            "s",
        )
        wall, cpu = both(
            ibdiag(REPO, "-o", "prom"), ibdiag(REPO, "-o", "prom", "--no-data-counters"), args.pairs
        )
        report(
            f"fabric -o prom, data counters on vs off: CPU (4096 ports; {load()})",
            cpu,
            None,
            None,
            "CPU s",
        )
        report(
            f"fabric -o prom, data counters on vs off: wall (4096 ports; {load()})",
            wall,
            None,
            None,
            "s",
        )
        if args.against:
            wall, cpu = both(
                ibdiag(REPO, "-o", "json"), ibdiag(args.against, "-o", "json"), args.pairs
            )
            report(
                f"fabric -o json CPU, this tree vs {args.against} (4096 ports; {load()})",
                cpu,
                None,
                None,
                "CPU s",
            )
            report(
                f"fabric -o json wall, this tree vs {args.against} (4096 ports; {load()})",
                wall,
                None,
                None,
                "s",
            )
    return 0


if __name__ == "__main__":
    os.chdir(Path(__file__).resolve().parent)
    raise SystemExit(main())

#!/usr/bin/env python3
"""``ibdiag fabric`` live in ibsim at the sizes ibsim runs here, beside the tools by hand.

    python benchmarks/fabric_sim_sizes.py [--pods 1,2,4,8] [--pairs 2]

The fabrics are tests/support/fabric_topology.py's ``rail_three_tier`` at HDR (ibsim's fastest):
pods of 8 scalable units of 32 hosts x 8 rails on 64-port switches; ``pods=8`` is 16,384 GPU
adapters, 1,280 switches, 98,304 ports. ibsim's own limits (``-N`` nodes, ``-S`` switches, ``-P``
ports; defaults 2048 / 256 / 13312) are raised to each fabric's size (tests/support/ibsim.py
``sizes``), opensm brings it up (the time to "SUBNET UP" is printed), then for ``--pairs`` interleaved
pairs: ``ibdiag fabric -o json`` as a whole process against ``ibnetdiscover`` + ``ibqueryerrors
--data --details`` run by hand -- wall and CPU (user + system, the tools ibdiag runs included) of each,
the machine's load beside. A size ibsim or opensm cannot bring up within ``--timeout`` is said so.
"""

from __future__ import annotations

import argparse
import compileall
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from fabric_scale import both, timed
from ratios import append_summary

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.support.fabric_topology import rail_three_tier  # noqa: E402
from tests.support.ibsim import SimFabric  # noqa: E402


def load() -> str:
    return "load {:.1f} {:.1f} {:.1f}".format(*os.getloadavg())


def one(pods: int, pairs: int, timeout_s: float) -> str:
    t = rail_three_tier(pods=pods, speed="HDR")
    nodes, switches = len(t.switches) + len(t.cas), len(t.switches)
    # ibsim counts a switch's port 0 and keeps some room: the limits given, and what they hold
    sizes = (nodes + 64, switches + 16, t.port_count + 2 * switches + 1024)
    what = f"{len(t.cas)} adapters, {switches} switches, {t.port_count} ports (ibsim -N {sizes[0]} -S {sizes[1]} -P {sizes[2]})"
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        try:
            sim = SimFabric(t.text(), Path(tmp) / "sim", timeout_s=timeout_s, sizes=sizes)
        except RuntimeError as e:
            return f"{what}: not brought up in {time.perf_counter() - start:.0f} s ({e})"
        with sim:
            up = time.perf_counter() - start
            env = sim.env()
            work = Path(tmp)

            def ibdiag() -> tuple[float, float]:
                argv = [sys.executable, "-m", "ibdiag", "fabric", "-o", "json", "--timeout", "600"]
                return timed(argv, {**env, "PYTHONPATH": str(REPO)}, REPO)

            def tools() -> tuple[float, float]:
                a = timed(["ibnetdiscover"], env, work)
                b = timed(["ibqueryerrors", "--data", "--details"], env, work)
                return a[0] + b[0], a[1] + b[1]

            wall, cpu = both(ibdiag, tools, pairs)
    med = statistics.median
    return (
        f"{what}: SUBNET UP in {up:.1f} s; ibdiag fabric -o json wall {med(wall.mine):.2f} s, CPU "
        f"{med(cpu.mine):.2f} s; ibnetdiscover + ibqueryerrors wall {med(wall.theirs):.2f} s, CPU "
        f"{med(cpu.theirs):.2f} s; ratios wall {wall.median_ratio:.2f}, CPU {cpu.median_ratio:.2f} "
        f"(n={len(wall.ratios)}; {load()})"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pods", default="1,2,4,8", help="the sizes (pods of 256 hosts x 8 rails)")
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for SUBNET UP")
    args = ap.parse_args()
    compileall.compile_dir(str(REPO / "ibdiag"), quiet=1)
    for pods in (int(p) for p in args.pods.split(",") if p):
        line = f"live in ibsim, {pods} pod(s): " + one(pods, args.pairs, args.timeout)
        print(line, flush=True)
        append_summary(line)
    return 0


if __name__ == "__main__":
    os.chdir(Path(__file__).resolve().parent)
    raise SystemExit(main())

#!/usr/bin/env python3
"""``ibdiag fabric --from DUMP -o json`` on the rail-optimised fabrics being built: time and memory.

    python benchmarks/fabric_large.py [--runs 3] [--sizes 1,2,4,8,16,22] [--planes 48] [--against DIR]

The fabrics are tests/support/fabric_topology.py's ``rail_three_tier`` (NDR, 64-port switches, 1:1,
pods of 8 scalable units of 32 hosts x 8 rails): ``pods=8`` is 16,384 GPUs -- 2,048 hosts, 1,280
switches, 49,152 links, 98,304 ports -- target (issue 39): < 5 s wall and < 1 GB peak RSS. Then the
series (``--sizes``, pods) to show the cost is linear in the ports: each size's CPU and peak RSS per
port. One subnet holds at most 49,151 unicast LIDs (0x0001-0xBFFF: every adapter port and every
switch takes one), so 22 pods (45,056 GPUs and 3,520 switches) is about the largest single subnet;
a 100k-GPU cluster is several subnets. ``--planes N``: such a cluster built as 8 rail planes, each its
own subnet of N pods' rail (``rails=1``; 48 pods: 12,288 GPU adapters a plane, 98,304 GPUs), each
judged as its own dump: the sum of the 8 runs' times, the largest RSS.

Each run is a whole process (start-up to the JSON, written to /dev/null), user + system CPU, wall
and peak RSS of the child (its own ``VmHWM``: fabric_selene.py's ``measured``); the machine's load is printed. ``--against DIR`` adds
another checkout's run of the 16k-GPU fabric (before/after). Both checkouts are compiled first.
"""

from __future__ import annotations

import argparse
import compileall
import os
import statistics
import sys
import tempfile
from pathlib import Path

from fabric_selene import measured
from ratios import report_value

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.support.fabric_topology import rail_three_tier  # noqa: E402


def load() -> str:
    return "load {:.1f} {:.1f} {:.1f}".format(*os.getloadavg())


def write(tmp: Path, name: str, **kw: int) -> tuple[Path, int, int]:
    topo = rail_three_tier(**kw)
    path = tmp / f"{name}.net"
    path.write_text(topo.text())
    return path, topo.port_count, len(topo.cas)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="runs of the 16k-GPU fabric")
    ap.add_argument("--sizes", default="1,2,4,8,16,22", help="pods of each single-subnet size")
    ap.add_argument(
        "--planes",
        type=int,
        default=48,
        help="pods of each rail plane of the 100k-GPU cluster (0: none)",
    )
    ap.add_argument("--against", type=Path)
    args = ap.parse_args()
    for tree in [REPO, *([args.against] if args.against else [])]:
        compileall.compile_dir(str(tree / "ibdiag"), quiet=1)
    with tempfile.TemporaryDirectory() as tmp:
        big, ports, gpus = write(Path(tmp), "gpu16k", pods=8)
        runs = [measured(REPO, big) for _ in range(args.runs)]
        cpu, wall, rss = ([r[i] for r in runs] for i in range(3))
        print(
            f"16k GPUs ({gpus} adapters, {ports} ports): wall s median {statistics.median(wall):.2f} "
            f"(min {min(wall):.2f}, max {max(wall):.2f}), CPU s median {statistics.median(cpu):.2f}, "
            f"peak RSS {max(rss):.0f} MiB ({load()})"
        )
        report_value(
            f"fabric --from 16k-GPU -o json wall, median of {len(wall)} ({load()})",
            statistics.median(wall),
            "<",
            5.0,
            "s",
        )
        report_value(
            f"fabric --from 16k-GPU -o json peak RSS ({load()})", max(rss), "<", 1024, "MiB"
        )
        if args.against:
            theirs = [measured(args.against, big) for _ in range(args.runs)]
            print(
                f"  {args.against}: wall s median {statistics.median(t[1] for t in theirs):.2f}, "
                f"CPU s median {statistics.median(t[0] for t in theirs):.2f}, peak RSS {max(t[2] for t in theirs):.0f} MiB"
            )
        print("size series (one subnet each):")
        for pods in (int(p) for p in args.sizes.split(",") if p):
            path, ports, gpus = write(Path(tmp), f"pods{pods}", pods=pods)
            c, w, r = measured(REPO, path)
            print(
                f"  {pods:3d} pods: {gpus:6d} GPUs {ports:7d} ports: wall {w:6.2f} s, CPU {c:6.2f} s "
                f"({c / ports * 1e6:5.1f} us/port), peak RSS {r:6.0f} MiB ({r * 1024 / ports:5.2f} KiB/port)  {load()}",
                flush=True,
            )
            path.unlink()
        if args.planes:
            plane, ports, gpus = write(Path(tmp), "plane", pods=args.planes, rails=1)
            c, w, r = measured(
                REPO, plane
            )  # the 8 planes are alike: one measured, and all 8 run below
            total = [measured(REPO, plane) for _ in range(7)]
            cs = c + sum(t[0] for t in total)
            ws = w + sum(t[1] for t in total)
            print(
                f"{8 * gpus} GPUs as 8 rail planes of {gpus} adapters ({ports} ports each, {8 * ports} in all): "
                f"8 runs wall {ws:.2f} s, CPU {cs:.2f} s ({cs / (8 * ports) * 1e6:.1f} us/port), "
                f"largest peak RSS {max([r, *(t[2] for t in total)]):.0f} MiB ({load()})"
            )
    return 0


if __name__ == "__main__":
    os.chdir(Path(__file__).resolve().parent)
    raise SystemExit(main())

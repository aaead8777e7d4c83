#!/usr/bin/env python3
"""Start-up of every command's ``--help`` and of three short runs, CPU time, this checkout beside another.

    python benchmarks/command_startup.py --against DIR [--runs 7]

Each command line runs as a fresh process from both checkouts, interleaved (A B A B ...); the CPU time
(user + system of the child) of each is less sensitive to other work on a shared machine than the wall
clock. Printed per line: both medians, the median of the pairs' ratios and the spread of the ratios
(2nd-lowest to 2nd-highest), and the machine's load. ``--help`` of one command loads that command's
module, which imports its package's entry point and views at module level (issue 34); ``ibdiag --help``
loads none of them.
"""

from __future__ import annotations

import argparse
import compileall
import os
import resource
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LINES = [
    ["--help"],
    ["topo", "--help"],
    ["counters", "--help"],
    ["fabric", "--help"],
    ["report", "--help"],
    ["bench", "p2p", "--help"],
    ["topo", "--root", "fixtures/sysfs/dgx-h100", "-o", "json"],
    ["counters", "--root", "fixtures/sysfs/dgx-h100", "-o", "json"],
    ["fabric", "--from", "fixtures/fabric/two-to-one.net", "-o", "json"],
]


def cpu_s(checkout: Path, argv: list[str]) -> float:
    code = f"import sys; sys.path.insert(0, {str(checkout)!r}); sys.argv[0] = 'ibdiag'; from ibdiag.cli.main import run; run()"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(
        [sys.executable, "-c", code, *argv],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", type=Path, required=True, help="another checkout (a git worktree)")
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()
    for checkout in (REPO, args.against):
        compileall.compile_dir(str(checkout / "ibdiag"), quiet=1)
    print(f"load {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; {args.runs} interleaved pairs")
    for argv in LINES:
        mine, theirs = [], []
        for _ in range(args.runs):
            mine.append(cpu_s(REPO, argv))
            theirs.append(cpu_s(args.against, argv))
        ratios = sorted(a / b for a, b in zip(mine, theirs, strict=True))
        low, high = (ratios[1], ratios[-2]) if len(ratios) >= 4 else (ratios[0], ratios[-1])
        print(
            f"{' '.join(argv)[:48]:50s} this {statistics.median(mine) * 1e3:5.0f} ms  "
            f"{args.against.name} {statistics.median(theirs) * 1e3:5.0f} ms  "
            f"ratio {statistics.median(ratios):.2f} [{low:.2f}-{high:.2f}]"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

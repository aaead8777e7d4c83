#!/usr/bin/env python3
"""Whole-process time of `ibdiag topo -o json` on the largest bundled fixture, beside `lstopo --of xml`.

    python benchmarks/topo_startup.py [--runs 15]

Both run as fresh processes, alternately, in the same run of this script; we report min and median
wall time. Target (issue 2): ibdiag under 0.5 s. lstopo maps this machine's real topology (hwloc), so
the comparison is of two whole tools a user would run, not of identical work.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def largest_fixture() -> Path:
    roots = [p for p in (REPO / "fixtures" / "sysfs").iterdir() if (p / "sys").is_dir()]
    return max(roots, key=lambda p: sum(len(files) for _, _, files in os.walk(p / "sys")))


def time_cmd(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15)
    args = ap.parse_args()
    exe = shutil.which("ibdiag", path=str(Path(sys.executable).parent)) or shutil.which("ibdiag")
    if not exe:
        print("ibdiag is not installed (make venv)", file=sys.stderr)
        return 2
    root = largest_fixture()
    files = sum(len(f) for _, _, f in os.walk(root / "sys"))
    ibdiag_cmd = [exe, "topo", "-o", "json", "--root", str(root)]
    lstopo = shutil.which("lstopo") or shutil.which("lstopo-no-graphics")
    lstopo_cmd = [lstopo, "--of", "xml", "-"] if lstopo else None
    time_cmd(ibdiag_cmd)  # warm the page cache
    if lstopo_cmd:
        time_cmd(lstopo_cmd)
    ib, ls = [], []
    for _ in range(args.runs):
        ib.append(time_cmd(ibdiag_cmd))
        if lstopo_cmd:
            ls.append(time_cmd(lstopo_cmd))
    print(f"fixture: {root.relative_to(REPO)} ({files} files)   runs: {args.runs}")
    print(f"ibdiag topo -o json --root <fixture>: min {min(ib) * 1e3:6.1f} ms  median {statistics.median(ib) * 1e3:6.1f} ms  (target < 500 ms: {'OK' if statistics.median(ib) < 0.5 else 'MISSED'})")
    if ls:
        print(f"lstopo --of xml (this machine):       min {min(ls) * 1e3:6.1f} ms  median {statistics.median(ls) * 1e3:6.1f} ms")
        print(f"ratio ibdiag / lstopo (median): {statistics.median(ib) / statistics.median(ls):.2f}")
    else:
        print("lstopo not installed (apt-get install hwloc): no comparison")
    return 0


if __name__ == "__main__":
    sys.exit(main())

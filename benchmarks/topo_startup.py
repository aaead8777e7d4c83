#!/usr/bin/env python3
"""Start-up: whole-process time of `ibdiag topo -o json` on the largest bundled fixture and of
`ibdiag --help`, beside the bare interpreter (`python -c pass`) and `lstopo --of xml`.

    python benchmarks/topo_startup.py [--runs 15]

All commands run as fresh processes, interleaved (A B C D A B C D ...), in the same run of this
script; we report min, median and the spread (p90 - p10) of the wall time, each median against its
target (issue 15: topo -o json <= 0.15 s, --help <= 0.1 s), and where the time goes: the import
cost (python -X importtime) of the largest top-level modules of one `topo -o json` run.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TARGETS = {"ibdiag topo -o json": 0.15, "ibdiag --help": 0.10}


def largest_fixture() -> Path:
    roots = [p for p in (REPO / "fixtures" / "sysfs").iterdir() if (p / "sys").is_dir()]
    return max(roots, key=lambda p: sum(len(files) for _, _, files in os.walk(p / "sys")))


def time_cmd(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - t0


def spread(xs: list[float]) -> float:
    if len(xs) < 3:
        return 0.0
    q = statistics.quantiles(xs, n=10)
    return q[-1] - q[0]


def import_breakdown(cmd: list[str], top: int = 12) -> list[tuple[int, int, str]]:
    """(self µs, cumulative µs, module) of the `top` costliest imports nested at most 2 deep."""
    res = subprocess.run([sys.executable, "-X", "importtime", *cmd], capture_output=True, text=True, check=False)
    rows = []
    for line in res.stderr.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)", line)
        if m and len(m.group(3)) // 2 <= 2:
            rows.append((int(m.group(1)), int(m.group(2)), "  " * (len(m.group(3)) // 2) + m.group(4)))
    return sorted(rows, key=lambda r: -r[1])[:top]


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
    cmds = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "ibdiag topo -o json": [exe, "topo", "-o", "json", "--root", str(root)],
        "ibdiag --help": [exe, "--help"],
    }
    lstopo = shutil.which("lstopo") or shutil.which("lstopo-no-graphics")
    if lstopo:
        cmds["lstopo --of xml"] = [lstopo, "--of", "xml", "-"]
    for cmd in cmds.values():
        time_cmd(cmd)  # warm the page cache
    times: dict[str, list[float]] = {name: [] for name in cmds}
    for _ in range(args.runs):
        for name, cmd in cmds.items():
            times[name].append(time_cmd(cmd))
    print(f"fixture: {root.relative_to(REPO)} ({files} files)   runs: {args.runs}, interleaved   load: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    floor = statistics.median(times["python -c pass"])
    for name, xs in times.items():
        med = statistics.median(xs)
        line = f"{name:22s} min {min(xs) * 1e3:7.1f} ms  median {med * 1e3:7.1f} ms  spread {spread(xs) * 1e3:6.1f} ms"
        if name in TARGETS:
            line += f"  (target <= {TARGETS[name] * 1e3:.0f} ms: {'OK' if med <= TARGETS[name] else 'MISSED'}; {med - floor:.3f} s above the bare interpreter)"
        print(line)
    print("\nwhere `ibdiag topo -o json` spends its imports (python -X importtime; self / cumulative):")
    for self_us, cum_us, name in import_breakdown(["-m", "ibdiag", "topo", "-o", "json", "--root", str(root)]):
        print(f"  {self_us / 1e3:7.1f} ms {cum_us / 1e3:7.1f} ms  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

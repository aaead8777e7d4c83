#!/usr/bin/env python3
"""Start-up: whole-process time of `ibdiag topo -o json` on the largest bundled fixture and of
`ibdiag --help`, beside the bare interpreter (`python -c pass`) and `lstopo --of xml`.

    python benchmarks/topo_startup.py [--runs 15]

All commands run as fresh processes, interleaved (A B C D A B C D ...), in the same run of this
script; we report min, median and the spread (p90 - p10) of the wall time and the median CPU time
(user + system of the child: less sensitive to other work on a shared machine than the wall clock),
each median against its target (issue 15: topo -o json <= 0.15 s, --help <= 0.1 s), and where the
time goes: the import cost (python -X importtime) of the largest top-level modules of one run.

Bytecode first: a wheel install compiles every module at install time, but an editable checkout
under ``PYTHONDONTWRITEBYTECODE=1`` (set on the development VMs) never writes ``__pycache__``, and
every run then compiles ibdiag from source (about 60 ms more). The script compiles the package
(``compileall``, into the ignored ``__pycache__``) before it measures.

``--against DIR`` adds the same two ibdiag commands from another checkout (e.g. a ``git worktree``
of the previous commit), run the same way, and reports the A/B ratio of the medians.
"""

from __future__ import annotations

import argparse
import compileall
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from ratios import Paired, report, report_value

REPO = Path(__file__).resolve().parent.parent
TARGETS = {"ibdiag topo -o json": 0.15, "ibdiag --help": 0.10}


def largest_fixture() -> Path:
    roots = [p for p in (REPO / "fixtures" / "sysfs").iterdir() if (p / "sys").is_dir()]
    return max(roots, key=lambda p: sum(len(files) for _, _, files in os.walk(p / "sys")))


def time_cmd(cmd: list[str]) -> tuple[float, float]:
    """(wall s, CPU s) of one fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def from_checkout(checkout: Path, args: list[str]) -> list[str]:
    """``ibdiag ARGS`` with the package imported from ``checkout`` (both sides of an A/B run so)."""
    code = f"import sys; sys.path.insert(0, {str(checkout)!r}); sys.argv[0] = 'ibdiag'; from ibdiag.cli.main import run; run()"
    return [sys.executable, "-c", code, *args]


def spread(xs: list[float]) -> float:
    if len(xs) < 3:
        return 0.0
    q = statistics.quantiles(xs, n=10)
    return q[-1] - q[0]


def import_breakdown(cmd: list[str], top: int = 12) -> list[tuple[int, int, str]]:
    """(self µs, cumulative µs, module) of the `top` costliest imports nested at most 2 deep."""
    res = subprocess.run(
        [sys.executable, "-X", "importtime", *cmd], capture_output=True, text=True, check=False
    )
    rows = []
    for line in res.stderr.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)", line)
        if m and len(m.group(3)) // 2 <= 2:
            rows.append(
                (int(m.group(1)), int(m.group(2)), "  " * (len(m.group(3)) // 2) + m.group(4))
            )
    return sorted(rows, key=lambda r: -r[1])[:top]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--against", type=Path, help="another checkout to compare with (A/B)")
    args = ap.parse_args()
    for checkout in [REPO, *([args.against] if args.against else [])]:
        compileall.compile_dir(str(checkout / "ibdiag"), quiet=1)
    root = largest_fixture()
    files = sum(len(f) for _, _, f in os.walk(root / "sys"))
    topo_args = ["topo", "-o", "json", "--root", str(root)]
    cmds = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "ibdiag topo -o json": from_checkout(REPO, topo_args),
        "ibdiag --help": from_checkout(REPO, ["--help"]),
    }
    if args.against:
        cmds["previous topo -o json"] = from_checkout(args.against, topo_args)
        cmds["previous --help"] = from_checkout(args.against, ["--help"])
    lstopo = shutil.which("lstopo") or shutil.which("lstopo-no-graphics")
    if lstopo:
        cmds["lstopo --of xml"] = [lstopo, "--of", "xml", "-"]
    for cmd in cmds.values():
        time_cmd(cmd)  # warm the page cache
    walls: dict[str, list[float]] = {name: [] for name in cmds}
    cpus: dict[str, list[float]] = {name: [] for name in cmds}
    for _ in range(args.runs):
        for name, cmd in cmds.items():
            wall, cpu = time_cmd(cmd)
            walls[name].append(wall)
            cpus[name].append(cpu)
    print(
        f"fixture: {root.relative_to(REPO)} ({files} files)   runs: {args.runs}, interleaved   load: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    floor = statistics.median(walls["python -c pass"])
    for name, xs in walls.items():
        med = statistics.median(xs)
        line = f"{name:22s} min {min(xs) * 1e3:7.1f} ms  median {med * 1e3:7.1f} ms  spread {spread(xs) * 1e3:6.1f} ms  cpu {statistics.median(cpus[name]) * 1e3:7.1f} ms"
        if name in TARGETS:
            line += f"  (target <= {TARGETS[name] * 1e3:.0f} ms: {'OK' if med <= TARGETS[name] else 'MISSED'}; {med - floor:.3f} s above the bare interpreter)"
        print(line)
    for name, target in TARGETS.items():
        report_value(
            f"start-up {name.removeprefix('ibdiag ')} (wall median, s)",
            statistics.median(walls[name]),
            "<=",
            target,
        )
    if args.against:
        for mine, prev in (
            ("ibdiag topo -o json", "previous topo -o json"),
            ("ibdiag --help", "previous --help"),
        ):
            result = Paired(tuple(walls[mine]), tuple(walls[prev]))
            report(
                f"start-up {mine.removeprefix('ibdiag ')} vs {args.against.name} (wall)",
                result,
                None,
                None,
                "s",
            )
    print(
        "\nwhere `ibdiag topo -o json` spends its imports (python -X importtime; self / cumulative):"
    )
    for self_us, cum_us, name in import_breakdown(["-m", "ibdiag", *topo_args]):
        print(f"  {self_us / 1e3:7.1f} ms {cum_us / 1e3:7.1f} ms  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

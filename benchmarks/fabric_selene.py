#!/usr/bin/env python3
"""CPU seconds of ``ibdiag fabric --from DUMP -o json`` on a Selene-size dump (target <= 0.6 s).

    python benchmarks/fabric_selene.py [--runs 10] [--against /path/to/other/checkout] [--callgrind]

The dump: tests/support/fabric_shapes.py ``selene_size()`` -- 5,007 nodes and 12,852 links, the size
of a real 560-node DGX A100 machine's rail-optimised three-tier HDR fabric (issue 35 timed that dump
at 1.5 s of CPU; issue 39's target is 0.6 s). Each run is a whole process (start-up, parsing,
judgement, JSON to /dev/null) with the same interpreter; user + system CPU (``os.wait4``) and the
child's own peak RSS (``VmHWM``), the median and the spread over ``--runs``. CPU, not wall time: the
machine is shared (the load is printed). ``--against DIR``: the same from another checkout, interleaved A B,
B A ..., and the median of the pairwise ratios (this tree / the other). Both checkouts are compiled
first (``compileall``), as an installed wheel is. ``--callgrind``: also each tree's instruction count
under valgrind (one run each, the hash seed fixed; valgrind must be installed), a figure the
machine's load does not move.
"""

from __future__ import annotations

import argparse
import compileall
import os
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

from tests.support.fabric_shapes import selene_size  # noqa: E402
from tests.support.peak import PEAK_FILE_ENV, REPORTER  # noqa: E402


def measured(tree: Path, dump: Path, fmt: str = "json") -> tuple[float, float, float]:
    """CPU seconds (user + system), wall seconds and peak RSS (MiB, the child's own ``VmHWM``:
    ``wait4``'s ``ru_maxrss`` survives ``execve`` and would count this benchmark's generated fabric)."""
    with tempfile.NamedTemporaryFile("r", suffix=".peak") as peak:
        start = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-c", REPORTER, "fabric", "--from", str(dump), "-o", fmt],
            env={**os.environ, "PYTHONPATH": str(tree), PEAK_FILE_ENV: peak.name},
            cwd=tree,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        _pid, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        if os.waitstatus_to_exitcode(status) not in (0, 1):
            raise SystemExit(f"ibdiag fabric --from {dump} failed ({status}) in {tree}")
        peak_kib = int(peak.read())
    return usage.ru_utime + usage.ru_stime, wall, peak_kib / 1024


def instructions(tree: Path, dump: Path) -> int:
    """The instructions one run executes, counted by valgrind's callgrind (``--callgrind``): the
    figure a shared machine's load does not move (the hash seed fixed: dicts and sets alike run to
    run). About 30 s a run under valgrind."""
    with tempfile.TemporaryDirectory() as tmp:
        res = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={tmp}/out",
                sys.executable,
                "-m",
                "ibdiag",
                "fabric",
                "--from",
                str(dump),
                "-o",
                "json",
            ],
            env={**os.environ, "PYTHONPATH": str(tree), "PYTHONHASHSEED": "0"},
            cwd=tree,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            check=False,
        )
    for line in res.stderr.splitlines():
        if "Collected :" in line:
            return int(line.rsplit(":", 1)[1].strip().replace(",", ""))
    raise SystemExit(f"valgrind gave no count for {tree}: {res.stderr[-400:]}")


def spread(values: list[float]) -> str:
    return f"median {statistics.median(values):.3f}, min {min(values):.3f}, max {max(values):.3f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", type=Path, help="another checkout (e.g. main before issue 39)")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument(
        "--callgrind",
        action="store_true",
        help="also count each tree's instructions once under valgrind (the load-proof figure)",
    )
    args = ap.parse_args()
    for tree in [REPO, *([args.against] if args.against else [])]:
        compileall.compile_dir(str(tree / "ibdiag"), quiet=1)
    with tempfile.TemporaryDirectory() as tmp:
        dump = Path(tmp) / "selene.net"
        dump.write_text(selene_size().text())
        measured(REPO, dump)  # the page cache
        mine: list[tuple[float, float, float]] = []
        other: list[tuple[float, float, float]] = []

        def side(tree: Path, out: list[tuple[float, float, float]]) -> Callable[[], float]:
            def go() -> float:
                out.append(measured(tree, dump))
                return out[-1][0]

            return go

        if args.against:
            run_pairs(side(REPO, mine), side(args.against, other), args.runs)
        else:
            mine = [measured(REPO, dump) for _ in range(args.runs)]
    load = "load {:.1f} {:.1f} {:.1f}".format(*os.getloadavg())
    cpu = [m[0] for m in mine]
    print(
        f"this tree: CPU s {spread(cpu)}; wall s {spread([m[1] for m in mine])}; peak RSS {max(m[2] for m in mine):.0f} MiB ({load})"
    )
    if other:
        print(
            f"{args.against}: CPU s {spread([o[0] for o in other])}; wall s {spread([o[1] for o in other])}; peak RSS {max(o[2] for o in other):.0f} MiB"
        )
        report(
            f"fabric --from Selene-size -o json CPU, this tree vs {args.against.name} ({load})",
            Paired(tuple(cpu), tuple(o[0] for o in other)),
            None,
            None,
            "CPU s",
        )
    if args.callgrind:
        with tempfile.TemporaryDirectory() as tmp:
            dump = Path(tmp) / "selene.net"
            dump.write_text(selene_size().text())
            counts = [
                instructions(t, dump) for t in [REPO, *([args.against] if args.against else [])]
            ]
        print(
            f"instructions (callgrind, PYTHONHASHSEED=0): this tree {counts[0] / 1e9:.3f} G", end=""
        )
        if len(counts) > 1:
            print(
                f"; {args.against}: {counts[1] / 1e9:.3f} G; ratio {counts[0] / counts[1]:.3f}",
                end="",
            )
        print()
    report_value(
        f"fabric --from Selene-size -o json CPU, median of {len(cpu)} ({load})",
        statistics.median(cpu),
        "<=",
        0.6,
        "s",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

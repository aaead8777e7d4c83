#!/usr/bin/env python3
"""CPU seconds of ``ibdiag fabric --from DUMP -o json`` on a Selene-size dump, this tree against another.

    python benchmarks/fabric_selene.py --against /path/to/other/checkout [--pairs 10]

The dump: tests/support/fabric_shapes.py ``selene_size()`` -- 5,007 nodes and 12,852 links, the size
of a real 560-node DGX A100 machine's rail-optimised three-tier HDR fabric (issue 35 timed that dump
at 1.5 s of CPU). Each side runs as a whole process (start-up, parsing, judgement, JSON) from its own
checkout with the same interpreter; user + system CPU of the child, interleaved A B, B A ... for
``--pairs`` pairs. CPU time, not wall time: the machine is shared. Prints each side's minimum and
median and the median of the pairwise ratios (this tree / the other).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.support.fabric_shapes import selene_size  # noqa: E402


def cpu(tree: Path, dump: Path) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(
        [sys.executable, "-m", "ibdiag", "fabric", "--from", str(dump), "-o", "json"],
        env={**os.environ, "PYTHONPATH": str(tree)},
        stdout=subprocess.DEVNULL,
        check=False,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", type=Path, required=True, help="another checkout (e.g. main)")
    ap.add_argument("--pairs", type=int, default=10)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        dump = Path(tmp) / "selene.net"
        dump.write_text(selene_size().text())
        mine: list[float] = []
        other: list[float] = []
        for i in range(args.pairs):
            order = [(REPO, mine), (args.against, other)]
            for tree, out in order if i % 2 == 0 else reversed(order):
                out.append(cpu(tree, dump))
    ratio = statistics.median(a / b for a, b in zip(mine, other, strict=True))
    print(f"this tree: min {min(mine):.2f} s, median {statistics.median(mine):.2f} s CPU")
    print(f"{args.against}: min {min(other):.2f} s, median {statistics.median(other):.2f} s CPU")
    print(f"median ratio (this / other): {ratio:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

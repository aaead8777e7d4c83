"""``ibdiag bench import`` on a 1 GB nccl-tests log with 10^6 rows: peak memory and time (issue 16).

Writes the log (``tests/support/biglog.py``: one run printed in 100,000 cycles of 10 sizes, each row followed by
a padded NCCL INFO line) to a temporary directory, then imports it through the real CLI in a fresh
process and reports that process's peak RSS (``getrusage`` of the child) and wall time. The claim it
checks: memory is bounded by the rows kept (one cycle), not by the file. Run:
``python benchmarks/import_streaming.py [ROWS] [PAD]``.
"""

from __future__ import annotations

import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.biglog import write


def main(argv: list[str]) -> int:
    rows = int(argv[1]) if len(argv) > 1 else 1_000_000
    pad = int(argv[2]) if len(argv) > 2 else 960
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big_all_reduce_perf.log"
        t = time.perf_counter()
        size = write(path, rows=rows, pad=pad)
        print(f"wrote {size / 1e9:.2f} GB, {rows} rows in {time.perf_counter() - t:.1f} s")
        t = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "ibdiag", "bench", "import", str(path), "-o", "json"],
            capture_output=True,
            text=True,
        )
        wall = time.perf_counter() - t
        peak_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        print(
            f"import: exit {proc.returncode}, {wall:.1f} s ({rows / wall:,.0f} rows/s, {size / wall / 1e6:.0f} MB/s), peak RSS {peak_mib:.0f} MiB"
        )
        if proc.returncode not in (0, 1):
            print(proc.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

"""A large nccl-tests log written line by line (never held whole): for the streaming test and benchmark.

The log is one 8-rank all_reduce run of 10 sizes printed ``cycles`` times (``-N``), every row followed
by NCCL INFO lines padded to ``pad`` bytes: the shape of a long ``NCCL_DEBUG=INFO`` job log.
"""

from __future__ import annotations

from pathlib import Path

HEADER = [
    "root@node01:~# mpirun -np 8 ./build/all_reduce_perf -b 1M -e 512M -f 2 -g 1 -N 0",
    "# nThread 1 nGpus 1 minBytes 1048576 maxBytes 536870912 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0",
    "#",
    "# Using devices",
    *[
        f"#  Rank {r:2d} Group  0 Pid {4000 + r:6d} on     node01 device {r:2d} [0x{0x18 + r:02x}] NVIDIA H100 80GB HBM3"
        for r in range(8)
    ],
    "#",
    "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong",
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)",
]
SIZES = [2**20 * 2**k for k in range(10)]


def row(size: int, cycle: int) -> str:
    t = 20.0 + size / 150e3 * (1 + (cycle % 7) / 100)
    algbw = size / t / 1e3
    busbw = algbw * 2 * 7 / 8
    half = f"  {t:7.2f}  {algbw:6.2f}  {busbw:6.2f}       0"
    return f"{size:12d}  {size // 4:12d}     float     sum      -1{half}{half}"


def write(path: Path, *, rows: int, pad: int) -> int:
    """Write the log; returns its size in bytes."""
    info = "node01:4000:4020 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read "
    noise = (info + "x" * max(0, pad - len(info))) + "\n"
    n = 0
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("\n".join(HEADER) + "\n")
        for i in range(rows):
            fh.write(row(SIZES[i % len(SIZES)], i // len(SIZES)) + "\n")
            if pad:
                fh.write(noise)
            n += 1
        fh.write("# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 1 \n#\n")
    return path.stat().st_size

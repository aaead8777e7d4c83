"""ibdiag bench collective vs a bare torch.distributed loop: 2-rank gloo all_reduce busbw at 64 MiB.

Both sides run in the same invocation, round by round (which goes first alternates), so drift on the
machine hits both:

* ibdiag: ``ibdiag bench collective --nproc 2 --backend gloo --sizes 64M --iters N --warmup W -o json``
  (two real rank processes it starts itself; the row's busbw);
* bare: two processes of this script, each ``init_process_group("gloo")``, W warm-up calls, a barrier,
  then N ``dist.all_reduce`` calls timed with ``time.perf_counter``; time per call averaged over the two
  ranks, busbw = 2(n-1)/n x bytes / time, as nccl-tests computes it.

Prints the median and the best busbw of each over the rounds, and the median of the per-round ratios
with their spread against the target (issue 15: ibdiag >= 0.97 x the bare loop). The best is the
round least disturbed by other work on the machine; on a busy machine it is the steadier comparison.

    .venv/bin/python benchmarks/collective_vs_torch.py [--size 64M] [--iters 50] [--warmup 5] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
IBDIAG = [sys.executable, "-m", "ibdiag"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(rank: int, world: int, port: int, nbytes: int, iters: int, warmup: int) -> None:
    """One rank of the bare loop; rank 0 prints the mean time per call over ranks (µs) as JSON."""
    import datetime

    import torch
    import torch.distributed as dist

    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=120),
    )
    t = torch.ones(nbytes // 4, dtype=torch.float32)
    for _ in range(warmup):
        dist.all_reduce(t)
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(t)
    per_call = torch.tensor([(time.perf_counter() - t0) / iters], dtype=torch.float64)
    dist.all_reduce(per_call)  # mean over ranks, like nccl-tests' default (-a 1)
    if rank == 0:
        print(json.dumps({"time_us": per_call.item() / world * 1e6}), flush=True)
    dist.destroy_process_group()


def bare(nbytes: int, iters: int, warmup: int) -> float:
    """busbw (GB/s) of the bare loop with 2 ranks."""
    port = _free_port()
    env = {**os.environ, "OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // 2))}
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--worker",
                str(r),
                "--port",
                str(port),
                "--bytes",
                str(nbytes),
                "--iters",
                str(iters),
                "--warmup",
                str(warmup),
            ],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for r in range(2)
    ]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    if any(p.returncode for p in procs):
        raise SystemExit(f"bare torch loop failed: {[p.returncode for p in procs]}")
    time_us = json.loads(outs[0].strip().splitlines()[-1])["time_us"]
    return nbytes / (time_us * 1e-6) / 1e9 * 2 * (2 - 1) / 2


def ibdiag(nbytes: int, iters: int, warmup: int) -> float:
    """busbw (GB/s) that ibdiag reports for the same all_reduce."""
    cmd = [
        *IBDIAG,
        "bench",
        "collective",
        "--nproc",
        "2",
        "--backend",
        "gloo",
        "--op",
        "all_reduce",
        "--sizes",
        str(nbytes),
        "--iters",
        str(iters),
        "--warmup",
        str(warmup),
        "-o",
        "json",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=HERE.parent)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"ibdiag failed ({proc.returncode}): {proc.stderr}")
    rows = json.loads(proc.stdout)["results"]
    return rows[0]["busbw_gbs"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="64M", help="message size (binary suffixes), default 64M")
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=5, help="A/B pairs (>= 5 for the README)")
    ap.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--bytes", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker is not None:
        worker(args.worker, 2, args.port, args.bytes, args.iters, args.warmup)
        return 0
    sys.path.insert(0, str(HERE.parent))
    sys.path.insert(0, str(HERE))
    from ratios import report, run_pairs

    from ibdiag.units import parse_size

    nbytes = parse_size(args.size)
    # alternate which goes first, so a disturbance that follows one side's runs does not bias it
    res = run_pairs(
        lambda: ibdiag(nbytes, args.iters, args.warmup),
        lambda: bare(nbytes, args.iters, args.warmup),
        args.rounds,
        on_pair=lambda r, a, b: print(
            f"round {r + 1}: ibdiag {a:.3f} GB/s, bare torch.distributed {b:.3f} GB/s", flush=True
        ),
    )
    mine, theirs = list(res.mine), list(res.theirs)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"\n2-rank gloo all_reduce, {args.size} ({nbytes} B), {args.iters} iters, {args.warmup} warm-up, {args.rounds} rounds; {os.cpu_count()} CPUs, load {load:.2f}"
    )
    print(f"{'':32} {'median':>10} {'best':>10}")
    print(
        f"  {'ibdiag bench collective busbw':30} {statistics.median(mine):10.3f} {max(mine):10.3f}  GB/s"
    )
    print(
        f"  {'bare torch.distributed busbw':30} {statistics.median(theirs):10.3f} {max(theirs):10.3f}  GB/s"
    )
    rm, rb = statistics.median(mine) / statistics.median(theirs), max(mine) / max(theirs)
    print(f"  {'ratio ibdiag / bare':30} {rm:10.3f} {rb:10.3f}")
    report("collective all_reduce busbw vs bare torch.distributed", res, ">=", 0.97, "GB/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

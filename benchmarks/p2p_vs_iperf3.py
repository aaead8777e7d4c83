#!/usr/bin/env python3
"""ibdiag bench p2p (TCP) side by side with iperf3 (bandwidth) and qperf tcp_lat (latency) on loopback.

    python benchmarks/p2p_vs_iperf3.py [--runs 5] [--duration 3] [--sizes 1M,4M,16M] [--pin none|same|split]

The script starts its own servers on free loopback ports (ibdiag bench serve, iperf3 -s, qperf) and
runs the clients alternately, ``--runs`` times each, so both tools see the same machine state. It
prints each tool's median and the ratio ibdiag / reference. Targets (issue 4):

* bandwidth >= 0.9 x iperf3 at messages >= 1 MiB. iperf3's block length (-l) is at most 1 MiB, so
  larger ibdiag sizes are compared with iperf3 -l 1M, its best.
* 8-byte one-way latency p50 <= 1.2 x ``qperf tcp_lat`` (qperf prints one mean; ibdiag's mean is
  shown too).

On loopback both tools measure the host (memory copies, scheduling), not a wire: the ratio is
what this benchmark is about. Ping-pong latency on a small VM is bimodal — about 7 µs when both ends
share a CPU (direct wake-up), 20-40 µs when they sit on different CPUs (a cross-CPU wake-up of an
idle vCPU) — and the scheduler picks differently from run to run. ``--pin same`` puts every server
and client on one CPU, ``--pin split`` servers on one CPU and clients on another (``taskset``), so
both tools are compared under the same placement.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

IPERF3_MAX_BLOCK = 2**20


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_port(port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"nothing listens on 127.0.0.1:{port} after {timeout} s")


def parse_size(text: str) -> int:
    m = re.fullmatch(r"(\d+)([KMG]?)", text.strip().upper())
    if not m:
        raise SystemExit(f"cannot read size {text!r}")
    return int(m.group(1)) * {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}[m.group(2)]


PIN: dict[str, list[str]] = {"server": [], "client": []}


def pinned(role: str, cmd: list[str]) -> list[str]:
    return [*PIN[role], *cmd]


def ibdiag_bw(exe: str, port: int, size: int, duration: float) -> float:
    r = subprocess.run(
        pinned("client", [exe, "bench", "p2p", "127.0.0.1", "--port", str(port), "--sizes", str(size), "--duration", str(duration), "-o", "json"]),
        capture_output=True, text=True, check=True,
    )
    return json.loads(r.stdout)["results"][0]["bw_gbps"]


def iperf3_bw(port: int, size: int, duration: float) -> float:
    block = min(size, IPERF3_MAX_BLOCK)
    r = subprocess.run(
        pinned("client", ["iperf3", "-c", "127.0.0.1", "-p", str(port), "-t", str(duration), "-l", str(block), "-J"]),
        capture_output=True, text=True, check=True,
    )
    return json.loads(r.stdout)["end"]["sum_received"]["bits_per_second"] / 1e9


def ibdiag_lat(exe: str, port: int, duration: float) -> tuple[float, float]:
    r = subprocess.run(
        pinned("client", [exe, "bench", "p2p", "127.0.0.1", "--port", str(port), "--sizes", "8", "--mode", "lat", "--duration", str(duration), "-o", "json"]),
        capture_output=True, text=True, check=True,
    )
    lat = json.loads(r.stdout)["results"][0]["lat_us"]
    return lat["p50"], lat["avg"]


_QPERF_UNITS = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "sec": 1e6}


def qperf_lat(port: int, duration: float) -> float:
    r = subprocess.run(
        pinned("client", ["qperf", "127.0.0.1", "-lp", str(port), "-m", "8", "-t", str(int(max(1, duration))), "tcp_lat"]),
        capture_output=True, text=True, check=True,
    )
    m = re.search(r"latency\s*=\s*([\d.]+)\s*(ns|us|ms|sec)", r.stdout)
    if not m:
        raise SystemExit(f"cannot read qperf output: {r.stdout!r}")
    return float(m.group(1)) * _QPERF_UNITS[m.group(2)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--duration", type=float, default=3.0, help="seconds per measurement")
    ap.add_argument("--sizes", default="1M,4M,16M", help="bandwidth message sizes (>= 1M for the target)")
    ap.add_argument("--pin", choices=("none", "same", "split"), default="none", help="CPU placement of servers and clients (taskset)")
    args = ap.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    if args.pin != "none":
        if not shutil.which("taskset") or (args.pin == "split" and len(cpus) < 2):
            print("--pin needs taskset (and two CPUs for split)", file=sys.stderr)
            return 2
        server_cpu = cpus[-1]
        client_cpu = cpus[-1] if args.pin == "same" else cpus[0]
        PIN["server"] = ["taskset", "-c", str(server_cpu)]
        PIN["client"] = ["taskset", "-c", str(client_cpu)]
    exe = shutil.which("ibdiag", path=str(Path(sys.executable).parent)) or shutil.which("ibdiag")
    missing = [name for name, path in (("ibdiag", exe), ("iperf3", shutil.which("iperf3")), ("qperf", shutil.which("qperf"))) if not path]
    if missing:
        print(f"missing: {', '.join(missing)} (make venv; make system-deps)", file=sys.stderr)
        return 2
    assert exe is not None
    sizes = [parse_size(s) for s in args.sizes.split(",")]

    ib_port, ip_port, qp_port = free_port(), free_port(), free_port()
    servers = [
        subprocess.Popen(pinned("server", [exe, "bench", "serve", "--bind", "127.0.0.1", "--port", str(ib_port)]), stderr=subprocess.DEVNULL),
        subprocess.Popen(pinned("server", ["iperf3", "-s", "-B", "127.0.0.1", "-p", str(ip_port)]), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
        subprocess.Popen(pinned("server", ["qperf", "-lp", str(qp_port)]), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
    ]
    try:
        for port in (ib_port, ip_port, qp_port):
            wait_port(port)
        place = {"none": "no CPU pinning", "same": f"servers and clients on CPU {PIN['client'][-1] if PIN['client'] else '-'}", "split": f"servers on CPU {PIN['server'][-1] if PIN['server'] else '-'}, clients on CPU {PIN['client'][-1] if PIN['client'] else '-'}"}[args.pin]
        print(f"loopback, {args.runs} alternating runs of {args.duration:g} s each, {place}; medians")
        print(f"{'size':>8} {'ibdiag Gb/s':>12} {'iperf3 Gb/s':>12} {'iperf3 -l':>10} {'ratio':>7}  target >= 0.90")
        for size in sizes:
            ib, ref = [], []
            for _ in range(args.runs):
                ib.append(ibdiag_bw(exe, ib_port, size, args.duration))
                ref.append(iperf3_bw(ip_port, size, args.duration))
            ratio = statistics.median(ib) / statistics.median(ref)
            block = min(size, IPERF3_MAX_BLOCK)
            print(f"{size // 2**20:>6}Mi {statistics.median(ib):>12.2f} {statistics.median(ref):>12.2f} {block // 2**20:>8}Mi {ratio:>7.2f}  {'OK' if ratio >= 0.9 else 'MISSED'}")
        p50s, avgs, qp = [], [], []
        for _ in range(args.runs):
            p50, avg = ibdiag_lat(exe, ib_port, args.duration)
            p50s.append(p50)
            avgs.append(avg)
            qp.append(qperf_lat(qp_port, args.duration))
        q = statistics.median(qp)
        ratio = statistics.median(p50s) / q
        print(f"8-byte one-way latency: ibdiag p50 {statistics.median(p50s):.1f} us (mean {statistics.median(avgs):.1f} us), qperf tcp_lat {q:.1f} us")
        print(f"latency ratio ibdiag p50 / qperf: {ratio:.2f}  target <= 1.20: {'OK' if ratio <= 1.2 else 'MISSED'}; mean / qperf: {statistics.median(avgs) / q:.2f}")
    finally:
        for p in servers:
            p.terminate()
        for p in servers:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

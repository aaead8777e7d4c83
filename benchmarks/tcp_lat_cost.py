#!/usr/bin/env python3
"""Where ibdiag's TCP ping-pong time goes beyond the C tools': the interpreter's cost per round trip.

    python benchmarks/tcp_lat_cost.py [--iters 200000] [--repeats 5]

One process, one loopback TCP connection (TCP_NODELAY), no waiting: each round trip is the four
calls ``tcp.ping`` and ``tcp.pong`` make between them (client send, server recv_into, server send,
client recv_into) and the client's clock reads; on loopback a send delivers before it returns, so
no call ever sleeps and no scheduler wake-up is in the figure. The same loop in C (compiled here
with ``cc`` when there is one) is the floor of those four system calls; the difference is what
Python adds per round trip, half of it per one-way latency. Run ``p2p_vs_iperf3.py --only
lat-sockperf`` beside it to compare with the measured gap to ``sockperf ping-pong``.
"""

from __future__ import annotations

import argparse
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

C_LOOP = r"""
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
static int cmp(const void *x, const void *y) { long long a = *(const long long *)x, b = *(const long long *)y; return (a > b) - (a < b); }
static long long now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1000000000LL + t.tv_nsec; }
int main(int argc, char **argv) {
    long n = atol(argv[1]); int one = 1; char a[8] = {0}, b[8];
    int l = socket(AF_INET, SOCK_STREAM, 0); struct sockaddr_in sa = {0}; socklen_t len = sizeof sa;
    sa.sin_family = AF_INET; sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(l, (void *)&sa, sizeof sa) || listen(l, 1) || getsockname(l, (void *)&sa, &len)) return 1;
    int c = socket(AF_INET, SOCK_STREAM, 0); if (connect(c, (void *)&sa, sizeof sa)) return 1;
    int s = accept(l, 0, 0);
    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one); setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    long long *dt = malloc(n * sizeof *dt), t;
    for (long i = 0; i < n; i++) {
        t = now();
        if (send(c, a, 8, 0) != 8 || recv(s, b, 8, 0) != 8 || send(s, b, 8, 0) != 8 || recv(c, a, 8, 0) != 8) return 2;
        dt[i] = now() - t;
    }
    qsort(dt, n, sizeof *dt, cmp);
    printf("%lld\n", dt[n / 2]);
    return 0;
}
"""


def python_loop(n: int) -> float:
    """Median ns per round trip of the calls tcp.ping/tcp.pong make, in one process (the median
    leaves out the round trips another process preempted)."""
    with socket.socket() as lst:
        lst.bind(("127.0.0.1", 0))
        lst.listen(1)
        c = socket.create_connection(lst.getsockname())
        s, _ = lst.accept()
    with c, s:
        for sock in (c, s):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sv, rv, pv = memoryview(bytearray(8)), memoryview(bytearray(8)), memoryview(bytearray(8))
        csend, crecv, ssend, srecv = c.send, c.recv_into, s.send, s.recv_into
        clock = time.perf_counter_ns
        samples = [0] * n
        for i in range(n):
            t0 = clock()
            k = csend(sv)
            if k != 8:
                raise SystemExit("short send")
            srecv(pv, 8)
            ssend(pv)
            got = crecv(rv, 8)
            if got != 8:
                raise SystemExit("short receive")
            samples[i] = clock() - t0
        return float(statistics.median(samples))


def c_loop(n: int) -> float | None:
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        return None
    with tempfile.TemporaryDirectory() as d:
        src, exe = Path(d) / "loop.c", Path(d) / "loop"
        src.write_text(C_LOOP)
        subprocess.run([cc, "-O2", "-o", str(exe), str(src)], check=True, capture_output=True)
        return float(subprocess.run([str(exe), str(n)], check=True, capture_output=True, text=True).stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=200_000)
    ap.add_argument("--repeats", type=int, default=5, help="A/B pairs")
    args = ap.parse_args()
    from ratios import report, run_pairs

    res = run_pairs(lambda: python_loop(args.iters), lambda: c_loop(args.iters) or float("nan"), args.repeats)
    py, c = statistics.median(res.mine), statistics.median(res.theirs)
    print(f"one process, 4 socket calls per round trip, median of {args.iters} round trips, {args.repeats} pairs; Python {sys.version.split()[0]}")
    print(f"  Python loop (tcp.ping + tcp.pong calls): {py:7.0f} ns per round trip")
    if c == c:
        print(f"  C loop (the system calls alone):         {c:7.0f} ns per round trip")
        print(f"  Python adds {py - c:.0f} ns per round trip = {(py - c) / 2000:.2f} us per one-way latency")
        report("tcp round trip, Python calls vs C calls (in-process)", res, None, None, "ns")
    else:
        print("  no C compiler: the floor is not measured")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

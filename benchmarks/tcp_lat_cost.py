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

``--two-process`` then measures the part that appears only between two processes (each blocking
``recv`` sleeps and is woken): a pinger and a ponger process on one loopback connection, each either
ibdiag's own loop (``tcp.ping`` / ``tcp.pong``, sockets set up by ``sockio`` as ``bench p2p`` does)
or the same loop in C; the four combinations run in turn, rotated from round to round, and the
medians attribute the gap to each side: (Python pinger + C ponger) - (C + C) is the pinger's share.
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


C_PINGPONG = r"""
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
static int cmp(const void *x, const void *y) { long long a = *(const long long *)x, b = *(const long long *)y; return (a > b) - (a < b); }
static long long now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1000000000LL + t.tv_nsec; }
static int full(int fd, char *p, int size) { int got = 0; while (got < size) { int k = recv(fd, p + got, size - got, 0); if (k <= 0) return -1; got += k; } return 0; }
/* pp ping|pong PORT N SIZE: the ponger listens on 127.0.0.1:PORT and answers N messages; the pinger
   connects, sends N messages one at a time and prints the median round trip in ns. */
int main(int argc, char **argv) {
    int pong = strcmp(argv[1], "pong") == 0, port = atoi(argv[2]), size = atoi(argv[4]), one = 1, fd;
    long n = atol(argv[3]); char buf[65536] = {0};
    struct sockaddr_in sa = {0}; sa.sin_family = AF_INET; sa.sin_port = htons(port); sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (pong) {
        int l = socket(AF_INET, SOCK_STREAM, 0); setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(l, (void *)&sa, sizeof sa) || listen(l, 1)) return 1;
        printf("ready\n"); fflush(stdout);
        fd = accept(l, 0, 0);
    } else {
        fd = socket(AF_INET, SOCK_STREAM, 0); if (connect(fd, (void *)&sa, sizeof sa)) return 1;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    long long *dt = pong ? 0 : malloc(n * sizeof *dt), t;
    for (long i = 0; i < n; i++) {
        if (pong) { if (full(fd, buf, size) || send(fd, buf, size, 0) != size) return 2; continue; }
        t = now();
        if (send(fd, buf, size, 0) != size || full(fd, buf, size)) return 2;
        dt[i] = now() - t;
    }
    if (!pong) { qsort(dt, n, sizeof *dt, cmp); printf("%lld\n", dt[n / 2]); }
    return 0;
}
"""

#: The same two roles with ibdiag's own loops and socket set-up (what `bench p2p` runs per side).
PY_PINGPONG = r"""
import socket, statistics, sys
from ibdiag.bench.p2p.control import sockio
from ibdiag.bench.p2p.tcp import latency as tcp
role, port, n, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
if role == "pong":
    lst = socket.socket(); lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); lst.bind(("127.0.0.1", port)); lst.listen(1)
    print("ready", flush=True)
    sock, _ = lst.accept()
else:
    sock = socket.create_connection(("127.0.0.1", port))
sockio.set_kernel_timeouts(sock, 10.0)
sockio.set_nodelay(sock, True)
if role == "pong":
    tcp.pong(sock, memoryview(bytearray(size)), n, peer="pinger", what="a ping", timeout_s=10.0)
else:
    samples = tcp.ping(sock, memoryview(bytearray(size)), memoryview(bytearray(size)), n, peer="ponger", what="a pong", timeout_s=10.0)
    print(statistics.median(samples))
"""


def two_process(pinger: str, ponger: str, n: int, size: int, exe: Path | None) -> float:
    """Median round trip (ns) of ``pinger`` against ``ponger`` ('py' or 'c'), two processes."""
    import os

    repo = str(Path(__file__).resolve().parent.parent)

    def cmd(kind: str, role: str, port: int) -> list[str]:
        args = [role, str(port), str(n), str(size)]
        return [str(exe), *args] if kind == "c" else [sys.executable, "-c", PY_PINGPONG, *args]

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": repo}
    server = subprocess.Popen(cmd(ponger, "pong", port), stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        r = subprocess.run(
            cmd(pinger, "ping", port), capture_output=True, text=True, env=env, timeout=600
        )
        if r.returncode != 0:  # the ponger would wait for pings that never come
            server.kill()
            raise SystemExit(f"the {pinger} pinger failed: {r.stderr.strip()[-400:]}")
        out = r.stdout
    finally:
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    return float(out.strip().splitlines()[-1])


def compile_c(src_text: str, d: str) -> Path | None:
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        return None
    src, exe = Path(d) / "pp.c", Path(d) / "pp"
    src.write_text(src_text)
    subprocess.run([cc, "-O2", "-o", str(exe), str(src)], check=True, capture_output=True)
    return exe


def two_process_report(n: int, size: int, rounds: int) -> None:
    combos = [("c", "c"), ("py", "c"), ("c", "py"), ("py", "py")]
    with tempfile.TemporaryDirectory() as d:
        exe = compile_c(C_PINGPONG, d)
        if exe is None:
            print("two processes: no C compiler, not measured")
            return
        runs: dict[tuple[str, str], list[float]] = {c: [] for c in combos}
        for r in range(rounds):
            for pinger, ponger in combos[r % 4 :] + combos[: r % 4]:  # rotate the order each round
                runs[(pinger, ponger)].append(two_process(pinger, ponger, n, size, exe))
    med = {c: statistics.median(v) for c, v in runs.items()}
    print(
        f"two processes, {size} B messages, median of {n} round trips per run, {rounds} rounds (order rotated); ns per round trip:"
    )
    for (pinger, ponger), v in runs.items():
        print(
            f"  pinger {pinger:2s} ponger {ponger:2s}: median {med[(pinger, ponger)]:7.0f}  (runs {min(v):.0f}-{max(v):.0f})"
        )
    base = med[("c", "c")]
    print(
        f"  Python pinger adds {med[('py', 'c')] - base:.0f} ns, Python ponger adds {med[('c', 'py')] - base:.0f} ns, both {med[('py', 'py')] - base:.0f} ns"
    )
    print(
        f"  = {(med[('py', 'py')] - base) / 2000:.2f} us per one-way latency between two processes"
    )
    from ratios import Paired, report

    report(
        "tcp round trip between two processes, ibdiag loops vs C loops",
        Paired(tuple(runs[("py", "py")]), tuple(runs[("c", "c")])),
        None,
        None,
        "ns",
    )


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
        return float(
            subprocess.run([str(exe), str(n)], check=True, capture_output=True, text=True).stdout
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=200_000)
    ap.add_argument("--repeats", type=int, default=5, help="A/B pairs")
    ap.add_argument(
        "--two-process",
        action="store_true",
        help="also attribute the gap between two processes (see the docstring)",
    )
    ap.add_argument("--two-process-iters", type=int, default=50_000)
    args = ap.parse_args()
    from ratios import report, run_pairs

    res = run_pairs(
        lambda: python_loop(args.iters), lambda: c_loop(args.iters) or float("nan"), args.repeats
    )
    py, c = statistics.median(res.mine), statistics.median(res.theirs)
    print(
        f"one process, 4 socket calls per round trip, median of {args.iters} round trips, {args.repeats} pairs; Python {sys.version.split()[0]}"
    )
    print(f"  Python loop (tcp.ping + tcp.pong calls): {py:7.0f} ns per round trip")
    if c == c:
        print(f"  C loop (the system calls alone):         {c:7.0f} ns per round trip")
        print(
            f"  Python adds {py - c:.0f} ns per round trip = {(py - c) / 2000:.2f} us per one-way latency"
        )
        report("tcp round trip, Python calls vs C calls (in-process)", res, None, None, "ns")
    else:
        print("  no C compiler: the floor is not measured")
    if args.two_process:
        two_process_report(args.two_process_iters, 14, args.repeats)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

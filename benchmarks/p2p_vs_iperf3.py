#!/usr/bin/env python3
"""ibdiag bench p2p (TCP) beside iperf3 (bandwidth), qperf tcp_lat and sockperf ping-pong (latency).

    python benchmarks/p2p_vs_iperf3.py [--pairs 5] [--duration 3] [--pin none|same|split] [--only CASE,...]

Cases (issue 41 targets; ratio = ibdiag / reference, median over the pairs). ``bench p2p`` runs with its
default engine (``--engine auto``: over TCP ibdiag's own loops, latency busy-polling) unless the case
names another:

* ``bw-lo``      1 MiB messages on loopback vs ``iperf3 -l 1M``                 target >= 1.00
* ``bw-lo-iperf3`` the same with ``--engine iperf3`` (iperf3 under ibdiag's control channel): what
  driving the C tool costs                                                       target >= 0.95
* ``bw-lo-p4``   ``--streams 4`` vs ``iperf3 -P 4 -l 1M`` on loopback          target >= 1.00
* ``bw-veth``    1 MiB over a veth pair between two network namespaces (root)   target >= 1.00
* ``bw-veth-p4`` the same with 4 streams vs ``iperf3 -P 4``                    target >= 1.00
* ``lat-qperf``  8-byte one-way latency p50 vs ``qperf tcp_lat`` (qperf prints one mean)  target <= 1.10
* ``lat-qperf-block`` the same with ``--busy-poll 0`` (both sides block in recv, as qperf does):
  the like-for-like loop                                                         target <= 1.10
* ``lat-sockperf`` 14-byte one-way latency p50 vs ``sockperf ping-pong`` p50 (14 B is sockperf's
  smallest message: its header)                                                 target <= 1.10
* ``lat-sockperf-engine`` the same with ``--engine sockperf``                   target <= 1.05

Bandwidth cases also print CPU seconds per GB of each side against iperf3's own report (CPU per
byte does not depend on how much of the CPUs other work leaves to a run); every case prints the
machine's load average before and after it (``os.getloadavg``), and the summary carries them.

Each pair runs the two clients back to back against servers started once, the order alternating
(A B, B A, ...), so both see the same machine state (``ratios.py``). Bandwidth is the receiver's
figure on both sides (iperf3's ``sum_received``). On loopback and veth both tools measure the host
(memory copies, scheduling), not a wire: the ratio is what this benchmark is about. ``--pin same``
puts servers and clients on one CPU, ``--pin split`` servers on one CPU and clients on another
(``taskset``): placement moves both tools by a factor of two on a 2-CPU VM.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ratios import Paired, alternate, append_summary, report, run_pairs

MIB = 2**20
PIN: dict[str, list[str]] = {"server": [], "client": []}
TOKEN = "ibdiag-bench-" + os.urandom(8).hex()
CASES = (
    "bw-lo",
    "bw-lo-iperf3",
    "bw-lo-p4",
    "bw-veth",
    "bw-veth-p4",
    "lat-qperf",
    "lat-qperf-block",
    "lat-sockperf",
    "lat-sockperf-engine",
)
#: Extra ``bench p2p`` options per case (the default engine otherwise).
CASE_ARGS: dict[str, list[str]] = {
    "bw-lo-iperf3": ["--engine", "iperf3"],
    "lat-qperf-block": ["--busy-poll", "0"],
    "lat-sockperf-engine": ["--engine", "sockperf"],
}
#: Per ibdiag latency run: did both sides busy-poll through the measured round trips (the row's
#: ``lat_busy_poll``)? On a host whose CPUs are taken they give it up and block.
SPUN: list[bool] = []
#: Targets: (op, ratio).
TARGETS: dict[str, tuple[str, float]] = {
    "bw-lo-iperf3": (">=", 0.95),
    "lat-sockperf-engine": ("<=", 1.05),
}


def load_text() -> str:
    """The machine's load average now (1, 5, 15 minutes) and its CPU count."""
    one, five, fifteen = os.getloadavg()
    return f"load {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} CPUs"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Place:
    """Where the servers listen and how a command runs on the server or client side."""

    def __init__(self, host: str, server_prefix: list[str], client_prefix: list[str]) -> None:
        self.host = host
        self.server_prefix = server_prefix
        self.client_prefix = client_prefix

    def server(self, cmd: list[str]) -> list[str]:
        return [*self.server_prefix, *PIN["server"], *cmd]

    def client(self, cmd: list[str]) -> list[str]:
        return [*self.client_prefix, *PIN["client"], *cmd]

    def wait_port(self, port: int, timeout: float = 10.0) -> None:
        probe = self.client(
            [
                sys.executable,
                "-c",
                f"import socket; socket.create_connection(({self.host!r}, {port}), timeout=1).close()",
            ]
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if subprocess.run(probe, capture_output=True).returncode == 0:
                return
            time.sleep(0.1)
        raise SystemExit(f"nothing listens on {self.host}:{port} after {timeout} s")


def run_json(cmd: list[str]) -> dict:
    r = subprocess.run(
        cmd, capture_output=True, text=True, env={**os.environ, "IBDIAG_TOKEN": TOKEN}
    )
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()[-400:]}")
    return json.loads(r.stdout)


def ibdiag_bw(
    exe: str, place: Place, port: int, streams: int, duration: float, extra: list[str]
) -> tuple[float, float, float]:
    """(Gb/s, sender CPU s/GB, receiver CPU s/GB) of one run."""
    cmd = [
        exe,
        "bench",
        "p2p",
        place.host,
        "--port",
        str(port),
        "--sizes",
        "1M",
        "--streams",
        str(streams),
        "--duration",
        str(duration),
        "-o",
        "json",
        *extra,
    ]
    row = run_json(place.client(cmd))["results"][0]
    cpu = row["cpu_s_per_gb"]
    return row["bw_gbps"], cpu["client"], cpu["server"]


def iperf3_bw(place: Place, port: int, streams: int, duration: float) -> tuple[float, float, float]:
    """The same from iperf3 -J: its CPU utilisation (-V's report) over the test, per GB received."""
    cmd = [
        "iperf3",
        "-c",
        place.host,
        "-p",
        str(port),
        "-t",
        str(duration),
        "-l",
        "1M",
        "-P",
        str(streams),
        "-J",
    ]
    end = run_json(place.client(cmd))["end"]
    rx = end["sum_received"]
    gb = rx["bytes"] / 1e9
    cpu = end["cpu_utilization_percent"]
    per_gb = rx["seconds"] / 100 / gb if gb else float("nan")
    return rx["bits_per_second"] / 1e9, cpu["host_total"] * per_gb, cpu["remote_total"] * per_gb


def ibdiag_lat(
    exe: str, place: Place, port: int, size: int, duration: float, extra: list[str]
) -> float:
    cmd = [
        exe,
        "bench",
        "p2p",
        place.host,
        "--port",
        str(port),
        "--sizes",
        str(size),
        "--mode",
        "lat",
        "--duration",
        str(int(max(1, duration))),
        "-o",
        "json",
        *extra,
    ]
    row = run_json(place.client(cmd))["results"][0]
    if "lat_busy_poll" in row:  # ibdiag's own loops measured it (not --engine sockperf)
        SPUN.append(all(row["lat_busy_poll"].values()))
    return row["lat_us"]["p50"]


_QPERF_UNITS = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "sec": 1e6}


def qperf_lat(place: Place, port: int, duration: float) -> float:
    cmd = [
        "qperf",
        place.host,
        "-lp",
        str(port),
        "-m",
        "8",
        "-t",
        str(int(max(1, duration))),
        "tcp_lat",
    ]
    out = subprocess.run(place.client(cmd), capture_output=True, text=True, check=True).stdout
    m = re.search(r"latency\s*=\s*([\d.]+)\s*(ns|us|ms|sec)", out)
    if not m:
        raise SystemExit(f"cannot read qperf output: {out!r}")
    return float(m.group(1)) * _QPERF_UNITS[m.group(2)]


def sockperf_lat(place: Place, port: int, duration: float) -> float:
    cmd = [
        "sockperf",
        "ping-pong",
        "--tcp",
        "-i",
        place.host,
        "-p",
        str(port),
        "-m",
        "14",
        "-t",
        str(int(max(1, duration))),
    ]
    out = subprocess.run(place.client(cmd), capture_output=True, text=True, check=True).stdout
    m = re.search(r"percentile 50\.000 =\s*([\d.]+)", out)
    if not m:
        raise SystemExit(f"cannot read sockperf output: {out[-400:]!r}")
    return float(m.group(1))


@contextmanager
def servers(exe: str, place: Place, which: set[str]) -> Iterator[dict[str, int]]:
    """Start the servers ``which`` needs (ibdiag, iperf3, qperf, sockperf); their ports."""
    ports = {name: free_port() for name in ("ibdiag", "iperf3", "qperf", "sockperf")}
    cmds = {
        "ibdiag": [exe, "bench", "serve", "--bind", place.host, "--port", str(ports["ibdiag"])],
        "iperf3": ["iperf3", "-s", "-B", place.host, "-p", str(ports["iperf3"])],
        "qperf": ["qperf", "-lp", str(ports["qperf"])],
        "sockperf": ["sockperf", "server", "--tcp", "-i", place.host, "-p", str(ports["sockperf"])],
    }
    procs = []
    try:
        for name in sorted(which):
            procs.append(
                subprocess.Popen(
                    place.server(cmds[name]),
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    env={**os.environ, "IBDIAG_TOKEN": TOKEN},
                )
            )
        for name in which:
            place.wait_port(ports[name])
        yield ports
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()


@contextmanager
def veth_pair() -> Iterator[Place]:
    """Two network namespaces joined by a veth pair (unshaped), removed afterwards."""
    pid = os.getpid()
    srv, cli = f"ibdiag-bsrv-{pid}", f"ibdiag-bcli-{pid}"
    a, b = f"ibbva{pid}"[:15], f"ibbvb{pid}"[:15]

    def ip(*args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)

    made: list[str] = []
    try:
        for ns in (srv, cli):
            ip("netns", "add", ns)
            made.append(ns)
        ip("link", "add", a, "type", "veth", "peer", "name", b)
        ip("link", "set", a, "netns", srv)
        ip("link", "set", b, "netns", cli)
        for ns, ifname, addr in ((srv, a, "10.212.0.1"), (cli, b, "10.212.0.2")):
            ip("-n", ns, "addr", "add", f"{addr}/24", "dev", ifname)
            ip("-n", ns, "link", "set", ifname, "up")
            ip("-n", ns, "link", "set", "lo", "up")
        yield Place("10.212.0.1", ["ip", "netns", "exec", srv], ["ip", "netns", "exec", cli])
    finally:
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)


def show_pair(name: str, unit: str) -> Callable[[int, float, float], None]:
    def show(i: int, mine: float, theirs: float) -> None:
        print(
            f"  {name} pair {i + 1}: ibdiag {mine:.3g} {unit}, reference {theirs:.3g} {unit}, ratio {mine / theirs:.2f}",
            flush=True,
        )

    return show


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--pairs",
        "--runs",
        type=int,
        default=5,
        help="A/B pairs per comparison (>= 5 for the README)",
    )
    ap.add_argument("--duration", type=float, default=3.0, help="seconds per measurement")
    ap.add_argument(
        "--pin",
        choices=("none", "same", "split"),
        default="none",
        help="CPU placement of servers and clients (taskset)",
    )
    ap.add_argument(
        "--only", default=",".join(CASES), help=f"comma-separated cases: {', '.join(CASES)}"
    )
    ap.add_argument("-v", "--verbose", action="store_true", help="print every pair")
    args = ap.parse_args()
    cases = [c.strip() for c in args.only.split(",") if c.strip()]
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        print(f"unknown case(s): {', '.join(unknown)}; known: {', '.join(CASES)}", file=sys.stderr)
        return 2
    cpus = sorted(os.sched_getaffinity(0))
    if args.pin != "none":
        if not shutil.which("taskset") or (args.pin == "split" and len(cpus) < 2):
            print("--pin needs taskset (and two CPUs for split)", file=sys.stderr)
            return 2
        PIN["server"] = ["taskset", "-c", str(cpus[-1])]
        PIN["client"] = ["taskset", "-c", str(cpus[-1] if args.pin == "same" else cpus[0])]
    exe = shutil.which("ibdiag", path=str(Path(sys.executable).parent)) or shutil.which("ibdiag")
    tools = {"ibdiag": exe, **{t: shutil.which(t) for t in ("iperf3", "qperf", "sockperf")}}
    missing = [name for name, path in tools.items() if not path]
    if "ibdiag" in missing or "iperf3" in missing:
        print(f"missing: {', '.join(missing)} (make venv; make system-deps)", file=sys.stderr)
        return 2
    assert exe is not None
    print(
        f"{args.pairs} pairs of {args.duration:g} s per comparison, pin {args.pin}, {len(cpus)} CPUs, {load_text()}",
        flush=True,
    )
    d, n = args.duration, args.pairs

    def bw_cases(place: Place, tag: str) -> None:
        wanted = [c for c in (f"bw-{tag}", f"bw-{tag}-iperf3", f"bw-{tag}-p4") if c in cases]
        if not wanted:
            return
        with servers(exe, place, {"ibdiag", "iperf3"}) as ports:
            for case in wanted:
                streams = 4 if case.endswith("-p4") else 1
                extra = CASE_ARGS.get(case, [])
                before = load_text()
                mine, theirs = alternate(
                    lambda s=streams, x=extra: ibdiag_bw(exe, place, ports["ibdiag"], s, d, x),
                    lambda s=streams: iperf3_bw(place, ports["iperf3"], s, d),
                    n,
                    on_pair=(lambda i, a, b, c=case: show_pair(c, "Gb/s")(i, a[0], b[0]))
                    if args.verbose
                    else None,
                )
                op, target = TARGETS.get(case, (">=", 1.0))
                report(case, Paired.of(mine, theirs, 0), op, target, "Gb/s")
                # CPU per byte does not depend on how much of the CPUs other work left to the run
                report(f"{case} sender CPU s/GB", Paired.of(mine, theirs, 1), None, None, "s/GB")
                report(f"{case} receiver CPU s/GB", Paired.of(mine, theirs, 2), None, None, "s/GB")
                append_summary(f"{case}: {before} before, {load_text()} after")

    loop = Place("127.0.0.1", [], [])
    bw_cases(loop, "lo")
    if any(c.startswith("bw-veth") for c in cases):
        if os.geteuid() != 0 or not shutil.which("ip"):
            print("bw-veth: skipped (needs root and iproute2 for network namespaces)")
        else:
            with veth_pair() as place:
                bw_cases(place, "veth")
    lat_refs = [
        (c, "qperf" if c.startswith("lat-qperf") else "sockperf")
        for c in cases
        if c.startswith("lat-")
    ]
    for case, ref in lat_refs:
        if ref in missing:
            print(f"{case}: skipped ({ref} is not installed; make system-deps)")
            continue
        extra = CASE_ARGS.get(case, [])
        before = load_text()
        with servers(exe, loop, {"ibdiag", ref}) as ports:
            if ref == "qperf":
                res = run_pairs(
                    lambda x=extra: ibdiag_lat(exe, loop, ports["ibdiag"], 8, d, x),
                    lambda: qperf_lat(loop, ports["qperf"], d),
                    n,
                    on_pair=show_pair(case, "us") if args.verbose else None,
                )
            else:
                res = run_pairs(
                    lambda x=extra: ibdiag_lat(exe, loop, ports["ibdiag"], 14, d, x),
                    lambda: sockperf_lat(loop, ports["sockperf"], d),
                    n,
                    on_pair=show_pair(case, "us") if args.verbose else None,
                )
            op, target = TARGETS.get(case, ("<=", 1.1))
            report(case, res, op, target, "us")
        spun = (
            f"; ibdiag busy-polled at both ends in {sum(SPUN)} of {len(SPUN)} runs" if SPUN else ""
        )
        SPUN.clear()
        append_summary(f"{case}: {before} before, {load_text()} after{spun}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

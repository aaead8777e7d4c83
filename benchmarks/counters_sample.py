#!/usr/bin/env python3
"""Cost of one ``ibdiag counters`` sample of a 10-adapter node, in-process, beside the raw file reads.

    python benchmarks/counters_sample.py [--runs 200] [--adapters 10]

Builds a sysfs tree with the project's fixture builder (10 ConnectX-7-like adapters, one port each,
21 IB counters + 28 mlx5 hw_counters + lifespan per port), then times, in the same run:

* raw:     open()+read() of exactly the files one sample reads (the floor: syscalls only);
* read:    ``read_sample`` with the layout discovered once (what every --watch/--interval tick does);
* cold:    ``discover_layout`` + ``read_sample`` (a one-shot ``ibdiag counters``);
* judge:   deltas + ``check_span`` for one interval;
* render:  the --watch table rendered to a string by rich;
* tick:    read + judge + render: one --watch refresh.

Target (issue 3): one full sample under 50 ms, so a 1 s --watch costs the node under 5 % of a core.
On a live node each counters/ read is a MAD to the adapter's firmware (kernel get_perf_mad), which
this fixture-based run does not measure.
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.sysfsgen.builder import Tree, ib_gid, zero_counters, zero_hw_counters  # noqa: E402


def build(root: Path, adapters: int) -> None:
    t = Tree(root)
    t.numa(0, "0-63")
    hb = t.host_bridge("0000:10")
    hb.numa, hb.cpulist = 0, "0-63"
    for i in range(adapters):
        rp = hb.bridge(f"0000:10:{i + 1:02x}.0")
        dev = rp.add(f"0000:{0x11 + i:02x}:00.0", vendor=0x15B3, device=0x1021, cls=0x020700)
        guid = f"b83f:d203:00a1:{i:04x}"
        ib = dev.rdma(
            f"mlx5_{i}",
            fw_ver="28.39.1002",
            board_id="MT_0000000838",
            hca_type="MT4129",
            node_guid=guid,
        )
        dev.netdev(f"ibp{0x11 + i}s0")
        ib.port(
            1,
            lid=f"0x{0x10 + i:x}",
            gids=[(ib_gid(guid), "IB/RoCE v1", None)],
            counters=zero_counters(
                port_xmit_data=81234567890 + i,
                port_rcv_data=80987654321 + i,
                port_xmit_wait=1234 + i,
                symbol_error=i,
            ),
            hw_counters=zero_hw_counters(out_of_sequence=i),
        )
    t.manifest("bench-node", "benchmark tree")


def timed(fn, runs: int) -> list[float]:
    fn()  # warm caches and imports
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--adapters", type=int, default=10)
    args = ap.parse_args()

    from rich.console import Console

    from ibdiag.counters.checks import check_span
    from ibdiag.counters.config import CountersConfig
    from ibdiag.counters.delta import build_span
    from ibdiag.counters.read import discover_layout, read_sample
    from ibdiag.counters.views.table import interval_table
    from ibdiag.node.sysfs import SysfsRoot
    from ibdiag.ports.config import PortsConfig

    cfg = CountersConfig()
    ports = PortsConfig()
    with tempfile.TemporaryDirectory(prefix="ibdiag-bench-") as tmp:
        root = Path(tmp)
        build(root, args.adapters)
        sysfs = SysfsRoot(root)
        layout = discover_layout(sysfs)
        files = []
        for item in layout:
            for sub, names in (("counters", item.counters), ("hw_counters", item.hw_counters)):
                files += [sysfs.path(f"{item.base}/{sub}/{n}") for n in names or ()]
            files += [
                sysfs.path(f"{item.base}/{a}")
                for a in ("state", "phys_state", "rate", "link_layer", "lid", "sm_lid")
            ]

        def raw() -> None:
            for f in files:
                with open(f, "rb") as fh:
                    fh.read()

        def read() -> None:
            read_sample(sysfs, layout)

        def cold() -> None:
            s = SysfsRoot(root)
            read_sample(s, discover_layout(s))

        a = read_sample(sysfs, layout)
        b = read_sample(sysfs, layout)

        def judge() -> None:
            check_span(build_span([a, b], mode="interval", keep_steps=False), cfg)

        span = build_span([a, b], mode="interval", keep_steps=False)
        findings = check_span(span, cfg)

        def render() -> None:
            con = Console(file=io.StringIO(), width=160, force_terminal=True)
            con.print(
                interval_table(b, span.totals, span.totals, findings, cfg, ports, title="bench")
            )

        def tick() -> None:
            s = read_sample(sysfs, layout)
            sp = build_span([a, s], mode="interval", keep_steps=False)
            fs = check_span(sp, cfg)
            con = Console(file=io.StringIO(), width=160, force_terminal=True)
            con.print(interval_table(s, sp.totals, sp.totals, fs, cfg, ports, title="bench"))

        results = {
            name: timed(fn, args.runs)
            for name, fn in (
                ("raw", raw),
                ("read", read),
                ("cold", cold),
                ("judge", judge),
                ("render", render),
                ("tick", tick),
            )
        }
        cpu0 = time.process_time()
        for _ in range(args.runs):
            tick()
        cpu_tick = (
            time.process_time() - cpu0
        ) / args.runs  # CPU time, what a 1 s --watch costs the node

    ports = sum(1 for item in layout if item.port is not None)
    print(
        f"tree: {args.adapters} adapters, {ports} ports, {len(files)} files per sample; runs: {args.runs}; Python {sys.version.split()[0]}"
    )
    for name, xs in results.items():
        print(
            f"  {name:<7} min {min(xs) * 1e3:7.2f} ms   median {statistics.median(xs) * 1e3:7.2f} ms"
        )
    read_med = statistics.median(results["read"])
    raw_med = statistics.median(results["raw"])
    tick_med = statistics.median(results["tick"])
    print(
        f"read / raw (median): {read_med / raw_med:.2f}x  (parsing, models and port state on top of the syscalls)"
    )
    print(
        f"one full sample (cold read + judge): {(statistics.median(results['cold']) + statistics.median(results['judge'])) * 1e3:.1f} ms "
        f"(target < 50 ms: {'OK' if statistics.median(results['cold']) + statistics.median(results['judge']) < 0.05 else 'MISSED'})"
    )
    print(
        f"--watch at 1 s: one refresh takes {tick_med * 1e3:.1f} ms wall, {cpu_tick * 1e3:.1f} ms CPU = {cpu_tick * 100:.1f}% of one core "
        f"(target < 5%: {'OK' if cpu_tick < 0.05 else 'MISSED'})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

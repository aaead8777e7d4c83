"""The ``ibdiag`` command line: the only package that prints or exits.

Importing this package registers every command on :data:`app`; each command module imports its
library lazily so that ``ibdiag --help`` and ``ibdiag topo`` stay fast.
"""

from ibdiag.cli.app import app, bench_app

# Command modules register themselves on `app` / `bench_app` when imported.
from ibdiag.cli import topo as _topo  # noqa: E402,F401
from ibdiag.cli import counters as _counters  # noqa: E402,F401
from ibdiag.cli import bench_p2p as _bench_p2p  # noqa: E402,F401
from ibdiag.cli import bench_collective as _bench_collective  # noqa: E402,F401
from ibdiag.cli import verdict as _verdict  # noqa: E402,F401
from ibdiag.cli import snapshot as _snapshot  # noqa: E402,F401
from ibdiag.cli import sweep as _sweep  # noqa: E402,F401
from ibdiag.cli import report as _report  # noqa: E402,F401

#: One-line summaries for `ibdiag --help` / `ibdiag bench --help`: short enough that click never cuts
#: them with "..." at 80 columns (the docstring's first sentence stays the command's own --help).
SHORT_HELP = {
    "topo": "Map GPUs, RDMA adapters, PCIe and NUMA; judge the layout.",
    "counters": "Port error, backpressure and throughput counters.",
    "verdict": "Is the network the bottleneck of this training job?",
    "snapshot": "Capture the sysfs subset ibdiag reads, for --root.",
    "sweep": "Find the bad node, rail or link of a cluster.",
    "report": "One fleet view from many nodes' ibdiag JSON.",
    "bench": "Measure the fabric: p2p, collectives, imported logs.",
    "serve": "Serve 'ibdiag bench p2p' clients (like ib_write_bw).",
    "p2p": "Bandwidth and latency to HOST (like ib_write_bw, iperf3).",
    "collective": "Collective bus bandwidth, like nccl-tests.",
    "import": "Read nccl-tests and perftest logs as ibdiag results.",
}


def _apply_short_help() -> None:
    for typer_app in (app, bench_app):
        for info in [*typer_app.registered_commands, *typer_app.registered_groups]:
            name = info.name or ""
            if name in SHORT_HELP:
                info.short_help = SHORT_HELP[name]


_apply_short_help()

__all__ = ["app", "bench_app"]

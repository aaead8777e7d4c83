"""``ibdiag bench p2p HOST`` as a library: :func:`run` measures bandwidth and latency to an ``ibdiag bench
serve`` (like ``ib_write_bw``/``ib_write_lat`` over RDMA, ``iperf3``/``qperf tcp_lat`` over TCP), judges the
best bandwidth against the line rate and returns the result its views draw
(:func:`ibdiag.bench.views.outputs`).

What the server is asked is the wire's own model, :class:`~ibdiag.bench.p2p.params.RunRequest` (it checks
its fields when built, naming the flag); :class:`P2PRequest` adds where the run goes and how it is judged.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ibdiag.bench.p2p import views
from ibdiag.bench.p2p.checks import P2PConfig, bandwidth_findings
from ibdiag.bench.p2p.client import ClientOptions, run_p2p
from ibdiag.bench.p2p.control.protocol import DEFAULT_PORT, DEFAULT_TIMEOUT_S, read_token
from ibdiag.bench.p2p.engines import parse_engine
from ibdiag.bench.p2p.linerate import judged_line_rate
from ibdiag.bench.p2p.params import RunRequest
from ibdiag.bench.p2p.phase import Progress
from ibdiag.bench.results.document import BenchResult
from ibdiag.config import Config
from ibdiag.errors import UsageError
from ibdiag.findings.model import RunMeta
from ibdiag.node.root import host_of
from ibdiag.node.sysfs import SysfsRoot
from ibdiag.outfile import check_output_path

#: Largest ``--line-rate-gbps`` taken, Gb/s (no port is near it).
MAX_LINE_RATE_GBPS = 1e6


@dataclass(frozen=True)
class P2PRequest:
    """What ``ibdiag bench p2p`` is asked: the run (what the server runs), where it goes, how it is judged."""

    host: str
    """The host running ``ibdiag bench serve``."""
    run_request: RunRequest
    """Transport, mode, sizes and the loop: sent to the server as it is."""
    engine: str | None = None
    """``--engine``: ``auto`` (each kind's engine chosen once the server said which it can run:
    :func:`ibdiag.bench.p2p.engines.choose`), one of ``ibdiag``, ``perftest``, ``iperf3``,
    ``sockperf``, or two joined by a comma, the bandwidth's first (``iperf3,sockperf``): sets
    ``run_request.engine`` and ``lat_engine``; None: as they are there."""
    port: int = DEFAULT_PORT
    token_file: Path | None = None
    """``--token-file``; without it ``IBDIAG_TOKEN`` in ``environ``."""
    timeout_s: float = DEFAULT_TIMEOUT_S
    socket_buffer: int | None = None
    """TCP: fixed SO_SNDBUF/SO_RCVBUF, bytes (``iperf3 -w``); None: the kernel's autotuning."""
    device: str | None = None
    ib_port: int = 1
    gid_index: int | None = None
    line_rate_gbps: float | None = None
    """``--line-rate-gbps``: judge against this rate instead of the config's or the ports'."""
    config: Config = field(default_factory=lambda: Config(None, {}))
    save: Path | None = None
    """``--save``: checked before anything is measured (the caller writes it, after the result)."""
    png: Path | None = None
    """``--png``: checked (and matplotlib looked for) before anything is measured; the caller draws it."""
    environ: Mapping[str, str] = field(default_factory=dict)
    on_progress: Progress | None = None
    """Called with (done, total, label) before each size and mode, and at the end."""
    on_warning: Callable[[str], None] | None = None
    """Told what works but should not be so (a token file other users can read)."""


def run(req: P2PRequest) -> BenchResult:
    """Measure ``req`` against the server, judge it, return the result; ibdiag errors (exit 2 for what can
    be refused before a byte is measured, 3 for a peer that cannot be reached or fails)."""
    _check(req)
    path = req.environ.get("PATH")
    cfg = req.config.section("p2p", P2PConfig)
    asked = req.run_request
    auto = req.engine is not None and parse_engine(req.engine) is None
    if req.engine is not None and not auto:
        asked = with_engines(asked, req.engine)  # checked again: each tool's own bounds
    opts = ClientOptions(
        host=req.host,
        port=req.port,
        token=read_token(req.token_file, req.environ, req.on_warning),
        timeout_s=req.timeout_s,
        socket_buffer=req.socket_buffer,
        device=req.device,
        ib_port=req.ib_port,
        gid_index=req.gid_index,
        sysfs=SysfsRoot("/"),  # the one tree of this run: the live node's /sys
        perftest_path=path,
    )
    measured = run_p2p(asked, opts, req.on_progress, auto=auto)
    rate = judged_line_rate(
        measured.local_rate,
        measured.remote_rate,
        flag_gbps=req.line_rate_gbps,
        config_gbps=cfg.line_rate_gbps,
    )
    bench = measured.to_bench_run(rate)
    findings = bandwidth_findings(
        measured.results,
        transport=asked.transport,
        subject=f"{asked.transport} {measured.peer}",
        line_rate_gbps=rate.gbps,
        line_rate_source=rate.source,
        bidir=asked.bidir,
        cfg=cfg,
    )
    return BenchResult.of_run(bench, findings, RunMeta.now(host_of(None)))


def _check(req: P2PRequest) -> None:
    """What can be refused is refused before a single byte is measured (exit 2)."""
    rate = req.line_rate_gbps
    if rate is not None and not 0 < rate < MAX_LINE_RATE_GBPS:
        raise UsageError(
            f"--line-rate-gbps {rate:g} must be a positive rate below 1e6 Gb/s",
            hint="e.g. 400 for an NDR port, 100 for 100GbE",
        )
    transport = req.run_request.transport
    if transport == "tcp" and (req.device is not None or req.gid_index is not None):
        raise UsageError(
            "--device and --gid-index apply to --transport rdma",
            hint="drop them, or add --transport rdma",
        )
    if transport == "rdma" and req.socket_buffer is not None:
        raise UsageError("--socket-buffer applies to --transport tcp", hint="drop it")
    check_output_path(req.save, "--save")
    check_output_path(req.png, "--png")
    if req.png is not None and not views.png_available():
        raise UsageError(
            "--png needs matplotlib, which is not installed",
            hint="pip install 'ibdiag[chart]' (or matplotlib), or use the terminal chart of -o table",
        )
    try:
        named = None if req.engine is None else parse_engine(req.engine)
    except ValueError as e:
        raise UsageError(
            str(e), hint="e.g. --engine auto, --engine iperf3, --engine iperf3,sockperf"
        ) from None
    if transport == "tcp" and named is not None and "perftest" in named:
        raise UsageError(
            "--engine perftest applies to --transport rdma",
            hint="add --transport rdma (perftest measures RDMA), or drop --engine",
        )


def with_engines(asked: RunRequest, text: str) -> RunRequest:
    """``asked`` with ``--engine``'s engines (not ``auto``): one for every kind, or the bandwidth's and
    the latency's; RequestError (exit 2) when one cannot measure what it is given."""
    named = parse_engine(text)
    assert named is not None
    bw, lat = named
    if asked.mode == "lat":
        return dataclasses.replace(asked, engine=lat or bw, lat_engine=None)
    if asked.mode == "bw":
        return dataclasses.replace(asked, engine=bw, lat_engine=None)
    return dataclasses.replace(asked, engine=bw, lat_engine=lat if lat not in (None, bw) else None)

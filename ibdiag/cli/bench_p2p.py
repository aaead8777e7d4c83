"""``ibdiag bench p2p HOST``: point-to-point bandwidth and latency (RDMA WRITE, TCP).

Like ``ib_write_bw``/``ib_write_lat`` (RDMA) and ``iperf3``/``qperf tcp_lat`` (TCP), from one tool,
with results ``ibdiag verdict`` can read (``--save``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from ibdiag.cli.app import bench_app
from ibdiag.cli.common import (
    ConfigOption,
    DebugOption,
    FormatOption,
    OutputFormat,
    StrictOption,
    atomic_output,
    check_output_path,
    console,
    emit,
    env,
    handle_errors,
    read_config,
    run_meta,
    table_width,
    write_atomically,
)
from ibdiag.cli.p2p_options import (
    DEFAULT_PORT,
    DEFAULT_TIMEOUT_S,
    DeviceOption,
    Engine,
    GidIndexOption,
    IbPortOption,
    Mode,
    PortOption,
    SocketBufferOption,
    TimeoutOption,
    TokenFileOption,
    Transport,
    Verb,
    size_from_option,
    token_from_option,
)
from ibdiag.errors import UsageError
from ibdiag.parse import parse_decimal

# --- p2p -----------------------------------------------------------------------------------------


@bench_app.command("p2p")
@handle_errors
def p2p_command(
    host: Annotated[str, typer.Argument(metavar="HOST", help="Host running 'ibdiag bench serve'.")],
    port: PortOption = DEFAULT_PORT,
    transport: Annotated[
        Transport,
        typer.Option(
            "--transport",
            "-t",
            case_sensitive=False,
            help="rdma: RDMA over pyverbs (ib_write_bw/ib_write_lat, --verb); tcp: sockets (iperf3/qperf).",
        ),
    ] = Transport.tcp,
    sizes: Annotated[
        str,
        typer.Option(
            "--sizes",
            "-s",
            metavar="LIST|MIN:MAX",
            help="Message sizes: 4K,64K,1M,25MiB or a doubling range 4K:64M.",
        ),
    ] = "4K:64M",
    mode: Annotated[
        Mode,
        typer.Option(
            "--mode",
            "-m",
            case_sensitive=False,
            help="bw (bandwidth), lat (ping-pong latency) or both.",
        ),
    ] = Mode.bw,
    iters: Annotated[
        int | None,
        typer.Option(
            "--iters", "-n", metavar="N", help="Iterations per size (instead of --duration)."
        ),
    ] = None,
    duration: Annotated[
        float | None,
        typer.Option(
            "--duration",
            "-D",
            parser=parse_decimal,
            metavar="S",
            help="Seconds per size and mode [default: 1].",
        ),
    ] = None,
    warmup: Annotated[
        int | None,
        typer.Option(
            "--warmup",
            "-w",
            metavar="N",
            help="Warm-up iterations per size [default: enough for ~32 MiB (bw) / 8 MiB (lat)].",
        ),
    ] = None,
    streams: Annotated[
        int,
        typer.Option("--streams", "-P", metavar="N", help="Parallel TCP connections (iperf3 -P)."),
    ] = 1,
    bidir: Annotated[
        bool,
        typer.Option(
            "--bidir", help="Both directions at once (perftest -b); bandwidth is the sum."
        ),
    ] = False,
    engine: Annotated[
        Engine,
        typer.Option(
            "--engine",
            case_sensitive=False,
            help="RDMA: who measures: ibdiag (its own loops, needs pyverbs), perftest (ib_*_bw/ib_*_lat on both ends, started by bench serve), or auto: ibdiag where pyverbs is installed, else perftest where it is.",
        ),
    ] = Engine.auto,
    verb: Annotated[
        Verb,
        typer.Option(
            "--verb",
            case_sensitive=False,
            help="RDMA: write, read or send (ib_write_*, ib_read_*, ib_send_*).",
        ),
    ] = Verb.write,
    qps: Annotated[
        int,
        typer.Option(
            "--qps",
            "-q",
            metavar="N",
            help="RDMA: queue pairs (perftest -q); bandwidth is their sum.",
        ),
    ] = 1,
    inline: Annotated[
        int | None,
        typer.Option(
            "--inline",
            "-I",
            metavar="BYTES",
            help="RDMA: post messages up to BYTES inline (perftest -I); 0 never [default: latency WRITE/SEND up to 220 B where the device allows].",
        ),
    ] = None,
    tclass: Annotated[
        int,
        typer.Option(
            "--tclass",
            metavar="N",
            help="RDMA: GRH traffic class (perftest --tclass; RoCE v2: DSCP << 2 | ECN).",
        ),
    ] = 0,
    sl: Annotated[
        int,
        typer.Option("--sl", metavar="N", help="RDMA: service level (perftest --sl; InfiniBand)."),
    ] = 0,
    device: DeviceOption = None,
    ib_port: IbPortOption = 1,
    gid_index: GidIndexOption = None,
    tx_depth: Annotated[
        int,
        typer.Option(
            "--tx-depth",
            metavar="N",
            help="RDMA: WRITEs in flight (perftest -t); a completion is requested every N/2.",
        ),
    ] = 128,
    token_file: TokenFileOption = None,
    timeout: TimeoutOption = DEFAULT_TIMEOUT_S,
    line_rate_gbps: Annotated[
        float | None,
        typer.Option(
            "--line-rate-gbps",
            parser=parse_decimal,
            metavar="GBPS",
            help="Judge bandwidth against this rate (Gb/s) instead of the port's/interface's.",
        ),
    ] = None,
    socket_buffer: SocketBufferOption = None,
    save: Annotated[
        Path | None,
        typer.Option(
            "--save",
            metavar="FILE",
            help="Also write the JSON result (ibdiag.bench/1) to FILE, atomically.",
        ),
    ] = None,
    png: Annotated[
        Path | None,
        typer.Option(
            "--png",
            metavar="FILE",
            help="Write a bandwidth-by-size chart as PNG (needs matplotlib).",
        ),
    ] = None,
    fmt: FormatOption = OutputFormat.table,
    config: ConfigOption = None,
    strict: StrictOption = False,
    debug: DebugOption = False,
) -> int:
    """Measure bandwidth and latency to HOST at the message sizes your job sends (like ib_write_bw, iperf3).

    Reports GB/s and Gb/s with message rate, one-way latency min/p50/p99/p99.9/max, CPU seconds
    per GB on each side, and judges the best bandwidth at sizes >= 1 MiB against the line rate.
    """
    from ibdiag.bench.p2p import render
    from ibdiag.bench.p2p.checks import P2PConfig, bandwidth_findings
    from ibdiag.bench.p2p.client import ClientOptions, run_p2p
    from ibdiag.bench.p2p.linerate import judged_line_rate
    from ibdiag.bench.p2p.params import RunRequest
    from ibdiag.bench.views import view_for
    from ibdiag.findings.model import Report
    from ibdiag.node.sysfs import SysfsRoot
    from ibdiag.units import parse_size_spec

    # Everything that can be refused is refused before a single byte is measured.
    if fmt is OutputFormat.prom:
        raise UsageError(
            "ibdiag bench p2p cannot write prom",
            hint="use -o json or --save for machines (ibdiag counters -o prom exports node metrics)",
        )
    size_list = parse_size_spec(sizes, what="--sizes")
    if line_rate_gbps is not None and not 0 < line_rate_gbps < 1e6:
        raise UsageError(
            f"--line-rate-gbps {line_rate_gbps:g} must be a positive rate below 1e6 Gb/s",
            hint="e.g. 400 for an NDR port, 100 for 100GbE",
        )
    if transport is Transport.tcp and (device is not None or gid_index is not None):
        raise UsageError(
            "--device and --gid-index apply to --transport rdma",
            hint="drop them, or add --transport rdma",
        )
    if transport is Transport.rdma and socket_buffer is not None:
        raise UsageError("--socket-buffer applies to --transport tcp", hint="drop it")
    check_output_path(save, "--save")
    check_output_path(png, "--png")
    if png is not None and not render.png_available():
        raise UsageError(
            "--png needs matplotlib, which is not installed",
            hint="pip install 'ibdiag[chart]' (or matplotlib), or use the terminal chart of -o table",
        )
    if transport is Transport.tcp and engine is Engine.perftest:
        raise UsageError(
            "--engine perftest applies to --transport rdma",
            hint="add --transport rdma (perftest measures RDMA), or drop --engine",
        )
    path = env().environ.get("PATH")
    cfg = read_config(config).section("p2p", P2PConfig)
    # The request and where it goes check their own fields, naming the flag (ibdiag/bench/p2p/params.py).
    req = RunRequest(
        transport=transport.value,
        mode=mode.value,
        sizes=size_list,
        iters=iters,
        duration_s=duration,
        warmup=warmup,
        streams=streams,
        bidir=bidir,
        tx_depth=tx_depth,
        verb=verb.value,
        qps=qps,
        inline=inline,
        tclass=tclass,
        sl=sl,
        engine="perftest" if engine is Engine.perftest else "ibdiag",
    )
    if engine is Engine.auto:
        from dataclasses import replace

        from ibdiag.bench.p2p.perftest.engine import resolve_engine

        req = replace(req, engine=resolve_engine(req, path))
    opts = ClientOptions(
        host=host,
        port=port,
        token=token_from_option(token_file),
        timeout_s=timeout,
        socket_buffer=size_from_option(socket_buffer, "--socket-buffer"),
        device=device,
        ib_port=ib_port,
        gid_index=gid_index,
        sysfs=SysfsRoot("/"),  # the one tree of this run: the live node's /sys
        perftest_path=path,
    )
    interactive = fmt is OutputFormat.table and env().stderr_isatty
    if interactive:
        with _progress_bar() as progress:
            run = run_p2p(req, opts, progress)
    else:
        run = run_p2p(req, opts)

    rate = judged_line_rate(
        run.local_rate, run.remote_rate, flag_gbps=line_rate_gbps, config_gbps=cfg.line_rate_gbps
    )
    bench = run.to_bench_run(rate)
    subject = f"{transport.value} {run.peer}"
    findings = bandwidth_findings(
        run.results,
        transport=transport.value,
        subject=subject,
        line_rate_gbps=rate.gbps,
        line_rate_source=rate.source,
        bidir=bidir,
        cfg=cfg,
    )
    report = Report("bench", bench.to_data(), tuple(findings))
    meta = run_meta()
    view = view_for(bench)

    def table() -> list[Any]:
        from ibdiag.output.table import findings_block

        return [*view.table(bench), *findings_block(report, strict=strict, width=table_width())]

    # The measurement is printed first: a --save or --png that fails now loses nothing (its error follows).
    status = emit(report, fmt, meta, strict=strict, table=table, csv=lambda: view.csv(bench))
    env().stdout.flush()
    if save is not None:
        from ibdiag.output.jsonout import render_json

        write_atomically(save, render_json(report, meta))
    if png is not None:
        with atomic_output(png, "--png") as fh:
            render.write_png(bench, fh)
    return status


class _progress_bar:
    """A rich progress bar on stderr, one step per size and mode."""

    def __enter__(self) -> Any:
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        self._p = Progress(
            TextColumn("{task.description:>14}"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total}"),
            TimeElapsedColumn(),
            console=console("stderr"),
            transient=True,
        )
        self._p.start()
        self._task = None

        def update(done: int, total: int, label: str) -> None:
            if self._task is None:
                self._task = self._p.add_task(label, total=total)
            self._p.update(self._task, completed=done, description=label)

        return update

    def __exit__(self, *exc: object) -> None:
        self._p.stop()

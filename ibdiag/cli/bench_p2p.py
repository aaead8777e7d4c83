"""``ibdiag bench serve`` and ``ibdiag bench p2p``: point-to-point bandwidth and latency (RDMA WRITE, TCP).

Like ``ib_write_bw``/``ib_write_lat`` (RDMA) and ``iperf3``/``qperf tcp_lat`` (TCP), from one tool,
with results ``ibdiag verdict`` can read (``--save``).
"""

from __future__ import annotations

import time
from enum import Enum
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
    print_warning,
    read_config,
    run_meta,
    table_width,
    write_atomically,
)
from ibdiag.errors import UsageError

DEFAULT_PORT = (
    18516  # ibdiag.bench.p2p.control.protocol.DEFAULT_PORT (kept literal so --help imports nothing)
)
DEFAULT_TIMEOUT_S = 10.0


class ServeTransport(str, Enum):
    any = "any"
    tcp = "tcp"
    rdma = "rdma"


class Transport(str, Enum):
    tcp = "tcp"
    rdma = "rdma"


class Mode(str, Enum):
    bw = "bw"
    lat = "lat"
    both = "both"


class Engine(str, Enum):
    auto = "auto"
    ibdiag = "ibdiag"
    perftest = "perftest"


class Verb(str, Enum):
    write = "write"
    read = "read"
    send = "send"


PortOption = Annotated[
    int,
    typer.Option(
        "--port",
        "-p",
        metavar="N",
        help="Control port (TCP). The server's 0 picks a free one and logs it.",
    ),
]
TimeoutOption = Annotated[
    float,
    typer.Option(
        "--timeout",
        metavar="S",
        help="Longest wait on the peer, seconds; a dead peer ends the run with exit 3 after this.",
    ),
]
TokenFileOption = Annotated[
    Path | None,
    typer.Option(
        "--token-file",
        metavar="FILE",
        help="Shared secret (same file on both hosts; default: $IBDIAG_TOKEN). Never sent on the wire.",
    ),
]
DeviceOption = Annotated[
    str | None,
    typer.Option(
        "--device",
        "-d",
        metavar="DEV",
        help="RDMA device, e.g. mlx5_0 (default: the first with an active port).",
    ),
]
IbPortOption = Annotated[
    int, typer.Option("--ib-port", "-i", metavar="N", help="Port of the RDMA device (perftest -i).")
]
GidIndexOption = Annotated[
    int | None,
    typer.Option(
        "--gid-index",
        "-x",
        metavar="N",
        help="GID table index (perftest -x); default: RoCE v2 IPv4-mapped GID like perftest, none on InfiniBand.",
    ),
]
SocketBufferOption = Annotated[
    str | None,
    typer.Option(
        "--socket-buffer",
        metavar="SIZE",
        help="TCP: fixed SO_SNDBUF/SO_RCVBUF (iperf3 -w). Default: kernel autotuning.",
    ),
]


def _log_line(message: str) -> None:
    err = env().stderr
    err.write(f"ibdiag serve: {time.strftime('%Y-%m-%dT%H:%M:%S')} {message}\n")
    err.flush()


def _token(token_file: Path | None) -> bytes | None:
    from ibdiag.bench.p2p.control.protocol import read_token_file, token_from_env

    if token_file is None:
        return token_from_env(env().environ.get("IBDIAG_TOKEN"))
    token = read_token_file(token_file)
    try:
        mode = token_file.stat().st_mode
        if mode & 0o077:
            print_warning(
                f"token file {token_file} can be read by other users (mode {mode & 0o777:o}); chmod 600 {token_file}"
            )
    except OSError:
        pass
    return token


def _size(text: str | None, what: str) -> int | None:
    from ibdiag.units import parse_size

    if text is None:
        return None
    value = parse_size(text, what=what)
    if value < 1:
        raise UsageError(f"{what} must be at least 1 byte", hint=f"e.g. {what} 4M")
    return value


# --- serve ---------------------------------------------------------------------------------------


@bench_app.command("serve")
@handle_errors
def serve_command(
    bind: Annotated[
        str | None,
        typer.Option(
            "--bind", metavar="ADDR", help="Address to listen on (default: all interfaces)."
        ),
    ] = None,
    port: PortOption = DEFAULT_PORT,
    transport: Annotated[
        ServeTransport,
        typer.Option(
            "--transport", "-t", case_sensitive=False, help="Which transports clients may use."
        ),
    ] = ServeTransport.any,
    device: DeviceOption = None,
    ib_port: IbPortOption = 1,
    gid_index: GidIndexOption = None,
    token_file: TokenFileOption = None,
    max_size: Annotated[
        str,
        typer.Option(
            "--max-size", metavar="SIZE", help="Largest buffer a client may ask for (per buffer)."
        ),
    ] = "1GiB",
    timeout: TimeoutOption = DEFAULT_TIMEOUT_S,
    once: Annotated[
        bool,
        typer.Option(
            "--once", help="Exit after one client's run (exit 0 if it completed, 3 if it failed)."
        ),
    ] = False,
    socket_buffer: SocketBufferOption = None,
    debug: DebugOption = False,
) -> int:
    """Wait for 'ibdiag bench p2p' clients and serve them one at a time (like ib_write_bw without a host).

    Without a token only clients on this host (loopback) are accepted. Every refused or dropped
    client is one line on stderr; the server keeps serving. Ctrl-C exits 130.
    """
    from ibdiag.bench.p2p.fields import check_rdma_port
    from ibdiag.bench.p2p.params import TRANSPORTS
    from ibdiag.bench.p2p.serve import ServeOptions, Server, preflight_rdma
    from ibdiag.units import format_bytes

    transports = TRANSPORTS if transport is ServeTransport.any else (transport.value,)
    if transport is ServeTransport.tcp and (device or gid_index is not None):
        raise UsageError(
            "--device and --gid-index apply to RDMA",
            hint="drop them, or use --transport rdma or any",
        )
    check_rdma_port(ib_port, gid_index)
    max_bytes = _size(max_size, "--max-size")
    assert max_bytes is not None
    opts = ServeOptions(
        bind=bind,
        port=port,
        transports=transports,
        device=device,
        ib_port=ib_port,
        gid_index=gid_index,
        token=_token(token_file),
        max_size=max_bytes,
        timeout_s=timeout,
        once=once,
        socket_buffer=_size(socket_buffer, "--socket-buffer"),
        perftest_path=env().environ.get("PATH"),
    )
    rdma_line = None
    if transport is ServeTransport.rdma:
        rdma_line = preflight_rdma(
            opts
        )  # pyverbs, device, port, GID: fail now, not at the first client
    with Server(opts, _log_line) as server:
        host, real_port = server.address or ("?", port)
        shown = f"[{host}]" if ":" in host else host
        _log_line(
            f"listening on {shown}:{real_port} ({', '.join(transports)}; up to {format_bytes(max_bytes)} per buffer; timeout {opts.timeout_s:g} s)"
        )
        if rdma_line:
            _log_line(f"RDMA: {rdma_line}")
        if opts.token is None:
            _log_line(
                "no token: accepting clients on this host (loopback) only; give --token-file or IBDIAG_TOKEN to serve other hosts"
            )
        _log_line(
            "serving one client at a time"
            + ("; exiting after one run" if once else "; Ctrl-C stops")
        )
        return server.serve()


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
            "--duration", "-D", metavar="S", help="Seconds per size and mode [default: 1]."
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
        token=_token(token_file),
        timeout_s=timeout,
        socket_buffer=_size(socket_buffer, "--socket-buffer"),
        device=device,
        ib_port=ib_port,
        gid_index=gid_index,
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

"""``ibdiag bench p2p HOST``: point-to-point bandwidth and latency (RDMA WRITE, TCP).

Like ``ib_write_bw``/``ib_write_lat`` (RDMA) and ``iperf3``/``qperf tcp_lat`` (TCP), from one tool,
with results ``ibdiag verdict`` can read (``--save``). The library is :mod:`ibdiag.bench.p2p.command`.
"""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING, Annotated

import typer

from ibdiag.bench import views
from ibdiag.bench.p2p.command import P2PRequest, run
from ibdiag.bench.p2p.control.protocol import DEFAULT_PORT, DEFAULT_TIMEOUT_S
from ibdiag.bench.p2p.fields import size_option
from ibdiag.bench.p2p.params import RunRequest
from ibdiag.bench.p2p.phase import Progress
from ibdiag.cli.app import bench_app
from ibdiag.cli.common import env, handle_errors, print_warning, read_config
from ibdiag.cli.console import console
from ibdiag.cli.emit import emit
from ibdiag.cli.options import (
    ConfigOption,
    DebugOption,
    FormatOption,
    OutputFormat,
    PngOption,
    SaveOption,
    StrictOption,
    TimeoutOption,
)
from ibdiag.cli.p2p_options import (
    BusyPollOption,
    DeviceOption,
    EngineOption,
    GidIndexOption,
    IbPortOption,
    Mode,
    PortOption,
    SocketBufferOption,
    TokenFileOption,
    Transport,
    Verb,
)
from ibdiag.errors import UsageError
from ibdiag.parse import parse_decimal
from ibdiag.units import parse_size_spec

if TYPE_CHECKING:
    from rich.progress import Progress as ProgressBar
    from rich.progress import TaskID


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
    engine: EngineOption = "auto",
    busy_poll: BusyPollOption = None,
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
    save: SaveOption = None,
    png: PngOption = None,
    fmt: FormatOption = OutputFormat.table,
    config: ConfigOption = None,
    strict: StrictOption = False,
    debug: DebugOption = False,
) -> int:
    """Measure bandwidth and latency to HOST at the message sizes your job sends (like ib_write_bw, iperf3).

    Reports GB/s and Gb/s with message rate, one-way latency min/p50/p99/p99.9/max, CPU seconds
    per GB on each side, and judges the best bandwidth at sizes >= 1 MiB against the line rate.
    """
    if fmt is OutputFormat.prom:  # refused before a single byte is measured
        raise UsageError(
            "ibdiag bench p2p cannot write prom",
            hint="use -o json or --save for machines (ibdiag counters -o prom exports node metrics)",
        )
    cfg = read_config(config)
    # The request checks its own fields, naming the flag (ibdiag/bench/p2p/params.py).
    asked = RunRequest(
        transport=transport.value,
        mode=mode.value,
        sizes=parse_size_spec(sizes, what="--sizes"),
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
        busy_poll_us=busy_poll,
    )
    with _ProgressBar(fmt is OutputFormat.table and env().stderr_isatty) as progress:
        result = run(
            P2PRequest(
                host=host,
                run_request=asked,
                engine=engine,
                port=port,
                token_file=token_file,
                timeout_s=DEFAULT_TIMEOUT_S if timeout is None else timeout,
                socket_buffer=size_option(socket_buffer, "--socket-buffer"),
                device=device,
                ib_port=ib_port,
                gid_index=gid_index,
                line_rate_gbps=line_rate_gbps,
                config=cfg,
                save=save,
                png=png,
                environ=env().environ,
                on_progress=progress,
                on_warning=print_warning,
            )
        )
    # The measurement is printed first: a --save or --png that fails now loses nothing (its error follows).
    return emit(views.outputs(result), fmt, strict=strict, save=save, png=png, files_last=True)


class _ProgressBar:
    """A rich progress bar on stderr, one step per size and mode; None (no progress) when not ``shown``."""

    def __init__(self, shown: bool) -> None:
        self.shown = shown
        self._bar: ProgressBar | None = None
        self._task: TaskID | None = None

    def __enter__(self) -> Progress | None:
        if not self.shown:
            return None
        # lazy: rich, for a terminal's progress bar only
        from rich.progress import BarColumn, TextColumn, TimeElapsedColumn
        from rich.progress import Progress as ProgressBar

        self._bar = ProgressBar(
            TextColumn("{task.description:>14}"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total}"),
            TimeElapsedColumn(),
            console=console("stderr"),
            transient=True,
        )
        self._bar.start()
        return self._update

    def _update(self, done: int, total: int, label: str) -> None:
        assert self._bar is not None
        if self._task is None:
            self._task = self._bar.add_task(label, total=total)
        self._bar.update(self._task, completed=done, description=label)

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._bar is not None:
            self._bar.stop()

"""``ibdiag bench serve``: serve ``ibdiag bench p2p`` clients one at a time (like ``ib_write_bw``'s
server side), over RDMA WRITE or TCP."""

from __future__ import annotations

from typing import Annotated

import typer

from ibdiag.cli.app import bench_app
from ibdiag.cli.common import (
    DebugOption,
    env,
    handle_errors,
)
from ibdiag.cli.p2p_options import (
    DEFAULT_PORT,
    DEFAULT_TIMEOUT_S,
    DeviceOption,
    GidIndexOption,
    IbPortOption,
    PortOption,
    ServeTransport,
    SocketBufferOption,
    TimeoutOption,
    TokenFileOption,
    serve_log_line,
    size_from_option,
    token_from_option,
)
from ibdiag.errors import UsageError

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
    from ibdiag.node.sysfs import SysfsRoot
    from ibdiag.units import format_bytes

    transports = TRANSPORTS if transport is ServeTransport.any else (transport.value,)
    if transport is ServeTransport.tcp and (device or gid_index is not None):
        raise UsageError(
            "--device and --gid-index apply to RDMA",
            hint="drop them, or use --transport rdma or any",
        )
    check_rdma_port(ib_port, gid_index)
    max_bytes = size_from_option(max_size, "--max-size")
    assert max_bytes is not None
    opts = ServeOptions(
        bind=bind,
        port=port,
        transports=transports,
        device=device,
        ib_port=ib_port,
        gid_index=gid_index,
        token=token_from_option(token_file),
        max_size=max_bytes,
        timeout_s=timeout,
        once=once,
        socket_buffer=size_from_option(socket_buffer, "--socket-buffer"),
        sysfs=SysfsRoot("/"),  # the one tree every client's run reads: the live node's /sys
        perftest_path=env().environ.get("PATH"),
    )
    rdma_line = None
    if transport is ServeTransport.rdma:
        rdma_line = preflight_rdma(
            opts
        )  # pyverbs, device, port, GID: fail now, not at the first client
    with Server(opts, serve_log_line) as server:
        host, real_port = server.address or ("?", port)
        shown = f"[{host}]" if ":" in host else host
        serve_log_line(
            f"listening on {shown}:{real_port} ({', '.join(transports)}; up to {format_bytes(max_bytes)} per buffer; timeout {opts.timeout_s:g} s)"
        )
        if rdma_line:
            serve_log_line(f"RDMA: {rdma_line}")
        if opts.token is None:
            serve_log_line(
                "no token: accepting clients on this host (loopback) only; give --token-file or IBDIAG_TOKEN to serve other hosts"
            )
        serve_log_line(
            "serving one client at a time"
            + ("; exiting after one run" if once else "; Ctrl-C stops")
        )
        return server.serve()

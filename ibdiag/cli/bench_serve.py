"""``ibdiag bench serve``: serve ``ibdiag bench p2p`` clients one at a time (like ``ib_write_bw``'s
server side), over RDMA WRITE or TCP. The library is :mod:`ibdiag.bench.p2p.serve_command`."""

from __future__ import annotations

import time
from typing import Annotated

import typer

from ibdiag.bench.p2p.control.protocol import DEFAULT_PORT, DEFAULT_TIMEOUT_S
from ibdiag.bench.p2p.fields import size_option
from ibdiag.bench.p2p.serve_command import ServeRequest, run
from ibdiag.cli.app import bench_app
from ibdiag.cli.common import env, handle_errors, print_warning
from ibdiag.cli.options import DebugOption, TimeoutOption
from ibdiag.cli.p2p_options import (
    DeviceOption,
    GidIndexOption,
    IbPortOption,
    PortOption,
    ServeTransport,
    SocketBufferOption,
    TokenFileOption,
)


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
    request = ServeRequest(
        bind=bind,
        port=port,
        transport=transport.value,
        device=device,
        ib_port=ib_port,
        gid_index=gid_index,
        token_file=token_file,
        max_size=_max_size(max_size),
        timeout_s=DEFAULT_TIMEOUT_S if timeout is None else timeout,
        once=once,
        socket_buffer=size_option(socket_buffer, "--socket-buffer"),
        environ=env().environ,
        log=serve_log_line,
        on_warning=print_warning,
    )
    return run(request).exit_status


def _max_size(text: str) -> int:
    size = size_option(text, "--max-size")
    assert size is not None  # the option has a default
    return size


def serve_log_line(message: str) -> None:
    """One line of the server's log on stderr: ``ibdiag serve: <local time> <message>``."""
    err = env().stderr
    err.write(f"ibdiag serve: {time.strftime('%Y-%m-%dT%H:%M:%S')} {message}\n")
    err.flush()

"""What ``ibdiag bench serve`` and ``ibdiag bench p2p`` share: defaults, choices, options, the token
and size readers. No command here (each command's module registers its own)."""

from __future__ import annotations

import time
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from ibdiag.cli.common import env, print_warning
from ibdiag.errors import UsageError
from ibdiag.parse import parse_decimal

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
        parser=parse_decimal,
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


def serve_log_line(message: str) -> None:
    err = env().stderr
    err.write(f"ibdiag serve: {time.strftime('%Y-%m-%dT%H:%M:%S')} {message}\n")
    err.flush()


def token_from_option(token_file: Path | None) -> bytes | None:
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


def size_from_option(text: str | None, what: str) -> int | None:
    from ibdiag.units import parse_size

    if text is None:
        return None
    value = parse_size(text, what=what)
    if value < 1:
        raise UsageError(f"{what} must be at least 1 byte", hint=f"e.g. {what} 4M")
    return value

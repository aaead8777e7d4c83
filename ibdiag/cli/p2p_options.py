"""The options ``ibdiag bench serve`` and ``ibdiag bench p2p`` share (the connection, the RDMA device and
the token) and their choices. No command here (each command's module registers its own)."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer


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
EngineOption = Annotated[
    str,
    typer.Option(
        "--engine",
        metavar="ENGINE[,LAT_ENGINE]",
        help="Who measures: auto (per kind the faster engine both hosts have: RDMA latency perftest, the rest ibdiag), ibdiag (its own loops), perftest (RDMA ib_*_bw/ib_*_lat), iperf3 (TCP bandwidth), sockperf (TCP latency), or two joined by a comma, bandwidth's first: iperf3,sockperf.",
    ),
]
BusyPollOption = Annotated[
    int | None,
    typer.Option(
        "--busy-poll",
        metavar="USEC",
        help="TCP latency: each side busy-polls for the peer's message up to USEC µs before it blocks (and asks the kernel for SO_BUSY_POLL); 0 blocks at once, like qperf and sockperf [default: 200].",
    ),
]

"""``ibdiag bench serve`` as a library: :func:`run` listens, says where (through ``log``), and serves
``ibdiag bench p2p`` clients one at a time (like ``ib_write_bw``'s server side) until it is stopped: the
``stop`` event, Ctrl-C (KeyboardInterrupt, raised to the caller) or, with ``once``, the end of one run.

Every line the server says (listening, each client refused, dropped or served) goes to ``log``; the
server itself is :class:`~ibdiag.bench.p2p.serve.Server`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ibdiag.bench.p2p.control.protocol import DEFAULT_PORT, DEFAULT_TIMEOUT_S, read_token
from ibdiag.bench.p2p.fields import check_rdma_port
from ibdiag.bench.p2p.params import TRANSPORTS
from ibdiag.bench.p2p.serve import ServeOptions, Server, preflight_rdma
from ibdiag.errors import UsageError
from ibdiag.node.sysfs import SysfsRoot
from ibdiag.units import format_bytes

#: ``--transport`` of the server: which transports clients may use (``any``: all of them).
SERVE_TRANSPORTS = ("any", *TRANSPORTS)
#: ``--max-size``'s default: the largest buffer a client may ask for, bytes.
DEFAULT_MAX_SIZE = 2**30


def _silent(line: str) -> None:
    pass


@dataclass(frozen=True)
class ServeRequest:
    """What ``ibdiag bench serve`` is asked: where to listen, what to allow, when to stop."""

    bind: str | None = None
    """Address to listen on; None: all interfaces (IPv6 and IPv4)."""
    port: int = DEFAULT_PORT
    """0: a free port, said in the listening line and given to ``on_listening``."""
    transport: str = "any"
    """``any``, ``tcp`` or ``rdma`` (``rdma`` checks pyverbs, the device and the port before listening)."""
    device: str | None = None
    ib_port: int = 1
    gid_index: int | None = None
    token_file: Path | None = None
    """``--token-file``; without it ``IBDIAG_TOKEN`` in ``environ``; without both, loopback clients only."""
    max_size: int = DEFAULT_MAX_SIZE
    """Largest buffer a client may ask for, bytes (per buffer)."""
    timeout_s: float = DEFAULT_TIMEOUT_S
    once: bool = False
    """Stop after one client's run: exit status 0 if it completed, 3 if it failed."""
    socket_buffer: int | None = None
    """TCP: fixed SO_SNDBUF/SO_RCVBUF, bytes; None: the kernel's autotuning."""
    environ: Mapping[str, str] = field(default_factory=dict)
    log: Callable[[str], None] = _silent
    """Every line the server says, without a time stamp."""
    on_listening: Callable[[tuple[str, int]], None] | None = None
    """Called with the (address, port) listened on, before the first client is accepted."""
    on_warning: Callable[[str], None] | None = None
    """Told what works but should not be so (a token file other users can read)."""
    stop: threading.Event | None = None
    """Set it from another thread to stop serving (within half a second); set when the server stops."""


@dataclass(frozen=True)
class ServeResult:
    exit_status: int
    """0; with ``once``, 3 when the one run failed."""
    address: tuple[str, int]
    """Where it listened."""


def run(req: ServeRequest) -> ServeResult:
    """Listen and serve until stopped; ibdiag errors for what cannot start (exit 2 options, 3 a port in
    use, RDMA not usable)."""
    opts = _options(req)
    rdma_line = None
    if req.transport == "rdma":
        rdma_line = preflight_rdma(
            opts
        )  # pyverbs, device, port, GID: fail now, not at the first client
    with Server(opts, req.log, stop=req.stop) as server:
        address = server.address or ("?", req.port)
        if req.on_listening is not None:
            req.on_listening(address)
        for line in _announcement(opts, address, rdma_line):
            req.log(line)
        status = server.serve()
    return ServeResult(status, address)


def _options(req: ServeRequest) -> ServeOptions:
    if req.transport not in SERVE_TRANSPORTS:
        raise UsageError(
            f"--transport {req.transport} is not one of {', '.join(SERVE_TRANSPORTS)}",
            hint="any serves both",
        )
    if req.transport == "tcp" and (req.device or req.gid_index is not None):
        raise UsageError(
            "--device and --gid-index apply to RDMA",
            hint="drop them, or use --transport rdma or any",
        )
    check_rdma_port(req.ib_port, req.gid_index)
    return ServeOptions(
        bind=req.bind,
        port=req.port,
        transports=TRANSPORTS if req.transport == "any" else (req.transport,),
        device=req.device,
        ib_port=req.ib_port,
        gid_index=req.gid_index,
        token=read_token(req.token_file, req.environ, req.on_warning),
        max_size=req.max_size,
        timeout_s=req.timeout_s,
        once=req.once,
        socket_buffer=req.socket_buffer,
        sysfs=SysfsRoot("/"),  # the one tree every client's run reads: the live node's /sys
        perftest_path=req.environ.get("PATH"),
    )


def _announcement(opts: ServeOptions, address: tuple[str, int], rdma_line: str | None) -> list[str]:
    """What the server says once it listens: where, what it serves, who may connect, how it stops."""
    host, port = address
    shown = f"[{host}]" if ":" in host else host
    lines = [
        f"listening on {shown}:{port} ({', '.join(opts.transports)}; up to {format_bytes(opts.max_size)} per buffer; timeout {opts.timeout_s:g} s)"
    ]
    if rdma_line:
        lines.append(f"RDMA: {rdma_line}")
    if opts.token is None:
        lines.append(
            "no token: accepting clients on this host (loopback) only; give --token-file or IBDIAG_TOKEN to serve other hosts"
        )
    lines.append(
        "serving one client at a time"
        + ("; exiting after one run" if opts.once else "; Ctrl-C stops")
    )
    return lines

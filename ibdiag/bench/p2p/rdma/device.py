"""Which device, port and GID an end uses, the options a server runs RDMA with, and the path a result describes.

Shared by ibdiag's own RDMA engine (:mod:`.session`, which adds :func:`~.session.select_rdma`: the same
choice checked through pyverbs) and the perftest engine (:func:`select_device`: from sysfs alone).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ibdiag.bench.p2p.control.protocol import ProtocolError
from ibdiag.bench.p2p.params import RunRequest
from ibdiag.bench.p2p.rdma.plan import choose_device, choose_gid
from ibdiag.bench.results.p2p_meta import RdmaEnd, RdmaPath
from ibdiag.jsonread import Fields
from ibdiag.node.discover import list_adapters, list_ports, read_port
from ibdiag.node.sysfs import SysfsRoot


@dataclass(frozen=True)
class RdmaSelection:
    """Which device, port and GID one side uses (from sysfs, like ``ibdiag topo``)."""

    device: str
    port: int
    gid_index: int | None
    gid: str | None
    gid_reason: str
    link_layer: str | None
    max_msg_bytes: int | None = None
    """The port's ``max_msg_sz`` (``ibv_query_port``)."""


def select_device(
    sysfs: SysfsRoot, device: str | None, ib_port: int, gid_index: int | None
) -> RdmaSelection:
    """Device, port and GID from sysfs alone (perftest needs no pyverbs): like :func:`select_rdma`."""
    ports = [
        read_port(sysfs, name, ib_port)
        for name in list_adapters(sysfs)
        if ib_port in list_ports(sysfs, name)
    ]
    port = choose_device(ports, device)
    gid = choose_gid(port, gid_index)
    return RdmaSelection(
        port.adapter, port.port, gid.index, gid.gid, gid.reason, port.link_layer, None
    )


def run_options(req: RunRequest) -> dict[str, Any]:
    """The RDMA options a server echoes in ``ready`` (``rdma_run``) as it will run them."""
    return {
        "verb": req.verb,
        "qps": req.qps,
        "tclass": req.tclass,
        "sl": req.sl,
        "bidir": req.bidir,
    }


def check_server_run(ready: dict[str, Any], req: RunRequest, peer: str) -> None:
    """ProtocolError unless the server echoes the options this client asked for: an older server that
    ignores ``--verb read`` would otherwise measure WRITEs under a READ label."""
    want = run_options(req)
    if ready.get("rdma_run") != want:
        raise ProtocolError(
            f"{peer} does not run RDMA the way this client asked ({', '.join(f'{k} {v}' for k, v in want.items())})",
            hint="an older ibdiag bench serve ignores --verb/--qps/--bidir/--tclass/--sl: run the same ibdiag version on both hosts",
        )


def read_ends(ready: dict[str, Any], details: dict[str, Any], peer: str) -> tuple[RdmaEnd, RdmaEnd]:
    """(client, server) ends: this client's ``details`` and what the server sent in ``ready``."""
    try:
        server_end = RdmaEnd.read(Fields(ready, "ready"))
    except ValueError as e:
        raise ProtocolError(f"{peer} sent invalid device details: {e}") from None
    return RdmaEnd.read(Fields(details, "client")), server_end


def rdma_path(req: RunRequest, client: RdmaEnd, server: RdmaEnd, mtu: int | None) -> RdmaPath:
    """The path a run's result describes: both ends, the path MTU (None: not known) and the options."""
    return RdmaPath(
        client,
        server,
        mtu,
        req.tx_depth,
        verb=req.verb,
        qps=req.qps,
        inline=req.inline,
        tclass=req.tclass,
        sl=req.sl,
    )

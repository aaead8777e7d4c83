"""Which device, port and GID an end uses: the first ACTIVE port (or ``--device``/``--ib-port``), then
the GID perftest would pick (or ``--gid-index``).

The one place that choice is made. The perftest engine takes it from sysfs alone (:func:`select_device`);
ibdiag's own RDMA engine makes the same choice over the devices pyverbs lists and adds the port's
message size limit (:func:`~ibdiag.bench.p2p.rdma.session.select_rdma`). Pure functions of the ports
read, tested on sysfs fixtures.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ibdiag.bench.p2p.rdma import verbs
from ibdiag.errors import CannotRunError, UsageError
from ibdiag.node.discover import list_adapters, list_ports, natural_key, read_port
from ibdiag.node.model import Gid, Port
from ibdiag.node.sysfs import SysfsRoot

ROCE_V2 = "RoCE v2"
ROCE_V1 = "IB/RoCE v1"


def ensure_port_active(device: str, port: int, state: str | None, phys_state: str | None) -> None:
    """CannotRunError (exit 3) unless the port is ACTIVE (``ibstat``'s ``State: Active``)."""
    if state == "ACTIVE":
        return
    phys = f", physical state {phys_state}" if phys_state else ""
    raise CannotRunError(
        f"port {port} of {device} is not active (state {state or 'unknown'}{phys})",
        hint="check the cable and the switch port (ibdiag topo, ibstat); on InfiniBand a subnet manager must be running; or pick another --device/--ib-port",
    )


def choose_device(ports: Sequence[Port], device: str | None) -> Port:
    """The port to use: ``device``'s, or the first ACTIVE one among ``ports`` (in device order).

    ``ports`` holds one :class:`~ibdiag.node.model.Port` per RDMA device (the ``--ib-port`` of each),
    read from sysfs like ``ibdiag topo`` does.
    """
    if device is not None:
        for p in ports:
            if p.adapter == device:
                ensure_port_active(p.adapter, p.port, p.state, p.phys_state)
                return p
        names = ", ".join(p.adapter for p in ports) or "none"
        raise CannotRunError(
            f"no RDMA device named {device} with that port",
            hint=f"devices here: {names} (ibv_devices)",
        )
    for p in ports:
        if p.active:
            return p
    states = (
        ", ".join(f"{p.adapter} port {p.port} {p.state or 'unknown'}" for p in ports)
        or "no RDMA devices"
    )
    raise CannotRunError(
        f"no active RDMA port ({states})",
        hint="bring a link up, or name one with --device and --ib-port",
    )


@dataclass(frozen=True)
class GidChoice:
    index: int | None
    """GID table index; None on InfiniBand without a GRH (LID routing)."""
    gid: str | None
    type: str | None
    reason: str


def _gid_rank(g: Gid) -> tuple[int, int]:
    # perftest (get_best_gid_index): RoCE v2 over v1; among equals an IPv4-mapped GID, then a
    # global IPv6 one, link-local last; the lowest index breaks ties.
    v2 = 0 if g.type == ROCE_V2 else 1
    if g.is_ipv4_mapped:
        scope = 0
    elif not g.gid.lower().startswith("fe80"):
        scope = 1
    else:
        scope = 2
    return (v2, scope)


def choose_gid(port: Port, requested: int | None = None) -> GidChoice:
    """The source GID for ``port``: ``requested`` (``--gid-index``) if it is populated, else automatic.

    RoCE (link layer Ethernet) needs a GID: the IPv4-mapped RoCE v2 one when there is one, as
    perftest picks. InfiniBand routes by LID inside a subnet and uses no GRH unless an index is given.
    """
    by_index = {g.index: g for g in port.gids}
    where = f"{port.adapter} port {port.port}"
    if requested is not None:
        g = by_index.get(requested)
        if g is None:
            populated = ", ".join(str(i) for i in sorted(by_index)) or "none"
            raise UsageError(
                f"--gid-index {requested}: no such GID on {where}",
                hint=f"populated GID indices: {populated} (show_gids, /sys/class/infiniband/{port.adapter}/ports/{port.port}/gids)",
            )
        return GidChoice(g.index, g.gid, g.type, f"--gid-index {requested}")
    if port.link_layer != "Ethernet":
        return GidChoice(None, None, None, "InfiniBand: LID routing, no GRH")
    if not port.gids:
        netdev = port.netdev or "the port's netdev"
        raise CannotRunError(
            f"{where} (RoCE) has no usable GID",
            hint=f"configure an IP address on {netdev}; RoCE v2 GIDs follow the netdev's addresses",
        )
    best = min(port.gids, key=lambda g: (_gid_rank(g), g.index))
    kind = (
        "IPv4-mapped"
        if best.is_ipv4_mapped
        else ("link-local" if best.gid.lower().startswith("fe80") else "IPv6")
    )
    return GidChoice(best.index, best.gid, best.type, f"auto: {best.type or 'unknown type'} {kind}")


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


def select_rdma(
    sysfs: SysfsRoot, device: str | None, ib_port: int, gid_index: int | None
) -> RdmaSelection:
    """Device (given or the first with an ACTIVE port), then the GID (given or perftest's choice)."""
    names = sorted(verbs.list_devices(), key=natural_key)
    ports = [read_port(sysfs, name, ib_port) for name in names]
    port = choose_device(ports, device)
    gid = choose_gid(port, gid_index)
    max_msg = verbs.port_max_msg_bytes(port.adapter, port.port)
    return RdmaSelection(
        port.adapter, port.port, gid.index, gid.gid, gid.reason, port.link_layer, max_msg
    )

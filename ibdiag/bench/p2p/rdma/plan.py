"""The RDMA data path's decisions: device, port and GID, the queue-pair details both ends exchange, and
the RC connection plan (what ``ib_write_bw``/``ib_read_bw``/``ib_send_bw`` set up before measuring).

Pure functions, tested on sysfs fixtures; the library calls are in :mod:`ibdiag.bench.p2p.rdma.verbs` and the
measuring loops (WRITE, READ, SEND; bandwidth and latency) in :mod:`ibdiag.bench.p2p.rdma.loops`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ibdiag.errors import CannotRunError, UsageError
from ibdiag.node.model import Gid, Port
from ibdiag.units import format_bytes

#: ``ibv_qp_attr`` values perftest uses for RC: ACK timeout 4.096 µs * 2^14 ≈ 67 ms, 7 retries,
#: 7 RNR retries (infinite), RNR timer 12 (0.64 ms), one outstanding RDMA READ/atomic.
QP_TIMEOUT = 14
QP_RETRY_CNT = 7
QP_RNR_RETRY = 7
QP_MIN_RNR_TIMER = 12
#: Hop limit in the GRH (RoCE v2 maps it to the IP TTL).
HOP_LIMIT = 64
#: Outstanding RDMA READs per QP for ``--verb read`` (perftest asks the device's max_qp_rd_atom; 16 on
#: ConnectX). The device's own limits cap it (:func:`plan_connection` ``rd_atomic``).
READ_RD_ATOMIC = 16
#: Most queue pairs a peer may announce (``params.MAX_QPS``).
MAX_QPNS = 64

MTUS = (256, 512, 1024, 2048, 4096)
#: ``struct ibv_sge``'s ``length`` is a ``uint32_t``: one WRITE carries at most 4 GiB - 1 bytes
#: (larger sizes raise OverflowError inside pyverbs).
SGE_MAX_BYTES = 2**32 - 1
_GID_RE = re.compile(r"^[0-9a-fA-F]{4}(:[0-9a-fA-F]{4}){7}$")

ROCE_V2 = "RoCE v2"
ROCE_V1 = "IB/RoCE v1"


# --- device, port and GID choice -----------------------------------------------------------------


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


def _size_limit(max_msg_bytes: int | None) -> int:
    return SGE_MAX_BYTES if not max_msg_bytes else min(SGE_MAX_BYTES, max_msg_bytes)


def _limit_text(n: int) -> str:
    return format_bytes(n) if n & (n - 1) == 0 else f"{n} bytes"


def message_size_problem(
    sizes: Sequence[int], max_msg_bytes: int | None, device: str, port: int
) -> str | None:
    """Why a size cannot be one RDMA WRITE on ``device``/``port``, or None when all can.

    The limit is the port's ``max_msg_sz`` (``ibv_devinfo -v``; 0 or None: unknown) and the
    32-bit SGE length, whichever is smaller.
    """
    limit = _size_limit(max_msg_bytes)
    too_big = [s for s in sizes if s > limit]
    if not too_big:
        return None
    source = "its max_msg_sz" if limit == max_msg_bytes else "the 32-bit SGE length"
    return f"a {_limit_text(max(too_big))} message is larger than one RDMA WRITE on {device} port {port} can carry ({_limit_text(limit)}, {source})"


def check_message_sizes(
    sizes: Sequence[int], max_msg_bytes: int | None, device: str, port: int
) -> None:
    """UsageError (exit 2) when a size is larger than :func:`message_size_problem` allows."""
    problem = message_size_problem(sizes, max_msg_bytes, device, port)
    if problem:
        limit = _size_limit(max_msg_bytes)
        raise UsageError(
            problem,
            hint=f"use sizes up to {_limit_text(limit)} with --transport rdma, e.g. --sizes 8:{limit}",
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


# --- what the peers exchange ---------------------------------------------------------------------


@dataclass(frozen=True)
class QpInfo:
    """One side's queue pair, as perftest prints ``local address: LID ... QPN ... PSN ... RKey ... VAddr``."""

    lid: int
    qpn: int
    psn: int
    gid: str | None
    link_layer: str
    rkey: int
    addr: int
    length: int
    """Bytes the peer may write at ``addr`` (the receive half of the registered buffer)."""
    mtu_bytes: int
    """The port's active MTU."""
    qpns: tuple[int, ...] = ()
    """Every queue pair's number (``--qps``); empty = just ``qpn``."""

    @property
    def all_qpns(self) -> tuple[int, ...]:
        return self.qpns or (self.qpn,)

    def to_json(self) -> dict[str, Any]:
        return {
            "lid": self.lid,
            "qpn": self.qpn,
            "qpns": list(self.all_qpns),
            "psn": self.psn,
            "gid": self.gid,
            "link_layer": self.link_layer,
            "rkey": self.rkey,
            "addr": self.addr,
            "length": self.length,
            "mtu": self.mtu_bytes,
        }

    @classmethod
    def from_json(cls, doc: Any) -> QpInfo:
        """Validate what the peer sent; ValueError names the bad field."""
        if not isinstance(doc, dict):
            raise ValueError("queue pair details are not an object")

        def num(key: str, bits: int) -> int:
            v = doc.get(key)
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < 2**bits:
                raise ValueError(f"{key} must be an unsigned {bits}-bit integer, not {v!r}")
            return v

        gid = doc.get("gid")
        if gid is not None and (not isinstance(gid, str) or not _GID_RE.match(gid)):
            raise ValueError(f"gid {gid!r} is not a GID")
        link = doc.get("link_layer")
        if link not in ("InfiniBand", "Ethernet"):
            raise ValueError(f"link_layer {link!r} is not InfiniBand or Ethernet")
        mtu = doc.get("mtu")
        if mtu not in MTUS:
            raise ValueError(f"mtu {mtu!r} is not one of {MTUS}")
        qpns = doc.get("qpns", [])
        if (
            not isinstance(qpns, list)
            or len(qpns) > MAX_QPNS
            or any(
                isinstance(q, bool) or not isinstance(q, int) or not 0 <= q < 2**24 for q in qpns
            )
        ):
            raise ValueError(f"qpns must be a list of at most {MAX_QPNS} queue pair numbers")
        if qpns and qpns[0] != doc.get("qpn"):
            raise ValueError("qpns must start with qpn")
        return cls(
            lid=num("lid", 16),
            qpn=num("qpn", 24),
            psn=num("psn", 24),
            gid=gid,
            link_layer=link,
            rkey=num("rkey", 32),
            addr=num("addr", 64),
            length=num("length", 50),
            mtu_bytes=mtu,
            qpns=tuple(qpns) if len(qpns) > 1 else (),
        )


@dataclass(frozen=True)
class ConnectPlan:
    """Every attribute of the INIT -> RTR -> RTS transitions of one RC queue pair."""

    port_num: int
    pkey_index: int
    path_mtu_bytes: int
    dest_qp_num: int
    rq_psn: int
    sq_psn: int
    dlid: int
    is_global: bool
    dgid: str | None
    sgid_index: int | None
    hop_limit: int
    traffic_class: int
    sl: int
    timeout: int
    retry_cnt: int
    rnr_retry: int
    min_rnr_timer: int
    max_rd_atomic: int
    max_dest_rd_atomic: int
    remote_read: bool = False
    """Let the peer READ this side's buffer (``--verb read``: ``IBV_ACCESS_REMOTE_READ``)."""


def plan_connection(
    local: QpInfo,
    remote: QpInfo,
    *,
    port_num: int,
    gid_index: int | None,
    needed_bytes: int,
    lane: int = 0,
    traffic_class: int = 0,
    sl: int = 0,
    rd_atomic: int = 1,
    remote_read: bool = False,
) -> ConnectPlan:
    """The RC attributes of queue pair ``lane`` towards the peer's ``lane``-th; CannotRunError when the
    two ends cannot talk.

    Path MTU = the smaller active MTU of the two ports (perftest does the same). A GRH is used
    on RoCE always, and on InfiniBand when a GID index was chosen; ``traffic_class`` goes in it
    (``--tclass``), ``sl`` in the address vector (``--sl``). ``rd_atomic``: outstanding RDMA READs
    each way (``--verb read``), already capped by both devices' limits.
    """
    if lane >= len(remote.all_qpns):
        raise CannotRunError(
            f"the peer set up {len(remote.all_qpns)} queue pair(s), fewer than the {lane + 1} this run needs",
            hint="both sides must run the same ibdiag version",
        )
    if local.link_layer != remote.link_layer:
        raise CannotRunError(
            f"link layers differ: this side is {local.link_layer}, the server's port is {remote.link_layer}",
            hint="RDMA needs both ends on the same fabric: pick matching --device on both sides",
        )
    if remote.length < needed_bytes:
        raise CannotRunError(
            f"the peer registered {remote.length} bytes, fewer than the {needed_bytes} this run needs",
            hint="both sides must run the same ibdiag version",
        )
    is_global = local.link_layer == "Ethernet" or gid_index is not None
    if is_global and (remote.gid is None or gid_index is None):
        raise CannotRunError(
            "RoCE needs a GID on both ends and one side has none"
            if local.link_layer == "Ethernet"
            else "--gid-index was given here but the peer sent no GID",
            hint="configure an IP address on the RoCE netdev, or give --gid-index on both sides",
        )
    if not is_global and remote.lid == 0:
        raise CannotRunError(
            "the peer's InfiniBand port has LID 0 (no subnet manager has configured it)",
            hint="start a subnet manager (opensm) on the fabric; ibstat shows the LID",
        )
    return ConnectPlan(
        port_num=port_num,
        pkey_index=0,
        path_mtu_bytes=min(local.mtu_bytes, remote.mtu_bytes),
        dest_qp_num=remote.all_qpns[lane],
        rq_psn=remote.psn,
        sq_psn=local.psn,
        dlid=remote.lid,
        is_global=is_global,
        dgid=remote.gid if is_global else None,
        sgid_index=gid_index if is_global else None,
        hop_limit=HOP_LIMIT,
        traffic_class=traffic_class,
        sl=sl,
        timeout=QP_TIMEOUT,
        retry_cnt=QP_RETRY_CNT,
        rnr_retry=QP_RNR_RETRY,
        min_rnr_timer=QP_MIN_RNR_TIMER,
        max_rd_atomic=rd_atomic,
        max_dest_rd_atomic=rd_atomic,
        remote_read=remote_read,
    )

"""What the two ends of an RDMA run exchange and the RC connection plan they build from it (what
``ib_write_bw``/``ib_read_bw``/``ib_send_bw`` set up before measuring): each side's queue pairs
(:class:`QpInfo`), the run options a server echoes and the ends a result describes, whether every size
fits one work request, and the INIT -> RTR -> RTS attributes (:func:`plan_connection`).

Pure functions; the device, port and GID each end uses are chosen in :mod:`ibdiag.bench.p2p.rdma.device`,
the library calls are in :mod:`ibdiag.bench.p2p.rdma.verbs` and the measuring loops (WRITE, READ, SEND;
bandwidth and latency) in :mod:`ibdiag.bench.p2p.rdma.loops`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ibdiag.bench.p2p.control.protocol import ProtocolError
from ibdiag.bench.p2p.params import RunRequest
from ibdiag.bench.results.p2p_meta import RdmaEnd, RdmaPath
from ibdiag.errors import CannotRunError, UsageError
from ibdiag.jsonread import Fields
from ibdiag.units import format_bytes

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


# --- what one work request can carry ---------------------------------------------------------


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


# --- what the server echoes, and the ends a result describes ---------------------------------------


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

"""RoCE lossless settings on the ports NCCL uses: PFC on the priority the traffic lands in, ECN (DCQCN),
rdma_cm's defaults, MTU. A setting that could not be read is unknown: no finding, ``null`` in JSON.

The traffic's priority: NCCL sends with traffic class ``NCCL_IB_TC`` (default 0) and service level
``NCCL_IB_SL`` (default 0). Under DSCP trust the priority is the application table's entry for DSCP =
TC >> 2, else mlx5's default DSCP >> 3 (en_dcbnl.c ``mlx5e_dcbnl_init_app``); under PCP trust it is the
802.1p priority, the SL. Ids: ``topo.roce_pfc``, ``topo.roce_ecn``, ``topo.roce_cm``, ``topo.roce_mtu``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ibdiag.findings.model import Finding, Severity
from ibdiag.node.dcb import PRIORITIES, DcbState
from ibdiag.node.model import Port, Topology
from ibdiag.node.roce import RocePort
from ibdiag.topo.checks import CHECKS
from ibdiag.topo.nccl_checks import as_int, opened_ports
from ibdiag.topo.nccl_env import NcclEnv


@dataclass(frozen=True)
class RoceState:
    """One judged RoCE port: its sysfs/configfs settings and its netdev's DCB state."""

    settings: RocePort
    dcb: DcbState

    def to_json(self) -> dict[str, Any]:
        return {**self.settings.to_json(), "dcb": self.dcb.to_json()}


def roce_ports(topo: Topology, env: NcclEnv) -> list[Port]:
    """The RoCE ports NCCL uses here: the GPUs' nearest (every active hardware RoCE port on a node
    without GPUs), among those NCCL_IB_HCA selects."""
    opened = {(p.adapter, p.port) for p in opened_ports(topo, env)}
    pool = (
        list(topo.nccl_ports)
        if topo.gpus
        else [p for a in topo.adapters for p in a.ports if p.active]
    )
    return [
        p
        for p in pool
        if p.link_layer == "Ethernet"
        and not p.software
        and p.netdev
        and (p.adapter, p.port) in opened
    ]


def _dscp_prio(dcb: DcbState, dscp: int) -> int:
    table = dict(dcb.dscp_prio or ())
    return table.get(dscp, dscp >> 3)


def priority_of(dcb: DcbState, tos: int, sl: int) -> tuple[int | None, str]:
    """(priority of traffic sent with ToS ``tos`` and SL ``sl``, how it was derived); None: unknown trust."""
    if dcb.trust == "dscp":
        return _dscp_prio(dcb, tos >> 2), f"trust dscp, DSCP {tos >> 2} (ToS {tos})"
    if dcb.trust == "pcp":
        return sl & 7, f"trust pcp, SL {sl}"
    return None, "trust mode unknown"


def _tc_for(dcb: DcbState, prio: int) -> str:
    """The setting that puts NCCL's traffic on ``prio``."""
    if dcb.trust == "pcp":
        return f"NCCL_IB_SL={prio}"
    dscp = next((d for d, p in dcb.dscp_prio or () if p == prio), None)
    if dscp is None:
        dscp = next((d for d in range(64) if _dscp_prio(dcb, d) == prio), None)
    if dscp is None:
        return f"dscp-prio D:{prio} (no DSCP maps to priority {prio})"
    return f"NCCL_IB_TC={dscp << 2}"


def _tos_sl(env: NcclEnv) -> tuple[int, int]:
    tc, sl = as_int(env.get("NCCL_IB_TC")), as_int(env.get("NCCL_IB_SL"))
    return (
        tc if tc is not None and 0 <= tc <= 255 else 0,
        sl if sl is not None and 0 <= sl <= 15 else 0,
    )


@CHECKS.check(
    "topo.roce_pfc",
    "RoCE traffic's priority has PFC off while another priority has it: fail; PFC off everywhere (lossy RoCE): warn",
)
def roce_pfc(states: list[RoceState], env: NcclEnv) -> list[Finding]:
    out = []
    tos, sl = _tos_sl(env)
    for s in states:
        pfc = s.dcb.pfc
        prio, how = priority_of(s.dcb, tos, sl)
        if pfc is None or prio is None:
            continue
        on = [i for i, e in enumerate(pfc) if e]
        subject = s.settings.name
        if pfc[prio]:
            out.append(
                Finding(
                    "topo.roce_pfc",
                    Severity.OK,
                    subject,
                    f"PFC on priority {prio} ({how})",
                    value=prio,
                )
            )
        elif on:
            fits = _tc_for(s.dcb, on[0])
            out.append(
                Finding(
                    "topo.roce_pfc",
                    Severity.FAIL,
                    subject,
                    f"NCCL's RoCE traffic lands in priority {prio} ({how}) but PFC is on priority "
                    f"{','.join(map(str, on))} of {s.dcb.netdev}: it is not lossless, drops become retransmissions",
                    value=prio,
                    limit=fits,
                    hint=f"set {fits} (priority {on[0]}), or `dcb pfc set dev {s.dcb.netdev} prio-pfc {prio}:on` "
                    "to match the switches",
                )
            )
        else:
            out.append(
                Finding(
                    "topo.roce_pfc",
                    Severity.WARN,
                    subject,
                    f"PFC is off on every priority of {s.dcb.netdev} (traffic on priority {prio}, {how}): lossy RoCE, "
                    "relying on ECN and retransmission alone",
                    value=prio,
                    limit=f"prio-pfc {prio}:on",
                    hint=f"`dcb pfc set dev {s.dcb.netdev} prio-pfc {prio}:on` with PFC on that priority on the switches, "
                    "unless the fabric is designed lossy (then keep ECN on: topo.roce_ecn)",
                )
            )
    return out


@CHECKS.check(
    "topo.roce_ecn",
    "ECN (DCQCN) notification or reaction point off on the traffic's priority: warn",
)
def roce_ecn(states: list[RoceState], env: NcclEnv) -> list[Finding]:
    out = []
    tos, sl = _tos_sl(env)
    for s in states:
        np_, rp = s.settings.ecn_np, s.settings.ecn_rp
        if np_ is None or rp is None:
            continue
        prio, _ = priority_of(s.dcb, tos, sl)
        prios = [prio] if prio is not None else list(range(PRIORITIES))
        off = [
            (p, pt)
            for p in prios
            for pt, flags in (("roce_np", np_), ("roce_rp", rp))
            if not flags[p]
        ]
        netdev = s.settings.port.netdev
        if not off:
            out.append(
                Finding(
                    "topo.roce_ecn",
                    Severity.OK,
                    s.settings.name,
                    f"ECN on for priority {','.join(map(str, prios))}",
                )
            )
            continue
        what = ", ".join(f"{pt} priority {p}" for p, pt in off)
        out.append(
            Finding(
                "topo.roce_ecn",
                Severity.WARN,
                s.settings.name,
                f"ECN is off for {what} on {netdev}: DCQCN does not slow senders on congestion, so queues fill "
                "until PFC pauses (or drops on a lossy fabric)",
                value=0,
                limit=1,
                hint="; ".join(
                    f"echo 1 > /sys/class/net/{netdev}/ecn/{pt}/enable/{p}" for p, pt in off[:4]
                ),
            )
        )
    return out


@CHECKS.check(
    "topo.roce_cm",
    "rdma_cm's default RoCE mode is v1, or its default ToS lands on a priority without PFC: warn",
)
def roce_cm(states: list[RoceState]) -> list[Finding]:
    out = []
    for s in states:
        base = f"/sys/kernel/config/rdma_cm/{s.settings.port.adapter}/ports/{s.settings.port.port}"
        if s.settings.cm_mode == "IB/RoCE v1":
            out.append(
                Finding(
                    "topo.roce_cm",
                    Severity.WARN,
                    s.settings.name,
                    "rdma_cm's default RoCE mode is v1 (not routable, no DSCP): rdma_cm users (perftest -R, UCX, MPI) "
                    "connect over RoCE v1",
                    value=s.settings.cm_mode,
                    limit="RoCE v2",
                    hint=f"echo 'RoCE v2' > {base}/default_roce_mode",
                )
            )
        tos, pfc = s.settings.cm_tos, s.dcb.pfc
        # Under PCP trust the ToS does not pick the priority (the VLAN egress map does): judged under DSCP only.
        if tos is None or pfc is None or not any(pfc) or s.dcb.trust != "dscp":
            continue
        prio, how = priority_of(s.dcb, tos, 0)
        if prio is not None and not pfc[prio]:
            on = next(i for i, e in enumerate(pfc) if e)
            tc = _tc_for(s.dcb, on)
            fits = int(tc.split("=")[1]) if tc.startswith("NCCL_IB_TC=") else None
            out.append(
                Finding(
                    "topo.roce_cm",
                    Severity.WARN,
                    s.settings.name,
                    f"rdma_cm's default ToS {tos} lands on priority {prio} ({how}), which has no PFC",
                    value=tos,
                    limit=fits,
                    hint=f"echo {fits} > {base}/default_roce_tos"
                    if fits is not None
                    else "use DSCP trust",
                )
            )
    return out


@CHECKS.check("topo.roce_mtu", "netdev MTU gives the RoCE port an active MTU below 4096: warn")
def roce_mtu(states: list[RoceState]) -> list[Finding]:
    out = []
    for s in states:
        mtu, active = s.settings.mtu, s.settings.active_mtu
        if mtu is None:
            continue
        if active == 4096:
            out.append(
                Finding(
                    "topo.roce_mtu",
                    Severity.OK,
                    s.settings.name,
                    f"MTU {mtu}, RoCE active MTU 4096",
                    value=mtu,
                )
            )
            continue
        out.append(
            Finding(
                "topo.roce_mtu",
                Severity.WARN,
                s.settings.name,
                f"{s.settings.port.netdev} has MTU {mtu}: the RoCE port's active MTU is {active or 'below 256'} "
                "(the netdev MTU less 96 bytes of RoCE headers, rounded down to an IB MTU): more packets per message",
                value=mtu,
                limit=9000,
                hint=f"`ip link set dev {s.settings.port.netdev} mtu 9000` (at least 4192 for a 4096 RoCE MTU), "
                "matching the switches",
            )
        )
    return out

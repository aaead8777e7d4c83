"""NCCL's transport settings against the node: interfaces, traffic class and service level, the network
NCCL is told to use, and tuning knobs NCCL's documentation advises against leaving set.

Ids: ``topo.nccl_socket_ifname``, ``topo.nccl_ib_tc_sl``, ``topo.nccl_net``, ``topo.nccl_tuning``
(docs/configuration-checks.md).
"""

from __future__ import annotations

from ibdiag.findings.model import Finding, Severity
from ibdiag.node.model import Topology
from ibdiag.node.netdev import Netdev
from ibdiag.text import safe_value
from ibdiag.topo.checks import CHECKS
from ibdiag.topo.nccl_checks import as_int, opened_ports
from ibdiag.topo.nccl_env import NcclEnv
from ibdiag.topo.nccl_match import parse_list

#: Interfaces NCCL leaves out when NCCL_SOCKET_IFNAME is unset (src/misc/socket.cc: "^docker,lo" by default).
_DEFAULT_SKIP = ("docker", "lo", "virbr")


def _ifname_fits(topo: Topology, netdevs: tuple[Netdev, ...]) -> str | None:
    """``=if1,if2``: the up interfaces NCCL may bootstrap over, the GPUs' nearest ports' netdevs first."""
    up = [n.name for n in netdevs if n.up and not n.name.startswith(_DEFAULT_SKIP)]
    rdma = [p.netdev for p in topo.nccl_ports if p.netdev in up]
    names = list(dict.fromkeys([*(n for n in rdma if n), *up]))
    return "=" + ",".join(names) if names else None


@CHECKS.check(
    "topo.nccl_socket_ifname",
    "NCCL_SOCKET_IFNAME matches no interface that is up: fail; an entry that matches nothing: warn",
)
def nccl_socket_ifname(topo: Topology, env: NcclEnv, netdevs: tuple[Netdev, ...]) -> list[Finding]:
    value = env.get("NCCL_SOCKET_IFNAME")
    if value is None or not value.strip():
        return []
    names = parse_list(value)
    fits = _ifname_fits(topo, netdevs)
    chosen = [n for n in netdevs if names.selects(n.name)]
    usable = [n.name for n in chosen if n.up]
    hint = f"use NCCL_SOCKET_IFNAME={fits}" if fits else "this node has no interface that is up"
    if not usable:
        have = ", ".join(f"{n.name} ({n.operstate or 'unknown'})" for n in netdevs) or "none"
        return [
            Finding(
                "topo.nccl_socket_ifname",
                Severity.FAIL,
                "NCCL_SOCKET_IFNAME",
                f"NCCL_SOCKET_IFNAME={safe_value(value)} matches no interface that is up (this node has: {have}): "
                "NCCL's bootstrap finds no socket interface",
                value=value,
                limit=fits,
                hint=hint,
            )
        ]
    out = []
    if not names.exclude:
        for entry in names.entries:
            if not any(names.matches_name(entry, n.name) for n in netdevs):
                out.append(
                    Finding(
                        "topo.nccl_socket_ifname",
                        Severity.WARN,
                        "NCCL_SOCKET_IFNAME",
                        f"NCCL_SOCKET_IFNAME={safe_value(value)}: {safe_value(entry.name)} matches no interface of this node",
                        value=value,
                        limit=fits,
                        hint=hint,
                    )
                )
    return out or [
        Finding(
            "topo.nccl_socket_ifname",
            Severity.OK,
            "NCCL_SOCKET_IFNAME",
            f"NCCL_SOCKET_IFNAME={safe_value(value)} selects {', '.join(usable)}",
            value=value,
            limit=fits,
        )
    ]


@CHECKS.check(
    "topo.nccl_ib_tc_sl",
    "NCCL_IB_TC outside 0..255, NCCL_IB_SL outside 0..15 (0..7 on RoCE, where it is the priority): fail",
)
def nccl_ib_tc_sl(topo: Topology, env: NcclEnv) -> list[Finding]:
    out: list[Finding] = []
    ports = opened_ports(topo, env)
    roce = any(p.link_layer == "Ethernet" for p in ports)
    tc_text = env.get("NCCL_IB_TC")
    if tc_text is not None:
        tc = as_int(tc_text)
        if tc is None or not 0 <= tc <= 255:
            out.append(
                Finding(
                    "topo.nccl_ib_tc_sl",
                    Severity.FAIL,
                    "NCCL_IB_TC",
                    f"NCCL_IB_TC={safe_value(tc_text)} is not a traffic class (0..255: DSCP << 2 | ECN bits)",
                    value=tc_text,
                    limit="0..255",
                    hint="RoCE: NCCL_IB_TC = DSCP * 4 (DSCP 26 -> 104, 106 with ECT); see topo.roce_pfc for the priority it maps to",
                )
            )
    sl_text = env.get("NCCL_IB_SL")
    if sl_text is not None:
        sl = as_int(sl_text)
        top = 7 if roce else 15
        if sl is None or not 0 <= sl <= top:
            out.append(
                Finding(
                    "topo.nccl_ib_tc_sl",
                    Severity.FAIL,
                    "NCCL_IB_SL",
                    f"NCCL_IB_SL={safe_value(sl_text)} is not a service level "
                    + (
                        "a RoCE port carries (0..7: it becomes the 802.1p priority)"
                        if roce
                        else "(0..15)"
                    ),
                    value=sl_text,
                    limit=f"0..{top}",
                    hint="use the SL (IB) or priority (RoCE) your fabric reserves for this job; unset means 0",
                )
            )
    return out


@CHECKS.check(
    "topo.nccl_net",
    "NCCL_IB_DISABLE=1 or NCCL_NET=Socket on a node with active RDMA ports: fail",
)
def nccl_net(topo: Topology, env: NcclEnv) -> list[Finding]:
    active = [p for a in topo.adapters for p in a.ports if p.active]
    if not active:
        return []
    out = []
    disable = env.get("NCCL_IB_DISABLE")
    if disable is not None and as_int(disable) not in (None, 0):
        out.append(
            Finding(
                "topo.nccl_net",
                Severity.FAIL,
                "NCCL_IB_DISABLE",
                f"NCCL_IB_DISABLE={safe_value(disable)} with {len(active)} active RDMA port(s): NCCL falls back to TCP sockets",
                value=disable,
                limit="0",
                hint="unset NCCL_IB_DISABLE (or set 0); if RDMA was disabled to work around a hang, find the cause (ibdiag topo, counters)",
            )
        )
    net = env.get("NCCL_NET")
    if net is not None and net.strip().lower() == "socket":
        out.append(
            Finding(
                "topo.nccl_net",
                Severity.FAIL,
                "NCCL_NET",
                f"NCCL_NET={safe_value(net)} with {len(active)} active RDMA port(s): NCCL uses TCP sockets, not RDMA",
                value=net,
                limit="IB",
                hint="unset NCCL_NET (NCCL picks IB when RDMA ports are up) or set NCCL_NET=IB",
            )
        )
    return out


_TUNING_REASON = (
    "NCCL's documentation: forcing it is for debugging; NCCL picks per size and topology, and a forced "
    "choice is slower elsewhere (or fails where it is not supported)"
)


@CHECKS.check(
    "topo.nccl_tuning",
    "NCCL_ALGO / NCCL_PROTO forced, or NCCL_MAX_NCHANNELS / NCCL_MIN_NCHANNELS below the rails NCCL should use: warn",
)
def nccl_tuning(topo: Topology, env: NcclEnv) -> list[Finding]:
    out = []
    for name in ("NCCL_ALGO", "NCCL_PROTO"):
        value = env.get(name)
        if value is not None and value.strip():
            out.append(
                Finding(
                    "topo.nccl_tuning",
                    Severity.WARN,
                    name,
                    f"{name}={safe_value(value)} forces NCCL's choice: {_TUNING_REASON}",
                    value=value,
                    limit=None,
                    hint=f"unset {name} in production",
                )
            )
    rails = len(topo.nccl_ports)
    for name in ("NCCL_MAX_NCHANNELS", "NCCL_MIN_NCHANNELS"):
        value = env.get(name)
        if value is None:
            continue
        n = as_int(value)
        if n is None or n < 1:
            out.append(
                Finding(
                    "topo.nccl_tuning",
                    Severity.WARN,
                    name,
                    f"{name}={safe_value(value)} is not a channel count",
                    value=value,
                    limit=None,
                    hint=f"unset {name}",
                )
            )
        elif name == "NCCL_MAX_NCHANNELS" and n < max(rails, 2):
            out.append(
                Finding(
                    "topo.nccl_tuning",
                    Severity.WARN,
                    name,
                    f"NCCL_MAX_NCHANNELS={n}: fewer channels than the {max(rails, 2)} "
                    f"{'rails' if rails >= 2 else 'channels NCCL needs to overlap'}: some adapters stay idle and bandwidth drops",
                    value=n,
                    limit=max(rails, 2),
                    hint=f"unset NCCL_MAX_NCHANNELS, or at least {max(rails, 2)}",
                )
            )
    return out

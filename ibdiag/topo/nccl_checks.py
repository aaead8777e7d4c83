"""NCCL's environment against the node: does what the job sets fit the GPUs, adapters, GIDs and interfaces?

Each check judges one variable (or a family) only when the job sets it; every finding names the value
that fits in ``limit`` and in its hint. Ids (documented in docs/configuration-checks.md):

* ``topo.nccl_ib_hca``        NCCL_IB_HCA leaves out a GPU's nearest port (fail) or a tied one (warn),
                              names a missing or down device (fail), or a prefix selects others too (warn)
* ``topo.nccl_gid_index``     NCCL_IB_GID_INDEX not a RoCE v2 IPv4 GID on a selected RoCE port: fail
* ``topo.nccl_gdr``           NCCL_NET_GDR_LEVEL / NCCL_NET_GDR_READ turn GPUDirect RDMA off where the path
                              allows it, or on across NUMA nodes: warn
* ``topo.nccl_socket_ifname`` NCCL_SOCKET_IFNAME matches no interface that is up: fail
* ``topo.nccl_ib_tc_sl``      NCCL_IB_TC / NCCL_IB_SL outside what the ports carry: fail
* ``topo.nccl_net``           NCCL_IB_DISABLE=1 or NCCL_NET=Socket with active RDMA ports: fail
* ``topo.nccl_tuning``        forced NCCL_ALGO / NCCL_PROTO, too few channels for the rails: warn
"""

from __future__ import annotations

from ibdiag.findings.model import Finding, Severity
from ibdiag.node.model import PathClass, Port, Topology, port_name
from ibdiag.text import safe_value
from ibdiag.topo.checks import CHECKS
from ibdiag.topo.nccl_env import NcclEnv
from ibdiag.topo.nccl_match import NameList, parse_list, selected_ports

_NCCL_ENV_DOC = "NCCL's environment variables: https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html"


def _all_ports(topo: Topology) -> list[Port]:
    return [p for a in topo.adapters for p in a.ports]


def opened_ports(topo: Topology, env: NcclEnv) -> list[Port]:
    """The ports NCCL opens under the job's NCCL_IB_HCA (every active port when unset)."""
    chosen = set(
        selected_ports(
            env.get("NCCL_IB_HCA"), ((p.adapter, p.port, p.active) for p in _all_ports(topo))
        )
    )
    return [p for p in _all_ports(topo) if (p.adapter, p.port) in chosen]


def as_int(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text.strip(), 10)
    except ValueError:
        return None


# --- NCCL_IB_HCA ---------------------------------------------------------------------------------


def _hca_entries(topo: Topology, value: str, names: NameList) -> list[Finding]:
    """Entries naming nothing, naming only down ports, or prefixes that reach other devices."""
    out: list[Finding] = []
    fits = topo.nccl_ib_hca
    devices = [a.name for a in topo.adapters]
    for entry in names.entries:
        matched = [d for d in devices if names.matches_name(entry, d)]
        ports = [
            p
            for p in _all_ports(topo)
            if p.adapter in matched and (entry.port is None or p.port == entry.port)
        ]
        if not ports:
            out.append(
                Finding(
                    "topo.nccl_ib_hca",
                    Severity.WARN if names.exclude else Severity.FAIL,
                    "NCCL_IB_HCA",
                    f"NCCL_IB_HCA={safe_value(value)}: entry {safe_value(str(entry))} names no device or port of this node"
                    f" (it has {', '.join(devices) or 'no RDMA device'})",
                    value=value,
                    limit=fits,
                    hint=f"use NCCL_IB_HCA={fits}" if fits else "this node has no active RDMA port",
                )
            )
            continue
        if not names.exclude and not any(p.active for p in ports):
            states = ", ".join(f"{port_name(p)} {p.state or 'unknown'}" for p in ports)
            out.append(
                Finding(
                    "topo.nccl_ib_hca",
                    Severity.FAIL,
                    "NCCL_IB_HCA",
                    f"NCCL_IB_HCA={safe_value(value)}: {safe_value(str(entry))} has no ACTIVE port "
                    f"({states}): NCCL opens none of it",
                    value=value,
                    limit=fits,
                    hint=(f"use NCCL_IB_HCA={fits}; " if fits else "")
                    + "see the port.state findings for why the port is down",
                )
            )
        others = [d for d in matched if d != entry.name]
        if not names.exact and entry.name in devices and others:
            out.append(
                Finding(
                    "topo.nccl_ib_hca",
                    Severity.WARN,
                    "NCCL_IB_HCA",
                    f"NCCL_IB_HCA={safe_value(value)}: without '=' the entry {safe_value(entry.name)} is a prefix and "
                    f"also {'excludes' if names.exclude else 'selects'} {', '.join(others)}",
                    value=value,
                    limit=fits,
                    hint="start the list with '=' for exact names (NCCL_IB_HCA==mlx5_1 or ^=mlx5_1)"
                    + (f"; the value that fits this node: {fits}" if fits else ""),
                )
            )
    return out


def _hca_gpus(topo: Topology, value: str, selected: set[tuple[str, int]]) -> list[Finding]:
    out: list[Finding] = []
    fits = topo.nccl_ib_hca
    for pairing in topo.pairings:
        if not pairing.ports:
            continue
        left = [p for p in pairing.ports if (p.adapter, p.port) not in selected]
        if not left:
            continue
        names = ", ".join(port_name(p) for p in left)
        if len(left) == len(pairing.ports):
            msg = (
                f"NCCL_IB_HCA={safe_value(value)} leaves out GPU{pairing.gpu}'s nearest port(s) {names} "
                f"({pairing.path}): its traffic crosses to a farther adapter, or it has none"
            )
            sev = Severity.FAIL
        else:
            msg = (
                f"NCCL_IB_HCA={safe_value(value)} leaves out {names}, tied nearest to GPU{pairing.gpu} "
                f"({pairing.path}): that port stays idle"
            )
            sev = Severity.WARN
        out.append(
            Finding(
                "topo.nccl_ib_hca",
                sev,
                f"GPU{pairing.gpu}",
                msg,
                value=value,
                limit=fits,
                hint=f"use NCCL_IB_HCA={fits} (every port nearest to a GPU, exact names)",
            )
        )
    return out


@CHECKS.check(
    "topo.nccl_ib_hca",
    "NCCL_IB_HCA leaves out a GPU's nearest port or names a missing/down device: fail; a tied port left out or a prefix that selects others: warn",
)
def nccl_ib_hca(topo: Topology, env: NcclEnv) -> list[Finding]:
    value = env.get("NCCL_IB_HCA")
    if value is None or not value.strip() or not topo.adapters:
        return []  # nothing to select from: NCCL runs over sockets whatever the list says
    names = parse_list(value)
    out = _hca_entries(topo, value, names)
    selected = {(p.adapter, p.port) for p in opened_ports(topo, env)}
    out += _hca_gpus(topo, value, selected)
    if not out:
        out.append(
            Finding(
                "topo.nccl_ib_hca",
                Severity.OK,
                "NCCL_IB_HCA",
                f"NCCL_IB_HCA={safe_value(value)} selects every GPU's nearest port",
                value=value,
                limit=topo.nccl_ib_hca,
            )
        )
    return out


# --- NCCL_IB_GID_INDEX ---------------------------------------------------------------------------


def _v2_ipv4(port: Port) -> list[int]:
    return [g.index for g in port.gids if g.type == "RoCE v2" and g.is_ipv4_mapped]


@CHECKS.check(
    "topo.nccl_gid_index",
    "NCCL_IB_GID_INDEX is not a RoCE v2 IPv4 GID on every selected RoCE port: fail",
)
def nccl_gid_index(topo: Topology, env: NcclEnv) -> list[Finding]:
    value = env.get("NCCL_IB_GID_INDEX")
    if value is None:
        return []
    roce = [p for p in opened_ports(topo, env) if p.link_layer == "Ethernet" and not p.software]
    if not roce:
        return []
    good = [set(_v2_ipv4(p)) for p in roce]
    common = sorted(set.intersection(*good)) if good else []
    fits = str(common[0]) if common else None
    index = as_int(value)
    bad = [p for p, g in zip(roce, good, strict=True) if index is None or index not in g]
    if not bad:
        return [
            Finding(
                "topo.nccl_gid_index",
                Severity.OK,
                "NCCL_IB_GID_INDEX",
                f"GID index {index} is RoCE v2 IPv4 on every selected RoCE port ({len(roce)})",
                value=value,
                limit=fits,
            )
        ]
    out = []
    for p in bad:
        gid = next((g for g in p.gids if g.index == index), None)
        what = (
            f"not a number: {safe_value(value)}"
            if index is None
            else "an empty entry"
            if gid is None
            else f"{gid.type or 'of unknown type'}{', IPv4-mapped' if gid.is_ipv4_mapped else ', not IPv4-mapped'} ({gid.gid})"
        )
        own = _v2_ipv4(p)
        out.append(
            Finding(
                "topo.nccl_gid_index",
                Severity.FAIL,
                port_name(p),
                f"NCCL_IB_GID_INDEX={safe_value(value)} is {what} on {port_name(p)}; its RoCE v2 IPv4 GID is "
                + (
                    f"index {', '.join(map(str, own))}"
                    if own
                    else "missing (no IPv4 address on its netdev?)"
                ),
                value=value,
                limit=fits,
                hint=f"set NCCL_IB_GID_INDEX={fits} (RoCE v2 IPv4 on every selected port), or unset it and let NCCL pick"
                if fits
                else "the selected ports have no common RoCE v2 IPv4 index: unset NCCL_IB_GID_INDEX (NCCL picks per port) "
                "or give every port's netdev an IPv4 address; `show_gids` lists the table",
            )
        )
    return out


# --- GPUDirect RDMA ------------------------------------------------------------------------------

#: NCCL_NET_GDR_LEVEL names, as ranks of :class:`PathClass` (NCCL has no NODE class — its path types
#: are LOC, NVL, NVB, PIX, PXB, PXN, PHB, SYS ... in src/graph/paths.cc — and calls a path across host
#: bridges of one NUMA node PHB, so PHB there covers nvidia-smi's NODE as well).
_GDR_LEVELS = {"LOC": -1, "PIX": 0, "PXB": 1, "PHB": 3, "SYS": 4}


def _gdr_findings(topo: Topology, value: str, level: int) -> list[Finding]:
    out = []
    for pairing in topo.pairings:
        if pairing.path is None:
            continue
        rank = pairing.path.rank
        subject = f"GPU{pairing.gpu}"
        if rank > level and rank <= PathClass.PXB.rank:
            out.append(
                Finding(
                    "topo.nccl_gdr",
                    Severity.WARN,
                    subject,
                    f"NCCL_NET_GDR_LEVEL={safe_value(value)} turns GPUDirect RDMA off for GPU{pairing.gpu}, whose nearest "
                    f"adapter is {pairing.path}: data is staged through host memory",
                    value=value,
                    limit="PXB",
                    hint="unset NCCL_NET_GDR_LEVEL (NCCL's default is PXB) or set it to PXB",
                )
            )
        elif rank <= level and pairing.path is PathClass.SYS:
            out.append(
                Finding(
                    "topo.nccl_gdr",
                    Severity.WARN,
                    subject,
                    f"NCCL_NET_GDR_LEVEL={safe_value(value)} enables GPUDirect RDMA for GPU{pairing.gpu} across NUMA nodes "
                    "(SYS): peer-to-peer over the SMP interconnect is usually slower than staging in host memory",
                    value=value,
                    limit="PXB",
                    hint="unset NCCL_NET_GDR_LEVEL, and put the GPU's rank on an adapter of its own NUMA node",
                )
            )
    return out


def _gdr_read(topo: Topology, value: str, level: int) -> list[Finding]:
    flag = as_int(value)
    in_reach = [p.gpu for p in topo.pairings if p.path is not None and p.path.rank <= level]
    if flag == 0 and in_reach and topo.nvswitches:
        return [
            Finding(
                "topo.nccl_gdr",
                Severity.WARN,
                "NCCL_NET_GDR_READ",
                "NCCL_NET_GDR_READ=0 on an NVLink (NVSwitch) node: sends from GPU memory are staged through host memory "
                f"although GPU(s) {','.join(map(str, in_reach))} reach their adapter within the GDR level",
                value=value,
                limit="1",
                hint="unset NCCL_NET_GDR_READ (NCCL enables it by default on NVLink platforms)",
            )
        ]
    if flag == 1 and not in_reach and topo.pairings:
        return [
            Finding(
                "topo.nccl_gdr",
                Severity.WARN,
                "NCCL_NET_GDR_READ",
                "NCCL_NET_GDR_READ=1 has no effect: no GPU reaches an adapter within the GDR level",
                value=value,
                limit=None,
                hint="see topo.gpu_nic_path; unset NCCL_NET_GDR_READ",
            )
        ]
    if flag is None:
        return [
            Finding(
                "topo.nccl_gdr",
                Severity.FAIL,
                "NCCL_NET_GDR_READ",
                f"NCCL_NET_GDR_READ={safe_value(value)} is not 0 or 1",
                value=value,
                limit="1",
                hint="NCCL_NET_GDR_READ takes 0 or 1; unset it for NCCL's default",
            )
        ]
    return []


@CHECKS.check(
    "topo.nccl_gdr",
    "NCCL_NET_GDR_LEVEL / NCCL_NET_GDR_READ turn GPUDirect RDMA off where the path allows it, or on across NUMA nodes: warn",
)
def nccl_gdr(topo: Topology, env: NcclEnv) -> list[Finding]:
    out: list[Finding] = []
    value = env.get("NCCL_NET_GDR_LEVEL")
    level = PathClass.PXB.rank
    if value is not None:
        name = value.strip().upper()
        if name not in _GDR_LEVELS:
            return [
                Finding(
                    "topo.nccl_gdr",
                    Severity.FAIL if not name.isdigit() else Severity.WARN,
                    "NCCL_NET_GDR_LEVEL",
                    f"NCCL_NET_GDR_LEVEL={safe_value(value)}: "
                    + (
                        "a legacy number, not judged"
                        if name.isdigit()
                        else "not a level NCCL knows"
                    ),
                    value=value,
                    limit="PXB",
                    hint="use LOC, PIX, PXB, PHB or SYS (PXB is NCCL's default)",
                )
            ]
        level = _GDR_LEVELS[name]
        out += _gdr_findings(topo, value, level)
    read = env.get("NCCL_NET_GDR_READ")
    if read is not None:
        out += _gdr_read(topo, read, level)
    return out

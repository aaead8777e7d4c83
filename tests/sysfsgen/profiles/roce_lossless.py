"""A RoCE GPU node configured for lossless RoCE: two H100s, each beside a ConnectX-7 in Ethernet mode
under its own PCIe switch (PIX), 400 GbE, MTU 9000.

Configured as NVIDIA's RoCE guides describe a lossless fabric: DSCP trust with DSCP 26 -> priority 3
(``dcb app``), PFC on priority 3 (``dcb pfc``), ECN (DCQCN) on for every priority, rdma_cm's defaults
RoCE v2 and ToS 106. The job is meant to run with NCCL_IB_TC=106 (DSCP 26) and NCCL_IB_GID_INDEX=3.
The ``dcb -j`` output is saved beside sys/ as ``dcb/<netdev>/{pfc,app}.json``.

``build(tree, **change)`` takes the settings as keywords, so a test builds each misconfiguration in
tmp_path from the same node (``Settings``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from tests.sysfsgen.builder import PciNode, Tree, roce_gids, zero_counters, zero_hw_counters
from tests.sysfsgen.parts import (
    BROADCOM,
    CLASS_3D,
    CLASS_ETH,
    CX7,
    H100_SXM5,
    MELLANOX,
    NVIDIA,
    SWITCH_PEX89,
    gpu_node,
)
from tests.sysfsgen.pcicfg import (
    ACS_LINUX_ENABLES,
    DOWNSTREAM,
    ENDPOINT,
    ROOT_PORT,
    UPSTREAM,
    config_space,
)

INTEL_RP = (0x8086, 0x352A)
CLASS_BRIDGE = 0x060400

NAME = "roce-lossless"
CPUS = "0-47"


@dataclass(frozen=True)
class Settings:
    pfc: tuple[int, ...] = (3,)
    """Priorities with PFC on (``dcb pfc``)."""
    dscp_prio: tuple[tuple[int, int], ...] = ((26, 3),)
    """The DSCP -> priority table (``dcb app``); empty: PCP trust."""
    dcb: bool = True
    """Save the dcb JSON (False: DCB state unknown)."""
    ecn_off: tuple[tuple[str, int], ...] = ()
    """(``roce_np``/``roce_rp``, priority) switched off."""
    ecn: bool = True
    """Write the ecn/ files (False: an in-tree driver without them)."""
    cm_mode: str | None = "RoCE v2"
    cm_tos: int | None = 106
    mtu: int = 9000
    gid_v2_ipv4_index: int = 3
    """Where the RoCE v2 IPv4 GID sits (3 as mlx5 fills the table; 1 when the netdev has no link-local)."""
    acs_redirect: tuple[str, ...] = ()
    """Switch ports whose ACS control has what Linux enables with an IOMMU on (redirects included)."""
    iommu: str | None = "identity"
    """IOMMU group type of every function (None: no IOMMU groups, the IOMMU is off)."""
    config_bytes: int = 4096
    """Bytes of each ``config`` (64: what a reader that is not root gets; 0: no config file)."""
    nic_mps: int = 256
    bridge_mps: int = 256
    nic_mrrs: int = 4096
    ats: bool = True
    extra: dict[str, object] = field(default_factory=dict)


def _cfg(
    s: Settings, address: str, vendor: int, device: int, cls: int, port_type: int, **kw: object
) -> bytes | None:
    if not s.config_bytes:
        return None
    acs = None
    if port_type in (ROOT_PORT, DOWNSTREAM):
        acs = ACS_LINUX_ENABLES if address in s.acs_redirect else 0
    kw.setdefault("mps", s.bridge_mps if port_type != ENDPOINT else 256)
    return config_space(
        vendor, device, cls, port_type=port_type, acs_ctrl=acs, size=s.config_bytes, **kw
    )  # type: ignore[arg-type]


def _bridge(
    parent: PciNode, s: Settings, address: str, ids: tuple[int, int], port_type: int
) -> PciNode:
    node = parent.bridge(
        address,
        vendor=ids[0],
        device=ids[1],
        config=_cfg(s, address, *ids, CLASS_BRIDGE, port_type),
    )
    _iommu(parent.tree, s, node)
    return node


_GROUPS: dict[str, int] = {}


def _iommu(tree: Tree, s: Settings, node: PciNode) -> None:
    if s.iommu is not None and node.address:
        group = _GROUPS.setdefault(node.address, len(_GROUPS) + 10)
        tree.iommu_group(node.rel, group, s.iommu)


def _nic(tree: Tree, parent: PciNode, address: str, i: int, s: Settings) -> None:
    cfg = _cfg(
        s,
        address,
        MELLANOX,
        CX7,
        CLASS_ETH,
        ENDPOINT,
        mps=s.nic_mps,
        mrrs=s.nic_mrrs,
        ats_enabled=s.ats,
    )
    dev = parent.add(
        address,
        vendor=MELLANOX,
        device=CX7,
        cls=CLASS_ETH,
        subsystem=(MELLANOX, 0x0023),
        config=cfg,
    )
    _iommu(tree, s, dev)
    guid = f"a088:c203:00e1:{0x5000 + i:04x}"
    ib = dev.rdma(
        f"mlx5_{i}",
        fw_ver="28.41.1000",
        board_id="MT_0000000838",
        hca_type="MT4129",
        node_guid=guid,
    )
    bus = int(address.split(":")[1], 16)
    netdev = dev.netdev(
        f"enp{bus}s0np0", mtu=s.mtu, address=f"a0:88:c2:e1:50:{i:02x}", speed=400000
    )
    gids = roce_gids(f"a288:c2ff:fee1:50{i:02x}", f"10.1.{i}.7", netdev)
    if s.gid_v2_ipv4_index == 1:
        gids = gids[2:]  # only the IPv4-mapped pair: index 0 v1, 1 v2
    ib.port(
        1,
        rate="400 Gb/sec (4X NDR)",
        link_layer="Ethernet",
        lid="0x0",
        sm_lid="0x0",
        gids=gids,
        counters=zero_counters(),
        hw_counters=zero_hw_counters(),
    )
    if s.ecn:
        for point in ("roce_np", "roce_rp"):
            for prio in range(8):
                tree.file(
                    f"class/net/{netdev}/ecn/{point}/enable/{prio}",
                    int((point, prio) not in s.ecn_off),
                )
    cm = f"kernel/config/rdma_cm/mlx5_{i}/ports/1"
    if s.cm_mode is not None:
        tree.file(f"{cm}/default_roce_mode", s.cm_mode)
    if s.cm_tos is not None:
        tree.file(f"{cm}/default_roce_tos", s.cm_tos)
    if s.dcb:
        tree.dcb(netdev, pfc=s.pfc, dscp_prio=s.dscp_prio)


def build(tree: Tree, settings: Settings = Settings(), **change: object) -> None:
    s = replace(settings, **change)  # type: ignore[arg-type]
    _GROUPS.clear()
    gpu_node(tree, {0: CPUS})
    tree.kernel("6.8.0-45-generic")
    sw = (BROADCOM, SWITCH_PEX89)
    for i, bus in enumerate((0x15, 0x97)):
        hb = tree.host_bridge(f"0000:{bus:02x}")
        hb.numa, hb.cpulist = 0, CPUS
        rp = _bridge(hb, s, f"0000:{bus:02x}:01.0", INTEL_RP, ROOT_PORT)
        usp = _bridge(rp, s, f"0000:{bus + 1:02x}:00.0", sw, UPSTREAM)
        gpu_dsp = _bridge(usp, s, f"0000:{bus + 2:02x}:00.0", sw, DOWNSTREAM)
        nic_dsp = _bridge(usp, s, f"0000:{bus + 2:02x}:01.0", sw, DOWNSTREAM)
        gpu_addr = f"0000:{bus + 3:02x}:00.0"
        gpu = gpu_dsp.add(
            gpu_addr,
            vendor=NVIDIA,
            device=H100_SXM5,
            cls=CLASS_3D,
            subsystem=(NVIDIA, 0x16C1),
            config=_cfg(s, gpu_addr, NVIDIA, H100_SXM5, CLASS_3D, ENDPOINT),
        )
        _iommu(tree, s, gpu)
        _nic(tree, nic_dsp, f"0000:{bus + 4:02x}:00.0", i, s)
    tree.manifest(
        "roce-gpu-11", "project fixture: lossless RoCE GPU node, 2x H100, 2x ConnectX-7 400GbE"
    )

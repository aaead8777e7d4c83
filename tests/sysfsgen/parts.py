"""Devices the GPU-node profiles share: an NVIDIA H100, a ConnectX-7 InfiniBand function with its port,
a PCIe switch. Ids and GUIDs are the project's own; values are written as the kernel prints them."""

from __future__ import annotations

from collections.abc import Mapping

from tests.sysfsgen.builder import PciNode, Tree, ib_gid, zero_counters, zero_hw_counters

NVIDIA, MELLANOX, BROADCOM = 0x10DE, 0x15B3, 0x1000
H100_SXM5, H100_PCIE, CX7 = 0x2330, 0x2331, 0x1021
SWITCH_PEX89 = 0xC030
CLASS_3D, CLASS_IB, CLASS_ETH = 0x030200, 0x020700, 0x020000


def gpu_node(tree: Tree, cpus: Mapping[int, str]) -> None:
    """NUMA nodes (node -> CPU list) and the modules of a healthy GPU node: the NVIDIA driver with
    nvidia_peermem, mlx5_core and ib_core."""
    for node, cpulist in cpus.items():
        tree.numa(node, cpulist)
    tree.module("nvidia", "550.90.07")
    tree.module("nvidia_peermem", "550.90.07")
    tree.module("mlx5_core", "24.07-0.6.1")
    tree.module("ib_core")


def root_port(
    tree: Tree, bus: int, node: int, cpulist: str, *, device_fn: str = "01.0", **bridge: int
) -> PciNode:
    """Host bridge ``pci0000:<bus>`` on NUMA ``node`` and its root port ``0000:<bus>:<device_fn>``."""
    hb = tree.host_bridge(f"0000:{bus:02x}")
    hb.numa, hb.cpulist = node, cpulist
    return hb.bridge(f"0000:{bus:02x}:{device_fn}", **bridge)  # type: ignore[arg-type]


def h100(parent: PciNode, address: str, *, device: int = H100_SXM5) -> PciNode:
    """An H100 GPU function (3D controller) below ``parent``."""
    return parent.add(
        address, vendor=NVIDIA, device=device, cls=CLASS_3D, subsystem=(NVIDIA, 0x16C1)
    )


def switch(parent: PciNode, upstream: str, downstream: list[str]) -> list[PciNode]:
    """A PCIe switch: its upstream port below ``parent`` and the downstream ports below that."""
    usp = parent.bridge(upstream, vendor=BROADCOM, device=SWITCH_PEX89)
    return [usp.bridge(a, vendor=BROADCOM, device=SWITCH_PEX89) for a in downstream]


def cx7_ib(
    parent: PciNode,
    address: str,
    name: str,
    serial: int,
    *,
    netdev: str | None = None,
    fw_ver: str = "28.39.1002",
    rate: str = "400 Gb/sec (4X NDR)",
    rdma: bool = True,
) -> PciNode:
    """One ConnectX-7 InfiniBand function (one RDMA device, port 1) with IPoIB netdev and traffic counters.

    ``serial`` makes the GUID, LID and counters unique. ``rdma=False``: the PCI function only, as on a
    node where mlx5_core/mlx5_ib did not load (no ``infiniband/``, no ``net/``)."""
    dev = parent.add(
        address, vendor=MELLANOX, device=CX7, cls=CLASS_IB, subsystem=(MELLANOX, 0x0023)
    )
    if not rdma:
        return dev
    guid = f"a088:c203:00b2:{0x3000 + serial * 8:04x}"
    ib = dev.rdma(name, fw_ver=fw_ver, board_id="MT_0000000838", hca_type="MT4129", node_guid=guid)
    bus = int(address.split(":")[1], 16)
    fn = int(address.rsplit(".", 1)[1])
    dev.netdev(
        netdev or f"ibp{bus}s0" + (f"f{fn}" if fn else ""),
        mtu=4092,
        address=f"00:00:10:29:fe:80:00:00:00:00:00:00:a0:88:c2:03:00:b2:{serial:02x}:30",
    )
    ib.port(
        1,
        rate=rate,
        lid=f"0x{0x20 + serial:x}",
        gids=[(ib_gid(guid), "IB/RoCE v1", None)],
        counters=zero_counters(
            port_xmit_data=71234567890 + serial * 1000003,
            port_rcv_data=70987654321 + serial * 999983,
            port_xmit_packets=17876543 + serial,
        ),
        hw_counters=zero_hw_counters(),
    )
    return dev

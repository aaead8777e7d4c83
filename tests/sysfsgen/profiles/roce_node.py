"""A single-socket RoCE node: four L40S GPUs and two dual-port ConnectX-6 Dx at 100 GbE.

Host bridge 0000:40 holds a two-level PCIe switch: GPU0 and GPU1 behind the second level, the first
adapter behind the first (GPU0/1 <-> mlx5_0/1 are PXB, as on many 4- and 8-GPU PCIe servers).
Host bridge 0000:c0 has GPU2, GPU3 and the second adapter on their own root ports (PHB).
GPUDirect RDMA comes from the legacy ``nv_peer_mem`` module (``/sys/kernel/mm/memory_peers/nv_mem``).
"""

from __future__ import annotations

from tests.sysfsgen.builder import Link, Tree, roce_gids, zero_counters, zero_hw_counters

NAME = "roce-node"

NVIDIA, MELLANOX, AMD, MICROCHIP = 0x10DE, 0x15B3, 0x1022, 0x11F8
L40S, CX6DX = 0x26B9, 0x101D
CPUS = "0-63"
GEN4 = Link("16.0 GT/s PCIe", 16, "16.0 GT/s PCIe", 16)


def build(tree: Tree) -> None:
    tree.numa(0, CPUS)
    tree.module("nvidia", "535.183.01")
    # An Ubuntu-style kernel with the in-tree mlx5_core, which sets no MODULE_VERSION any more (Debian
    # 12's 6.1 mlx5_core.ko has none: modinfo -F version): only a srcversion, which a kernel built with
    # CONFIG_MODULE_SRCVERSION_ALL gives every module (this profile assumes one; Debian's is not).
    tree.kernel("5.15.0-119-generic")
    tree.module("mlx5_core", srcversion="A1F3E8C27D45B9066C1E2D4")
    tree.file("kernel/mm/memory_peers/nv_mem/version", "1.3-0")

    hb = tree.host_bridge("0000:40")
    hb.numa, hb.cpulist = 0, CPUS
    rp = hb.bridge("0000:40:01.1", vendor=AMD, device=0x14AB, link=GEN4)
    usp1 = rp.bridge("0000:41:00.0", vendor=MICROCHIP, device=0x4028, link=GEN4)
    dsp_a = usp1.bridge("0000:42:00.0", vendor=MICROCHIP, device=0x4028, link=GEN4)
    dsp_b = usp1.bridge("0000:42:01.0", vendor=MICROCHIP, device=0x4028, link=GEN4)
    usp2 = dsp_a.bridge("0000:43:00.0", vendor=MICROCHIP, device=0x4028, link=GEN4)
    usp2.bridge("0000:44:00.0", vendor=MICROCHIP, device=0x4028, link=GEN4).add(
        "0000:45:00.0",
        vendor=NVIDIA,
        device=L40S,
        cls=0x030200,
        link=GEN4,
        subsystem=(NVIDIA, 0x1851),
    )
    usp2.bridge("0000:44:01.0", vendor=MICROCHIP, device=0x4028, link=GEN4).add(
        "0000:46:00.0",
        vendor=NVIDIA,
        device=L40S,
        cls=0x030200,
        link=GEN4,
        subsystem=(NVIDIA, 0x1851),
    )

    hb2 = tree.host_bridge("0000:c0")
    hb2.numa, hb2.cpulist = 0, CPUS
    for _k, (rp_addr, gpu_addr) in enumerate(
        (("0000:c0:01.1", "0000:c1:00.0"), ("0000:c0:03.1", "0000:c2:00.0"))
    ):
        hb2.bridge(rp_addr, vendor=AMD, device=0x14AB, link=GEN4).add(
            gpu_addr,
            vendor=NVIDIA,
            device=L40S,
            cls=0x030200,
            link=GEN4,
            subsystem=(NVIDIA, 0x1851),
        )
    rp_nic2 = hb2.bridge("0000:c0:05.1", vendor=AMD, device=0x14AB, link=GEN4)

    # Two dual-port adapters: one RDMA device per PCI function, mlx5 names in PCI order.
    nics = [
        (dsp_b, "0000:47:00.0", 0),
        (dsp_b, "0000:47:00.1", 1),
        (rp_nic2, "0000:c3:00.0", 0),
        (rp_nic2, "0000:c3:00.1", 1),
    ]
    for i, (parent, addr, fn) in enumerate(nics):
        bus = int(addr.split(":")[1], 16)
        dev = parent.add(
            addr,
            vendor=MELLANOX,
            device=CX6DX,
            cls=0x020000,
            link=GEN4,
            subsystem=(MELLANOX, 0x0016),
        )
        guid = f"0c42:a103:005c:{0x1B20 + i:04x}"
        ib = dev.rdma(
            f"mlx5_{i}",
            fw_ver="22.41.1000",
            board_id="MT_0000000359",
            hca_type="MT4125",
            node_guid=guid,
        )
        netdev = dev.netdev(
            f"enp{bus}s0f{fn}np{fn}",
            mtu=9000,
            address=f"0c:42:a1:5c:1b:{0x20 + i:02x}",
            speed=100000,
        )
        ib.port(
            1,
            rate="100 Gb/sec (4X EDR)",
            link_layer="Ethernet",
            lid="0x0",
            sm_lid="0x0",
            gids=roce_gids(f"0e42:a1ff:fe5c:1b{0x20 + i:02x}", f"10.0.{i + 1}.5", netdev),
            counters=zero_counters(
                port_xmit_data=5123456789 + i,
                port_rcv_data=5012345678 + i,
                port_xmit_packets=3456789,
                port_rcv_packets=3345678,
            ),
            hw_counters=zero_hw_counters(
                np_ecn_marked_roce_packets=1520 + i, np_cnp_sent=1498 + i, rp_cnp_handled=1377 + i
            ),
        )

    tree.manifest(
        "roce-node-03",
        "project fixture: single-socket RoCE node, 4x L40S, 2x dual-port ConnectX-6 Dx",
    )

"""An 8-GPU, 8x400G NDR node shaped like an NVIDIA DGX H100 (addresses and ids are the project's own).

Two sockets; on each, four host bridges with one PCIe switch each, and under every switch one H100
and one ConnectX-7 (the GPU's rail); two dual-port ConnectX-7 in Ethernet mode for storage; four
NVSwitches and the management NIC on socket 0. ``build(tree, faults=...)`` plants the faults of
the ``dgx-h100-faulty`` profile; ``mlx5_loaded=False`` leaves the ConnectX functions without driver
(the ``gpu-no-mlx5`` profile).
"""

from __future__ import annotations

from tests.sysfsgen.builder import Link, Tree, ib_gid, roce_gids, zero_counters, zero_hw_counters

NAME = "dgx-h100"

NVIDIA, MELLANOX, BROADCOM, INTEL = 0x10DE, 0x15B3, 0x1000, 0x8086
H100_SXM5, NVSWITCH, CX7 = 0x2330, 0x22A3, 0x1021
SWITCH_PEX89 = 0xC030
CPUS = {0: "0-55,112-167", 1: "56-111,168-223"}

#: (host bridge bus, NUMA node) of the eight GPU/NIC switch complexes, GPU0..GPU7 in PCI order.
GPU_COMPLEXES = (
    (0x15, 0),
    (0x26, 0),
    (0x37, 0),
    (0x48, 0),
    (0x95, 1),
    (0xA6, 1),
    (0xB7, 1),
    (0xC8, 1),
)

FAULTS = ("wrong_socket", "narrow_link", "port_down", "slow_port", "no_peermem")


def _traffic(i: int) -> dict[str, int | str]:
    # Counters of a node that has run jobs: data in 4-octet words, no errors.
    return zero_counters(
        port_xmit_data=81234567890 + i * 1000003,
        port_rcv_data=80987654321 + i * 999983,
        port_xmit_packets=19876543 + i * 101,
        port_rcv_packets=19765432 + i * 103,
        unicast_xmit_packets=19876000 + i * 101,
        unicast_rcv_packets=19765000 + i * 103,
        port_xmit_wait=1234 + i,
    )


#: The node's kernel (DGX OS 6 runs Ubuntu's -nvidia kernels) and MLNX_OFED's mlx5_core: an
#: out-of-tree module has a version and, because it has one, a srcversion (scripts/mod/modpost.c).
KERNEL = "5.15.0-1063-nvidia"
MLX5_CORE = ("24.07-0.6.1", "6E9A1C0F3B52D47A8E1C90B")


def build(
    tree: Tree,
    faults: frozenset[str] = frozenset(),
    host: str = "dgx-h100-01",
    *,
    mlx5_loaded: bool = True,
    note: str = "",
) -> None:
    tree.kernel(KERNEL)
    for node, cpus in CPUS.items():
        tree.numa(node, cpus)
    tree.module("nvidia", "550.90.07")
    if mlx5_loaded:
        tree.module("mlx5_core", *MLX5_CORE)
        tree.module("ib_core")
    if "no_peermem" not in faults:
        tree.module("nvidia_peermem", "550.90.07")

    # Socket 0 platform devices: NVSwitches behind a switch, and the management NIC.
    hb0 = tree.host_bridge("0000:00")
    hb0.numa, hb0.cpulist = 0, CPUS[0]
    rp = hb0.bridge("0000:00:01.0")
    usp = rp.bridge("0000:01:00.0", vendor=BROADCOM, device=SWITCH_PEX89)
    for k in range(4):
        dsp = usp.bridge(f"0000:02:0{k}.0", vendor=BROADCOM, device=SWITCH_PEX89)
        dsp.add(
            f"0000:0{3 + k}:00.0",
            vendor=NVIDIA,
            device=NVSWITCH,
            cls=0x068000,
            link=Link("2.5 GT/s PCIe", 1, "2.5 GT/s PCIe", 1),
        )
    mgmt_rp = hb0.bridge("0000:00:1c.0", link=Link("8.0 GT/s PCIe", 4, "8.0 GT/s PCIe", 4))
    mgmt = mgmt_rp.add(
        "0000:07:00.0",
        vendor=INTEL,
        device=0x1563,
        cls=0x020000,
        link=Link("8.0 GT/s PCIe", 4, "8.0 GT/s PCIe", 4),
    )
    mgmt.netdev("eno1", speed=10000, address="7c:c2:55:00:10:01")

    # (pci address, numa, builder) of every RDMA function; mlx5 names follow PCI order (probe order).
    adapters: list[tuple[str, callable]] = []  # type: ignore[valid-type]

    for gpu_i, (bus, node) in enumerate(GPU_COMPLEXES):
        hb = tree.host_bridge(f"0000:{bus:02x}")
        hb.numa, hb.cpulist = node, CPUS[node]
        rp = hb.bridge(f"0000:{bus:02x}:01.0")
        usp = rp.bridge(f"0000:{bus + 1:02x}:00.0", vendor=BROADCOM, device=SWITCH_PEX89)
        dsp_gpu = usp.bridge(f"0000:{bus + 2:02x}:00.0", vendor=BROADCOM, device=SWITCH_PEX89)
        dsp_gpu.add(
            f"0000:{bus + 3:02x}:00.0",
            vendor=NVIDIA,
            device=H100_SXM5,
            cls=0x030200,
            subsystem=(NVIDIA, 0x16C1),
        )
        if gpu_i == 2 and "wrong_socket" in faults:
            # The rail adapter of GPU2 sits in a slot of socket 1 instead of beside its GPU.
            hb_wrong = tree.host_bridge("0000:e8")
            hb_wrong.numa, hb_wrong.cpulist = 1, CPUS[1]
            parent = hb_wrong.bridge("0000:e8:01.0")
            nic_addr = "0000:e9:00.0"
        else:
            parent = usp.bridge(f"0000:{bus + 2:02x}:01.0", vendor=BROADCOM, device=SWITCH_PEX89)
            nic_addr = f"0000:{bus + 4:02x}:00.0"
        narrow = gpu_i == 5 and "narrow_link" in faults
        slow = gpu_i == 6 and "slow_port" in faults
        adapters.append(
            (
                nic_addr,
                _compute_nic(parent, nic_addr, gpu_i, narrow=narrow, slow=slow, rdma=mlx5_loaded),
            )
        )

    # Storage: one dual-port ConnectX-7 per socket in Ethernet mode (two PCI functions, two RDMA devices).
    for s_i, (bus, node) in enumerate(((0x59, 0), (0xD9, 1))):
        hb = tree.host_bridge(f"0000:{bus:02x}")
        hb.numa, hb.cpulist = node, CPUS[node]
        rp = hb.bridge(f"0000:{bus:02x}:01.0")
        for fn in (0, 1):
            addr = f"0000:{bus + 1:02x}:00.{fn}"
            down = s_i == 1 and fn == 1 and "port_down" in faults
            adapters.append((addr, _storage_nic(rp, addr, s_i, fn, down=down, rdma=mlx5_loaded)))

    for i, (_addr, make) in enumerate(sorted(adapters, key=lambda t: t[0])):
        make(f"mlx5_{i}")

    tree.manifest(
        host,
        note
        or "project fixture: DGX H100-like node"
        + (f" with faults {sorted(faults)}" if faults else ""),
    )


def _compute_nic(parent, addr: str, gpu_i: int, *, narrow: bool, slow: bool, rdma: bool):  # type: ignore[no-untyped-def]
    bus = int(addr.split(":")[1], 16)

    def make(name: str) -> None:
        link = Link("32.0 GT/s PCIe", 8, "32.0 GT/s PCIe", 16) if narrow else Link()
        dev = parent.add(
            addr, vendor=MELLANOX, device=CX7, cls=0x020700, link=link, subsystem=(MELLANOX, 0x0023)
        )
        if not rdma:
            return
        guid = f"a088:c203:00b1:{0x2C40 + gpu_i * 8:04x}"
        ib = dev.rdma(
            name, fw_ver="28.39.1002", board_id="MT_0000000838", hca_type="MT4129", node_guid=guid
        )
        dev.netdev(
            f"ibp{bus}s0",
            mtu=4092,
            address=f"00:00:10:29:fe:80:00:00:00:00:00:00:a0:88:c2:03:00:b1:{0x40 + gpu_i * 8:02x}:2c",
        )
        ib.port(
            1,
            rate="200 Gb/sec (4X HDR)" if slow else "400 Gb/sec (4X NDR)",
            lid=f"0x{0x10 + gpu_i:x}",
            sm_lid="0x1",
            gids=[(ib_gid(guid), "IB/RoCE v1", None)],
            counters=_traffic(gpu_i),
            hw_counters=zero_hw_counters(),
        )

    return make


def _storage_nic(rp, addr: str, s_i: int, fn: int, *, down: bool, rdma: bool):  # type: ignore[no-untyped-def]
    bus = int(addr.split(":")[1], 16)

    def make(name: str) -> None:
        dev = rp.add(addr, vendor=MELLANOX, device=CX7, cls=0x020000, subsystem=(MELLANOX, 0x0025))
        if not rdma:
            return
        guid = f"a088:c203:00c4:{0x1A00 + s_i * 16 + fn:04x}"
        ib = dev.rdma(
            name, fw_ver="28.39.1002", board_id="MT_0000000834", hca_type="MT4129", node_guid=guid
        )
        netdev = dev.netdev(
            f"enp{bus}s0f{fn}np{fn}",
            dev_port=0,
            operstate="down" if down else "up",
            mtu=9000,
            address=f"a0:88:c2:c4:1a:{s_i * 16 + fn:02x}",
        )
        gids = (
            []
            if down
            else roce_gids(
                f"a288:c2ff:fec4:1a{s_i * 16 + fn:02x}", f"10.{100 + s_i}.0.{10 + fn}", netdev
            )
        )
        ib.port(
            1,
            state="1: DOWN" if down else "4: ACTIVE",
            phys_state="2: Polling" if down else "5: LinkUp",
            rate="200 Gb/sec (4X HDR)",
            link_layer="Ethernet",
            lid="0x0",
            sm_lid="0x0",
            gids=gids,
            counters=_traffic(20 + s_i * 2 + fn),
            hw_counters=zero_hw_counters(),
        )

    return make

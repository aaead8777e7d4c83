"""An 8-GPU HGX-style node: four PCIe switches, each with two H100 GPUs and two single-port ConnectX-7.

Two sockets (NUMA 0 and 1), two switches per socket. Under every switch two GPUs and two NDR adapters
hang from their own downstream ports, so both adapters are PIX from both GPUs: a tie, and NCCL uses
both. One dual-port ConnectX-7 in Ethernet mode (storage) on socket 0's own host bridge. GPU4 sits on
PCI bus 0xab (``0000:ab:00.0``). mlx5 names follow PCI order.

``build(tree, odd_strings=True)`` writes the same machine with data strings that look like rich markup
and emoji codes (a firmware version, IPoIB netdevs, adapters renamed with ``rdma dev set``: both
storage functions and mlx5_9), for the test that no table interprets them.
"""

from __future__ import annotations

from tests.sysfsgen.builder import Tree, roce_gids, zero_counters
from tests.sysfsgen.parts import CLASS_ETH, CX7, MELLANOX, cx7_ib, gpu_node, h100, root_port, switch

NAME = "hgx-4switch"

CPUS = {0: "0-47,96-143", 1: "48-95,144-191"}
#: (host bridge bus, NUMA node) of the four switch complexes, in PCI order.
SWITCHES = ((0x15, 0), (0x37, 0), (0xA8, 1), (0xC8, 1))
ODD_FW = "[/bold]28.39.1002 [bold]:ab:"
ODD_NAMES = ("[bold]mlx5_4", "mlx5_5[i]:ab:")
ODD_RAIL = "mlx5_9[red]"


def build(tree: Tree, odd_strings: bool = False) -> None:
    gpu_node(tree, CPUS)
    nic = 0
    for sw, (bus, node) in enumerate(SWITCHES):
        rp = root_port(tree, bus, node, CPUS[node])
        # switch: upstream port on bus+1, downstream ports 0-3 on bus+2, their devices on bus+3 .. bus+6
        dsps = switch(
            rp, f"0000:{bus + 1:02x}:00.0", [f"0000:{bus + 2:02x}:0{k}.0" for k in range(4)]
        )
        h100(dsps[0], f"0000:{bus + 3:02x}:00.0")
        h100(dsps[1], f"0000:{bus + 4:02x}:00.0")
        for k in (2, 3):
            odd = {"fw_ver": ODD_FW, "netdev": f"ib[bold]{nic}"} if odd_strings else {}
            name = ODD_RAIL if odd_strings and nic == 9 else f"mlx5_{nic}"
            cx7_ib(dsps[k], f"0000:{bus + 3 + k:02x}:00.0", name, nic, **odd)
            nic += 1
        if (
            sw == 1
        ):  # the storage card's bus 0x5a follows switch 1's adapters (0x3c, 0x3d) in PCI order
            _storage(tree, nic, odd_strings)
            nic += 2

    tree.manifest(
        "hgx-4sw-01", "project fixture: 8 GPUs, 4 PCIe switches with 2 GPUs + 2 NICs each"
    )


def _storage(tree: Tree, first: int, odd_strings: bool) -> None:
    """Dual-port ConnectX-7 in Ethernet mode on host bridge 0000:59 (socket 0): two functions, two RDMA devices."""
    rp = root_port(tree, 0x59, 0, CPUS[0])
    for fn in (0, 1):
        name = ODD_NAMES[fn] if odd_strings else f"mlx5_{first + fn}"
        dev = rp.add(
            f"0000:5a:00.{fn}",
            vendor=MELLANOX,
            device=CX7,
            cls=CLASS_ETH,
            subsystem=(MELLANOX, 0x0025),
        )
        guid = f"a088:c203:00c5:{0x2A00 + fn:04x}"
        ib = dev.rdma(
            name,
            fw_ver=ODD_FW if odd_strings else "28.39.1002",
            board_id="MT_0000000834",
            hca_type="MT4129",
            node_guid=guid,
        )
        netdev = dev.netdev(f"enp90s0f{fn}np{fn}", mtu=9000, address=f"a0:88:c2:c5:2a:{fn:02x}")
        ib.port(
            1,
            rate="200 Gb/sec (4X HDR)",
            link_layer="Ethernet",
            lid="0x0",
            sm_lid="0x0",
            gids=roce_gids(f"a288:c2ff:fec5:2a{fn:02x}", f"10.110.0.{10 + fn}", netdev),
            counters=zero_counters(port_xmit_data=512345 + fn, port_rcv_data=501234 + fn),
        )

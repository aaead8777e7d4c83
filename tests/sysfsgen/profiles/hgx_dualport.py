"""An 8-GPU node with one dual-port ConnectX-7 (2 x 200 Gb/s NDR200) beside every GPU: 16 RDMA devices.

Two sockets; on each, four host bridges with one PCIe switch each; under every switch one H100 and
one dual-port card. A dual-port ConnectX is two PCI functions (``.0`` and ``.1``) and two RDMA devices
of one port each; both are PIX from the GPU beside them, so both are that GPU's rails.

The kernel names RDMA devices in probe order, which need not be PCI order: here the first function of
every card was probed first (mlx5_0 .. mlx5_7, GPU order) and the second functions after
(mlx5_8 .. mlx5_15). ``nvidia-smi topo -m`` numbers NICs by name (NIC1 = mlx5_1, NIC10 = mlx5_10),
not by PCI address (where mlx5_8 follows mlx5_0).
"""

from __future__ import annotations

from tests.sysfsgen.builder import Tree
from tests.sysfsgen.parts import cx7_ib, gpu_node, h100, root_port, switch

NAME = "hgx-dualport"

CPUS = {0: "0-55,112-167", 1: "56-111,168-223"}
#: (host bridge bus, NUMA node) of the eight GPU/NIC switch complexes, GPU0..GPU7 in PCI order.
COMPLEXES = ((0x15, 0), (0x26, 0), (0x37, 0), (0x48, 0), (0x95, 1), (0xA6, 1), (0xB7, 1), (0xC8, 1))


def build(tree: Tree) -> None:
    gpu_node(tree, CPUS)
    for gpu, (bus, node) in enumerate(COMPLEXES):
        rp = root_port(tree, bus, node, CPUS[node])
        dsp_gpu, dsp_nic = switch(
            rp, f"0000:{bus + 1:02x}:00.0", [f"0000:{bus + 2:02x}:00.0", f"0000:{bus + 2:02x}:01.0"]
        )
        h100(dsp_gpu, f"0000:{bus + 3:02x}:00.0")
        for fn in (0, 1):
            name = gpu + 8 * fn
            cx7_ib(
                dsp_nic,
                f"0000:{bus + 4:02x}:00.{fn}",
                f"mlx5_{name}",
                name,
                rate="200 Gb/sec (2X NDR)",
            )

    tree.manifest(
        "hgx-dp-01", "project fixture: 8 GPUs, 8 dual-port ConnectX-7, RDMA names not in PCI order"
    )

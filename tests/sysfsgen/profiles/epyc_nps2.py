"""Two AMD EPYC sockets in NPS2 mode: four NUMA nodes, two per socket; four GPUs and two NDR adapters.

With NPS2 (Intel: SNC2) each socket is two NUMA nodes, and nvidia-smi calls every path between NUMA
nodes SYS ("PCIe as well as the SMP interconnect between NUMA nodes"), also between the two nodes of
one socket. GPU0 and mlx5_0 share a PCIe switch on NUMA node 0, GPU2 and mlx5_1 on NUMA node 2;
GPU1 (node 1) and GPU3 (node 3) hang from root ports of their own NUMA node, which has no adapter:
their nearest adapters are SYS — one on the same socket, one across — and tie.
"""

from __future__ import annotations

from tests.sysfsgen.builder import Tree
from tests.sysfsgen.parts import H100_PCIE, cx7_ib, gpu_node, h100, root_port, switch

NAME = "epyc-nps2"

AMD = 0x1022
#: NUMA node -> CPUs: socket 0 is nodes 0-1, socket 1 nodes 2-3 (64 cores, 2 threads each per socket).
CPUS = {0: "0-31,128-159", 1: "32-63,160-191", 2: "64-95,192-223", 3: "96-127,224-255"}
#: NUMA node -> host bridge bus.
HOST_BRIDGES = {0: 0x40, 1: 0x60, 2: 0x80, 3: 0xA0}


def build(tree: Tree) -> None:
    gpu_node(tree, CPUS)
    nic = 0
    for node, bus in HOST_BRIDGES.items():
        rp = root_port(tree, bus, node, CPUS[node], device_fn="01.1", vendor=AMD, device=0x14AB)
        if node % 2 == 0:
            dsp_gpu, dsp_nic = switch(
                rp,
                f"0000:{bus + 1:02x}:00.0",
                [f"0000:{bus + 2:02x}:00.0", f"0000:{bus + 2:02x}:01.0"],
            )
            h100(dsp_gpu, f"0000:{bus + 3:02x}:00.0", device=H100_PCIE)
            cx7_ib(dsp_nic, f"0000:{bus + 4:02x}:00.0", f"mlx5_{nic}", 40 + nic)
            nic += 1
        else:
            h100(rp, f"0000:{bus + 1:02x}:00.0", device=H100_PCIE)

    tree.manifest(
        "epyc-nps2-01", "project fixture: 2 sockets x 2 NUMA nodes (NPS2), 4 GPUs, 2 adapters"
    )

"""A small cloud VM without RDMA, like the machine this project is built on.

virtio devices on one host bridge, ``numa_node`` -1 everywhere, no PCIe link attributes, no
``/sys/class/infiniband``, no GPU. ``ibdiag topo`` must say so plainly and exit 0.
"""

from __future__ import annotations

from tests.sysfsgen.builder import Tree

NAME = "vm-no-rdma"

INTEL, REDHAT = 0x8086, 0x1AF4


def build(tree: Tree) -> None:
    tree.numa(0, "0-1")
    tree.module("virtio_net")
    tree.module("virtio_blk")
    hb = tree.host_bridge("0000:00")
    hb.cpulist = "0-1"
    hb.add("0000:00:00.0", vendor=INTEL, device=0x1237, cls=0x060000, link=None)
    hb.add("0000:00:01.0", vendor=REDHAT, device=0x1005, cls=0xFFFF00, link=None)
    hb.add("0000:00:02.0", vendor=REDHAT, device=0x1001, cls=0x018000, link=None)
    net = hb.add("0000:00:03.0", vendor=REDHAT, device=0x1000, cls=0x020000, link=None)
    net.netdev("eth0", address="52:54:00:12:34:56")
    hb.add("0000:00:04.0", vendor=REDHAT, device=0x1005, cls=0xFFFF00, link=None)
    hb.add("0000:00:05.0", vendor=REDHAT, device=0x1002, cls=0xFFFF00, link=None)
    tree.manifest("vm-small-01", "project fixture: cloud VM without RDMA or GPU")

"""Path classes between PCI devices (``nvidia-smi topo -m``'s PIX/PXB/PHB/NODE/SYS) from the PCI tree.

The tree is sysfs's: ``devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:01.0/0000:1a:00.0``, one
directory per device below the host bridge ``pci0000:15``. The first device under the host bridge is
the root port; below it a PCIe switch appears as an upstream port with downstream ports below it,
so the bridges of a chain pair up: depth 1-2 are switch 1, depth 3-4 switch 2, and so on.

Traffic between two devices climbs to their deepest common bridge. The number of switches it
crosses decides PIX (one) or PXB (several); no common bridge means the host bridge (PHB); different
host bridges mean NODE within one NUMA node and SYS between NUMA nodes — across sockets, or between
the NUMA nodes of one socket (SNC, NPS2/NPS4), as nvidia-smi classifies them — or when either NUMA
node is unknown, since then nothing proves the two share one.
"""

from __future__ import annotations

from ibdiag.node.model import PathClass, PciDevice


def _switch_of(depth: int) -> int:
    # depth 0 is the root port; 1 (upstream port) and 2 (downstream port) form switch 1, ...
    return (depth + 1) // 2


def classify(a: PciDevice, b: PciDevice) -> PathClass:
    """Path class between two PCI devices."""
    if a.host_bridge is None or b.host_bridge is None or a.host_bridge != b.host_bridge:
        if a.numa_node is not None and a.numa_node == b.numa_node:
            return PathClass.NODE
        return PathClass.SYS
    if a.address == b.address:
        return PathClass.PIX
    if a.address.rsplit(".", 1)[0] == b.address.rsplit(".", 1)[0]:
        # Functions of one device (0000:1a:00.0 and 0000:1a:00.1) share its link and port.
        return PathClass.PIX
    chain_a = list(a.bridges)
    chain_b = list(b.bridges)
    common = 0
    for x, y in zip(chain_a, chain_b, strict=False):
        if x != y:
            break
        common += 1
    if common == 0:
        # Different root ports of one host bridge: traffic turns around in the root complex.
        return PathClass.PHB
    lca_depth = common - 1
    switches = {_switch_of(lca_depth)}
    switches.update(_switch_of(d) for d in range(common, len(chain_a)))
    switches.update(_switch_of(d) for d in range(common, len(chain_b)))
    return PathClass.PIX if len(switches) <= 1 else PathClass.PXB


def parse_gdr_level(text: str) -> PathClass:
    """A ``NCCL_NET_GDR_LEVEL`` name: ``PIX``, ``PXB`` (NCCL's default), ``PHB``, ``NODE`` or ``SYS``."""
    t = text.strip().upper()
    try:
        return PathClass(t)
    except ValueError:
        raise ValueError(f"not a path class: {text!r} (PIX, PXB, PHB, NODE or SYS)") from None

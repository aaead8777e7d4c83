"""What a node's device ID says it is and how fast its ports can go; SHARP Aggregation Nodes. Pure.

A link trains to the fastest speed both ends support; an end's device ID bounds that speed (a
ConnectX-5 does EDR at best, a ConnectX-6 HDR). The table holds the devices real dumps carry
(vendor 0x2c9 Mellanox/NVIDIA, 0x8f1 Voltaire); names and generations from pci.ids (2023.04.10,
``15b3`` entries) and the products' data sheets. A device not in the table has an unknown bound:
a link it ends is judged against its class's peers only (:mod:`.linkrate`). Widths are not in the
table: a switch port may be split (2x) by design.

A SHARP Aggregation Node is the switch's own in-network-computing engine, exposed as a one-port
channel adapter in the switch's system image, described ``Mellanox Technologies Aggregation Node``
(device 0xcf09 on Switch-IB 2 and Quantum); it is neither a host nor a rail.
"""

from __future__ import annotations

from dataclasses import dataclass

from ibdiag.fabric.model import CA, SPEED_ORDER, FabricNode

MELLANOX = 0x2C9
VOLTAIRE = 0x8F1
AN_DESC = "Mellanox Technologies Aggregation Node"
AN_DEVICE = 0xCF09


@dataclass(frozen=True)
class Device:
    model: str
    max_speed: str
    """The fastest lane speed (``HDR``) the device supports."""


#: (vendor ID, device ID) -> the device. Adapters' IDs are their PCI device IDs (pci.ids); switches'
#: are the ASIC's NodeInfo device ID as ibnetdiscover prints it.
DEVICES: dict[tuple[int, int], Device] = {
    # adapters
    (MELLANOX, 0x5A44): Device("InfiniHost", "SDR"),
    (MELLANOX, 0x6274): Device("InfiniHost III Lx", "DDR"),
    (MELLANOX, 0x6282): Device("InfiniHost III Ex", "DDR"),
    (MELLANOX, 0x6340): Device("ConnectX (SDR)", "SDR"),
    (MELLANOX, 0x634A): Device("ConnectX (DDR)", "DDR"),
    (MELLANOX, 0x6732): Device("ConnectX (DDR, PCIe 2.0)", "DDR"),
    (MELLANOX, 0x673C): Device("ConnectX (QDR, PCIe 2.0)", "QDR"),
    (MELLANOX, 0x6746): Device("ConnectX VPI (QDR)", "QDR"),
    (MELLANOX, 0x6778): Device("ConnectX VPI (DDR)", "DDR"),
    (MELLANOX, 0x1003): Device("ConnectX-3", "FDR"),
    (MELLANOX, 0x1007): Device("ConnectX-3 Pro", "FDR"),
    (MELLANOX, 0x1011): Device("Connect-IB", "FDR"),
    (MELLANOX, 0x1013): Device("ConnectX-4", "EDR"),
    (MELLANOX, 0x1017): Device("ConnectX-5", "EDR"),
    (MELLANOX, 0x1019): Device("ConnectX-5 Ex", "EDR"),
    (MELLANOX, 0x101B): Device("ConnectX-6", "HDR"),
    (MELLANOX, 0x1021): Device("ConnectX-7", "NDR"),
    (MELLANOX, 0x1023): Device("ConnectX-8", "XDR"),
    (MELLANOX, 0xA2D6): Device("BlueField-2", "HDR"),
    (MELLANOX, 0xA2DC): Device("BlueField-3", "NDR"),
    # switch ASICs
    (MELLANOX, 0xB924): Device("InfiniScale III", "DDR"),
    (MELLANOX, 0xBD34): Device("InfiniScale IV", "QDR"),
    (MELLANOX, 0xBD35): Device("InfiniScale IV", "QDR"),
    (MELLANOX, 0xBD36): Device("InfiniScale IV", "QDR"),
    (MELLANOX, 0xC738): Device("SwitchX", "FDR"),
    (MELLANOX, 0xCB20): Device("Switch-IB", "EDR"),
    (MELLANOX, 0xCF08): Device("Switch-IB 2", "EDR"),
    (MELLANOX, 0xD2F0): Device("Quantum", "HDR"),
    (MELLANOX, 0xD2F2): Device("Quantum-2", "NDR"),
    (MELLANOX, 0xD2F4): Device("Quantum-3", "XDR"),
    (VOLTAIRE, 0x5A5A): Device("Voltaire 4036 (InfiniScale IV)", "QDR"),
}


def device(node: FabricNode | None) -> Device | None:
    if node is None or node.device_id is None:
        return None
    return DEVICES.get((node.vendor_id or MELLANOX, node.device_id))


def device_key(node: FabricNode | None) -> str:
    """The device's model, else ``<vendor>:<device>`` in hex (``?`` for no node): one class of ports."""
    if node is None:
        return "?"
    d = device(node)
    return d.model if d is not None else f"{node.vendor_id or 0:x}:{node.device_id or 0:x}"


def max_speed(node: FabricNode | None) -> str | None:
    d = device(node)
    return d.max_speed if d is not None else None


def slower(a: str | None, b: str | None) -> str | None:
    """The slower of two lane speeds; None when either is unknown."""
    if a is None or b is None or a not in SPEED_ORDER or b not in SPEED_ORDER:
        return None
    return a if SPEED_ORDER.index(a) <= SPEED_ORDER.index(b) else b


def is_aggregation_node(node: FabricNode | None) -> bool:
    """A SHARP Aggregation Node: a one-port CA described as one (or, undescribed, of its device ID)."""
    if node is None or node.kind != CA:
        return False
    if node.desc == AN_DESC:
        return True
    return node.device_id == AN_DEVICE and node.ports == 1 and not node.desc

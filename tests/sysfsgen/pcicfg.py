"""Configuration-space blobs for the fixture trees: what ``/sys/bus/pci/devices/<bdf>/config`` holds, with
the PCI Express capability (Device Capabilities/Control: MPS, MRRS) and, when asked, the ACS (0x000D)
and ATS (0x000F) extended capabilities, laid out as the PCI Express Base Specification places them."""

from __future__ import annotations

#: PCI Express capability's Device/Port Type (bits 7:4 of its capabilities register).
ENDPOINT, ROOT_PORT, UPSTREAM, DOWNSTREAM = 0x0, 0x4, 0x5, 0x6
ACS_DEFAULT_CAP = 0x005F  # SV, TB, RR, CR, UF, DT supported (no egress control)
#: What Linux enables on an ACS-capable port when an IOMMU is on (drivers/pci/pci.c pci_std_enable_acs).
ACS_LINUX_ENABLES = 0x001D  # SrcValid | ReqRedir | CmpltRedir | UpstreamFwd


def _code(size: int) -> int:
    code = (size // 128).bit_length() - 1
    assert 128 << code == size and 0 <= code <= 5, size
    return code


def config_space(
    vendor: int,
    device: int,
    cls: int,
    *,
    port_type: int = ENDPOINT,
    mps: int = 256,
    mps_supported: int = 512,
    mrrs: int = 512,
    acs_ctrl: int | None = None,
    ats_enabled: bool | None = None,
    size: int = 4096,
) -> bytes:
    """4096 bytes (``size``: 64 is what a reader that is not root gets); ``acs_ctrl`` None: no ACS
    capability; ``ats_enabled`` None: no ATS capability."""
    cfg = bytearray(4096)
    bridge = port_type != ENDPOINT
    cfg[0:2] = vendor.to_bytes(2, "little")
    cfg[2:4] = device.to_bytes(2, "little")
    cfg[4:6] = (0x0406 if not bridge else 0x0407).to_bytes(2, "little")  # memory, bus master (+I/O)
    cfg[6:8] = (0x0010).to_bytes(2, "little")  # status: capabilities list
    cfg[9:12] = cls.to_bytes(3, "little")
    cfg[0x0E] = 0x01 if bridge else 0x00
    cfg[0x34] = 0x40
    # PCI Express capability at 0x40, the last of the list
    cfg[0x40], cfg[0x41] = 0x10, 0x00
    cfg[0x42:0x44] = (0x0002 | port_type << 4).to_bytes(2, "little")
    cfg[0x44:0x48] = (_code(mps_supported) | 0x8000).to_bytes(
        4, "little"
    )  # + role-based error reporting
    cfg[0x48:0x4A] = (_code(mps) << 5 | _code(mrrs) << 12 | 0x0010).to_bytes(
        2, "little"
    )  # + relaxed ordering
    ecaps: list[tuple[int, bytes]] = []
    if acs_ctrl is not None:
        ecaps.append(
            (0x000D, ACS_DEFAULT_CAP.to_bytes(2, "little") + acs_ctrl.to_bytes(2, "little"))
        )
    if ats_enabled is not None:
        ecaps.append(
            (
                0x000F,
                (0x0020).to_bytes(2, "little")
                + (0x8000 if ats_enabled else 0).to_bytes(2, "little"),
            )
        )
    off = 0x100
    for i, (cap_id, body) in enumerate(ecaps):
        nxt = off + 0x40 if i + 1 < len(ecaps) else 0
        cfg[off : off + 4] = (cap_id | 1 << 16 | nxt << 20).to_bytes(4, "little")
        cfg[off + 4 : off + 4 + len(body)] = body
        off = nxt
    return bytes(cfg[:size])

"""RoCE port settings sysfs and configfs show: ECN (DCQCN) per priority, rdma_cm's defaults, netdev MTU.

* ``class/net/<if>/ecn/roce_np/enable/<prio>`` and ``.../roce_rp/enable/<prio>``: mlx5's per-priority
  switches of the notification point (CNPs sent on marked packets) and reaction point (rate reduced
  on CNPs) of DCQCN, ``0`` or ``1`` (drivers/net/ethernet/mellanox/mlx5/core/en_sysfs.c in
  MLNX_OFED; absent on in-tree kernels and other drivers: unknown).
* ``kernel/config/rdma_cm/<dev>/ports/<port>/default_roce_mode`` (``RoCE v2`` / ``IB/RoCE v1``) and
  ``default_roce_tos`` (0..255): configfs, present only while configfs is mounted at
  /sys/kernel/config and after ``mkdir /sys/kernel/config/rdma_cm/<dev>`` (drivers/infiniband/core/
  cma_configfs.c); the kernel's defaults are RoCE v2 and 0 (cma.c, CMA_PREFERRED_ROCE_GID_TYPE).
* ``class/net/<if>/mtu``: the port's active MTU is the largest IB MTU (256..4096) that fits in the
  netdev's MTU less the RoCE headers (include/rdma/ib_addr.h ``iboe_get_mtu``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ibdiag.node.dcb import PRIORITIES
from ibdiag.node.model import Port, port_name
from ibdiag.node.netdev import parse_mtu
from ibdiag.node.sysfs import SysfsRoot
from ibdiag.parse import parse_uint

#: GRH 40 + UDP 8 + BTH 12 + XRC 4 + AtomicETH 28 + ICRC 4 bytes (include/rdma/ib_verbs.h, iboe_get_mtu).
ROCE_HEADER_BYTES = 96
IB_MTUS = (4096, 2048, 1024, 512, 256)


def active_mtu(netdev_mtu: int) -> int | None:
    """The RoCE port's active MTU for a netdev MTU (``ibv_devinfo``'s active_mtu); None below 256."""
    room = netdev_mtu - ROCE_HEADER_BYTES
    return next((m for m in IB_MTUS if m <= room), None)


def _flag(text: str) -> bool:
    return parse_uint(text, 1, "enable flag") == 1


def _tos(text: str) -> int:
    return parse_uint(text, 255, "ToS")


@dataclass(frozen=True)
class RocePort:
    """One RoCE port's settings; None is unknown."""

    port: Port
    mtu: int | None
    ecn_np: tuple[bool, ...] | None
    """Notification point enabled per priority 0..7."""
    ecn_rp: tuple[bool, ...] | None
    cm_mode: str | None
    cm_tos: int | None

    @property
    def name(self) -> str:
        return port_name(self.port)

    @property
    def active_mtu(self) -> int | None:
        return None if self.mtu is None else active_mtu(self.mtu)

    def to_json(self) -> dict[str, Any]:
        def prios(flags: tuple[bool, ...] | None) -> list[int] | None:
            return None if flags is None else [i for i, on in enumerate(flags) if on]

        return {
            "port": self.name,
            "netdev": self.port.netdev,
            "mtu": self.mtu,
            "active_mtu": self.active_mtu,
            "ecn_np": prios(self.ecn_np),
            "ecn_rp": prios(self.ecn_rp),
            "rdma_cm_roce_mode": self.cm_mode,
            "rdma_cm_roce_tos": self.cm_tos,
        }


def _ecn(sysfs: SysfsRoot, netdev: str, point: str) -> tuple[bool, ...] | None:
    base = f"class/net/{netdev}/ecn/{point}/enable"
    if not sysfs.is_dir(base):
        return None
    flags = [sysfs.read_as(f"{base}/{p}", _flag) for p in range(PRIORITIES)]
    if any(f is None for f in flags):
        return None
    return tuple(bool(f) for f in flags)


def read_roce_port(sysfs: SysfsRoot, port: Port) -> RocePort:
    netdev = port.netdev
    cm = f"kernel/config/rdma_cm/{port.adapter}/ports/{port.port}"
    mode = sysfs.read(f"{cm}/default_roce_mode") if sysfs.is_dir(cm) else None
    if mode is not None and mode not in ("RoCE v2", "IB/RoCE v1"):
        sysfs.record(f"{cm}/default_roce_mode", "malformed", f"not a RoCE mode: {mode[:40]!r}")
        mode = None
    return RocePort(
        port=port,
        mtu=sysfs.read_as(f"class/net/{netdev}/mtu", parse_mtu) if netdev else None,
        ecn_np=_ecn(sysfs, netdev, "roce_np") if netdev else None,
        ecn_rp=_ecn(sysfs, netdev, "roce_rp") if netdev else None,
        cm_mode=mode,
        cm_tos=sysfs.read_as(f"{cm}/default_roce_tos", _tos) if sysfs.is_dir(cm) else None,
    )

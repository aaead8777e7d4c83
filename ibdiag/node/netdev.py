"""Network interfaces as ``/sys/class/net`` shows them (``ip -br link``): name, state, MTU."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ibdiag.node.sysfs import SysfsRoot
from ibdiag.parse import parse_uint

#: Largest MTU a netdev can print: net_device.mtu is an unsigned int bounded by max_mtu, which some
#: drivers leave at INT_MAX; loopback's default is 65536 (drivers/net/loopback.c), above IP's 0xFFFF.
MAX_MTU = 2**31 - 1


@dataclass(frozen=True)
class Netdev:
    name: str
    operstate: str | None
    """``up``, ``down``, ``unknown`` (``operstate``: Documentation/ABI/testing/sysfs-class-net)."""
    mtu: int | None

    @property
    def up(self) -> bool:
        # A virtual device without carrier reporting (lo, some tunnels) says "unknown" while it works.
        return self.operstate in ("up", "unknown")

    @property
    def loopback(self) -> bool:
        return self.name == "lo"

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "operstate": self.operstate, "mtu": self.mtu}


def parse_mtu(text: str) -> int:
    return parse_uint(text, MAX_MTU, "MTU")


def read_netdev(sysfs: SysfsRoot, name: str) -> Netdev:
    base = f"class/net/{name}"
    return Netdev(name, sysfs.read(f"{base}/operstate"), sysfs.read_as(f"{base}/mtu", parse_mtu))


def read_netdevs(sysfs: SysfsRoot) -> tuple[Netdev, ...]:
    """Every entry of ``class/net`` (an entry that leads outside the root is left out, recorded)."""
    return tuple(
        read_netdev(sysfs, n)
        for n in sysfs.listdir("class/net")
        if not sysfs.leads_outside(f"class/net/{n}")
    )

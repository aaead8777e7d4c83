"""Pure parsers of the value formats sysfs prints. Each raises ``ValueError`` on text it cannot read.

No I/O here: :class:`ibdiag.sysfs.SysfsRoot` reads the file and hands the text to one of these.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# --- numbers ----------------------------------------------------------------------------------


def parse_int(text: str) -> int:
    """``"42"`` -> 42. Rejects empty text and trailing garbage."""
    t = text.strip()
    if not re.fullmatch(r"[+-]?\d+", t):
        raise ValueError(f"not an integer: {text!r}")
    return int(t)


def parse_hex(text: str) -> int:
    """``"0x10de"`` -> 0x10de; also accepts hex without the prefix (``"15b3"``)."""
    t = text.strip().lower()
    if t.startswith("0x"):
        t = t[2:]
    if not re.fullmatch(r"[0-9a-f]+", t):
        raise ValueError(f"not a hex number: {text!r}")
    return int(t, 16)


def parse_numa_node(text: str) -> int | None:
    """``"1"`` -> 1; ``"-1"`` (no NUMA information, e.g. a VM) -> None."""
    n = parse_int(text)
    if n < -1:
        raise ValueError(f"not a NUMA node: {text!r}")
    return None if n == -1 else n


def parse_cpulist(text: str) -> tuple[int, ...]:
    """``"0-15,32-47"`` -> (0, ..., 15, 32, ..., 47); ``""`` -> (). Format of ``local_cpulist`` and ``node*/cpulist``."""
    t = text.strip()
    if not t:
        return ()
    cpus: list[int] = []
    for part in t.split(","):
        m = re.fullmatch(r"(\d+)(?:-(\d+))?(?::(\d+)/(\d+))?", part.strip())
        if not m:
            raise ValueError(f"not a CPU list: {text!r}")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) else lo
        if hi < lo:
            raise ValueError(f"descending CPU range in {text!r}")
        # The kernel's bitmap list format allows "0-15:2/4" (used/group); rare, but expand it right.
        if m.group(3):
            used, group = int(m.group(3)), int(m.group(4))
            cpus.extend(c for c in range(lo, hi + 1) if (c - lo) % group < used)
        else:
            cpus.extend(range(lo, hi + 1))
    return tuple(sorted(set(cpus)))


def format_cpulist(cpus: tuple[int, ...] | list[int]) -> str:
    """(0, 1, 2, 3, 8) -> ``"0-3,8"`` (what ``nvidia-smi topo -m`` prints as CPU Affinity)."""
    out: list[str] = []
    cs = sorted(set(cpus))
    i = 0
    while i < len(cs):
        j = i
        while j + 1 < len(cs) and cs[j + 1] == cs[j] + 1:
            j += 1
        out.append(str(cs[i]) if i == j else f"{cs[i]}-{cs[j]}")
        i = j + 1
    return ",".join(out)


# --- InfiniBand port attributes ------------------------------------------------------------------

#: ``ports/N/state`` values (kernel ``ib_port_state``); the text after the colon is what sysfs prints.
PORT_STATES = {0: "NOP", 1: "DOWN", 2: "INIT", 3: "ARMED", 4: "ACTIVE", 5: "ACTIVE_DEFER"}

#: ``ports/N/phys_state`` values (IBTA PortPhysicalState; kernel ``phys_state_to_str``).
PHYS_STATES = {
    1: "Sleep",
    2: "Polling",
    3: "Disabled",
    4: "PortConfigurationTraining",
    5: "LinkUp",
    6: "LinkErrorRecovery",
    7: "Phy Test",
}


def parse_enum_state(text: str) -> tuple[int, str]:
    """``"4: ACTIVE"`` -> (4, "ACTIVE"); ``"5: LinkUp"`` -> (5, "LinkUp"); ``"7: Phy Test"`` keeps the space."""
    m = re.fullmatch(r"\s*(\d+)\s*:\s*(.*?)\s*", text)
    if not m:
        raise ValueError(f"not a state: {text!r}")
    return int(m.group(1)), m.group(2)


#: Per-lane signalling rates in Gb/s (IBTA; FDR10 is 10 Gb/s with 64b/66b encoding).
LANE_RATES_GBPS = {
    "SDR": 2.5,
    "DDR": 5.0,
    "QDR": 10.0,
    "FDR10": 10.0,
    "FDR": 14.0,
    "EDR": 25.0,
    "HDR": 50.0,
    "NDR": 100.0,
    "XDR": 200.0,
}


@dataclass(frozen=True)
class IbRate:
    rate_gbps: float
    """Total port rate, e.g. 400.0."""
    width: int | None
    """Lanes (the ``4`` of ``4X``)."""
    speed: str | None
    """Lane speed name, ``NDR`` ...; None when the kernel printed none (old kernels print SDR as bare ``4X``)."""


def parse_ib_rate(text: str) -> IbRate:
    """``"400 Gb/sec (4X NDR)"``, ``"2.5 Gb/sec (1X SDR)"``, ``"10 Gb/sec (4X)"`` (old kernels), ``"40 Gb/sec"``.

    Format from the kernel's ``rate_show`` (drivers/infiniband/core/sysfs.c): ``"%d%s Gb/sec (%dX%s)"``.
    """
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*Gb/sec(?:\s*\((\d+)X\s*([A-Za-z0-9]*)\))?\s*", text)
    if not m:
        raise ValueError(f"not a port rate: {text!r}")
    speed = m.group(3) or None
    return IbRate(float(m.group(1)), int(m.group(2)) if m.group(2) else None, speed)


def parse_lid(text: str) -> int:
    """``"0x3a4"`` -> 932 (``ports/N/lid`` and ``sm_lid`` are printed in hex)."""
    return parse_hex(text)


# --- PCI ----------------------------------------------------------------------------------------

#: PCIe generation by transfer rate (GT/s per lane).
PCIE_GEN_BY_GTS = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6, 128.0: 7}


def parse_pci_speed(text: str) -> float | None:
    """``"32.0 GT/s PCIe"`` -> 32.0, ``"8 GT/s"`` (old kernels) -> 8.0, ``"Unknown"`` -> None (GT/s)."""
    t = text.strip()
    if t.lower().startswith("unknown"):
        return None
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*GT/s(?:\s+PCIe)?", t)
    if not m:
        raise ValueError(f"not a PCIe link speed: {text!r}")
    return float(m.group(1))


def parse_pci_width(text: str) -> int:
    """``"16"`` -> 16 lanes (``current_link_width``; some devices print ``x16``)."""
    t = text.strip().lower().lstrip("x")
    return parse_int(t)


def pcie_gen(speed_gts: float | None) -> int | None:
    if speed_gts is None:
        return None
    return PCIE_GEN_BY_GTS.get(float(speed_gts))


_BDF_RE = re.compile(r"^([0-9a-f]{4,8}):([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])$")


def is_pci_address(name: str) -> bool:
    """``"0000:17:00.0"`` (domain:bus:device.function)."""
    return bool(_BDF_RE.match(name.lower()))


def pci_sort_key(address: str) -> tuple[int, int, int, int]:
    """Numeric order of PCI addresses: NVML numbers GPUs in this order."""
    m = _BDF_RE.match(address.lower())
    if not m:
        raise ValueError(f"not a PCI address: {address!r}")
    return (int(m.group(1), 16), int(m.group(2), 16), int(m.group(3), 16), int(m.group(4), 16))

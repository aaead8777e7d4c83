"""Pure parsers of the value formats sysfs prints. Each raises ``ValueError`` on text it cannot read.

No I/O here: :class:`ibdiag.node.sysfs.SysfsRoot` reads the file and hands the text to one of these.
Every number is checked against what the kernel can print: ASCII digits only (``int()`` would take
``"٣"`` or ``"²"``), a bounded number of them (a 400-digit rate would parse to ``inf``), and a value
within the field's range; anything else is a ``ValueError`` whose message shows only an excerpt.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from ibdiag.text import safe_value

# --- numbers ----------------------------------------------------------------------------------

#: Most digits of a decimal sysfs number: a u64 (18446744073709551615) has 20.
MAX_DECIMAL_DIGITS = 20
_INT_RE = re.compile(rf"[+-]?[0-9]{{1,{MAX_DECIMAL_DIGITS}}}")
_HEX_RE = re.compile(r"(?:0x)?([0-9a-f]{1,16})")
U64_MAX = 2**64 - 1


_DECIMAL_RE = re.compile(
    r"[+-]?(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|inf|infinity|nan)", re.IGNORECASE
)
#: Longest decimal number accepted (a float has 17 significant digits; an exponent a few more).
MAX_DECIMAL_CHARS = 64


def parse_decimal(text: str | float) -> float:
    """``"0.5"``, ``"2"``, ``"1e-3"`` -> a float. Stricter than ``float()``, which also takes ``"1_000"``
    and other scripts' digits (``"１０"``): a command-line number is ASCII digits, one point and an
    exponent. ``inf`` and ``nan`` (and ``1e400``, which is inf) pass, for each flag's own range check
    to refuse naming the flag. A float (a flag's default) is itself."""
    if isinstance(text, float):
        return text
    t = text.strip()
    if len(t) > MAX_DECIMAL_CHARS or not _DECIMAL_RE.fullmatch(t):
        raise ValueError(
            f"{safe_value(text)} is not a decimal number (ASCII digits, a point, an exponent such as 1e-3)"
        )
    return float(t)


def parse_int(text: str) -> int:
    """``"42"`` -> 42, ``"-1"`` -> -1. Rejects empty text, trailing garbage, non-ASCII digits and more
    than 20 digits."""
    t = text.strip()
    if not _INT_RE.fullmatch(t):
        raise ValueError(f"not an integer: {safe_value(text)}")
    return int(t)


def parse_uint(text: str, max_value: int, what: str = "number") -> int:
    """A decimal number from 0 to ``max_value`` (what the kernel's ``%u`` of that field can print)."""
    n = parse_int(text)
    if not 0 <= n <= max_value:
        raise ValueError(f"{what} {n} is outside 0..{max_value}")
    return n


def parse_hex(text: str) -> int:
    """``"0x10de"`` -> 0x10de; also accepts hex without the prefix (``"15b3"``); at most 16 digits."""
    m = _HEX_RE.fullmatch(text.strip().lower())
    if not m:
        raise ValueError(f"not a hex number: {safe_value(text)}")
    return int(m.group(1), 16)


def _hex_bounded(text: str, max_value: int, what: str) -> int:
    n = parse_hex(text)
    if n > max_value:
        raise ValueError(f"{what} {safe_value(text.strip())} is wider than 0x{max_value:x}")
    return n


def parse_pci_id(text: str) -> int:
    """``vendor``/``device``: 16-bit (pci-sysfs.c prints ``0x%04x``)."""
    return _hex_bounded(text, 0xFFFF, "PCI id")


def parse_pci_class(text: str) -> int:
    """``class``: 24-bit (pci-sysfs.c prints ``0x%06x``)."""
    return _hex_bounded(text, 0xFFFFFF, "PCI class")


#: Highest NUMA node id + 1 the kernel can have: MAX_NUMNODES = 1 << NODES_SHIFT, NODES_SHIFT <= 10.
MAX_NUMA_NODES = 1024


def parse_numa_node(text: str) -> int | None:
    """``"1"`` -> 1; ``"-1"`` (no NUMA information, e.g. a VM) -> None. Ids from 0 to 1023."""
    n = parse_int(text)
    if n == -1:
        return None
    if not 0 <= n < MAX_NUMA_NODES:
        raise ValueError(
            f"not a NUMA node: {safe_value(text.strip())} (the kernel has at most {MAX_NUMA_NODES})"
        )
    return n


# --- CPU lists ----------------------------------------------------------------------------------

#: CPU ids are below NR_CPUS, at most 8192 in any kernel configuration (x86 MAXSMP, powerpc).
MAX_CPUS = 8192


@dataclass(frozen=True)
class CpuList:
    """A set of CPU ids kept as sorted, disjoint ranges (``0-55,112-167`` is two ranges, not 112 ints).

    Iterating yields the ids; ``len()`` counts them; ``str()`` is the kernel's list format."""

    ranges: tuple[tuple[int, int], ...] = ()
    """Inclusive ``(first, last)`` pairs, sorted, neither overlapping nor adjacent."""

    @classmethod
    def of(cls, spans: Iterable[tuple[int, int]]) -> CpuList:
        merged: list[tuple[int, int]] = []
        for lo, hi in sorted(spans):
            if merged and lo <= merged[-1][1] + 1:
                merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
            else:
                merged.append((lo, hi))
        return cls(tuple(merged))

    def __iter__(self) -> Iterator[int]:
        for lo, hi in self.ranges:
            yield from range(lo, hi + 1)

    def __len__(self) -> int:
        return sum(hi - lo + 1 for lo, hi in self.ranges)

    def __bool__(self) -> bool:
        return bool(self.ranges)

    def __contains__(self, cpu: object) -> bool:
        return isinstance(cpu, int) and any(lo <= cpu <= hi for lo, hi in self.ranges)

    def __str__(self) -> str:
        return ",".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in self.ranges)


_CPU_RANGE_RE = re.compile(r"([0-9]{1,5})(?:-([0-9]{1,5})(?::([0-9]{1,5})/([0-9]{1,5}))?)?")


def parse_cpulist(text: str) -> CpuList:
    """``"0-15,32-47"`` -> CpuList((0, 15), (32, 47)); ``""`` -> empty. Format of ``local_cpulist`` and
    ``node*/cpulist`` (the kernel's bitmap list format, lib/bitmap.c: ``0-15:2/4`` takes the first 2
    of every 4). Ids must be below :data:`MAX_CPUS`; the group size must be at least 1 and the used
    count at most the group, as ``bitmap_parselist`` demands."""
    t = text.strip()
    if not t:
        return CpuList()
    spans: list[tuple[int, int]] = []
    for part in t.split(","):
        m = _CPU_RANGE_RE.fullmatch(part.strip())
        if not m:
            raise ValueError(f"not a CPU list: {safe_value(text)}")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) else lo
        if hi < lo:
            raise ValueError(f"descending CPU range {safe_value(part)} in a CPU list")
        if hi >= MAX_CPUS:
            raise ValueError(f"CPU {hi} in {safe_value(part)}: CPU ids are below {MAX_CPUS}")
        if m.group(3):
            used, group = int(m.group(3)), int(m.group(4))
            if group < 1 or used > group:
                raise ValueError(
                    f"bad CPU group {safe_value(part)}: the form is FIRST-LAST:USED/GROUP with 1 <= GROUP and USED <= GROUP"
                )
            spans.extend(
                (start, min(start + used - 1, hi)) for start in range(lo, hi + 1, group) if used
            )
        else:
            spans.append((lo, hi))
    return CpuList.of(spans)


def format_cpulist(cpus: CpuList | Iterable[int]) -> str:
    """(0, 1, 2, 3, 8) -> ``"0-3,8"`` (what ``nvidia-smi topo -m`` prints as CPU Affinity)."""
    if isinstance(cpus, CpuList):
        return str(cpus)
    return str(CpuList.of((c, c) for c in cpus))


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


#: Each matched against the stripped value, so no run of spaces stands next to another (linear).
_ENUM_STATE = re.compile(r"([0-9]{1,3})\s{0,8}:\s{0,8}(.*)")
_IB_RATE = re.compile(
    r"([0-9]{1,4}(?:\.[0-9]{1,2})?)\s{0,8}Gb/sec(?:\s{0,8}\(([0-9]{1,2})X\s{0,8}([A-Za-z0-9]{0,8})\))?"
)
_PCI_SPEED = re.compile(r"([0-9]{1,3}(?:\.[0-9]{1,2})?)\s{0,8}GT/s(?:\s{1,8}PCIe)?")


def parse_enum_state(text: str) -> tuple[int, str]:
    """``"4: ACTIVE"`` -> (4, "ACTIVE"); ``"5: LinkUp"`` -> (5, "LinkUp"); ``"7: Phy Test"`` keeps the space.

    The code is a u8 (core/sysfs.c prints ``"%d: %s"``)."""
    m = _ENUM_STATE.fullmatch(text.strip())
    if not m or int(m.group(1)) > 255:
        raise ValueError(f"not a state: {safe_value(text)}")
    return int(m.group(1)), m.group(2)


#: Per-lane signalling rates in Gb/s (IBA; FDR10 is 10 Gb/s with 64b/66b encoding).
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
#: Port widths the kernel prints (ib_width_enum_to_int: 1X, 2X, 4X, 8X, 12X).
IB_WIDTHS = (1, 2, 4, 8, 12)
#: The fastest rate rate_show can print: 12X at XDR's 200 Gb/s per lane.
MAX_IB_RATE_GBPS = 12 * LANE_RATES_GBPS["XDR"]


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

    Format from the kernel's ``rate_show`` (drivers/infiniband/core/sysfs.c): ``"%d%s Gb/sec (%dX%s)"``,
    the rate being the lane rate times the width: a rate that is not (``400 Gb/sec (1X SDR)``), a
    width the kernel has no name for, or more than 2400 Gb/s is not a rate the kernel printed.
    """
    m = _IB_RATE.fullmatch(text.strip())
    if not m:
        raise ValueError(f"not a port rate: {safe_value(text)}")
    rate = float(m.group(1))
    width = int(m.group(2)) if m.group(2) else None
    speed = m.group(3) or None
    if not 0 < rate <= MAX_IB_RATE_GBPS:
        raise ValueError(
            f"port rate {m.group(1)} Gb/s is outside what the kernel prints (up to {MAX_IB_RATE_GBPS:g})"
        )
    if width is not None:
        if width not in IB_WIDTHS:
            raise ValueError(
                f"port width {width}X is not one the kernel prints ({', '.join(f'{w}X' for w in IB_WIDTHS)})"
            )
        lane = LANE_RATES_GBPS.get(speed or "SDR")  # no speed name: old kernels' SDR
        if lane is not None and abs(lane * width - rate) > 0.01:
            raise ValueError(
                f"port rate {safe_value(text.strip())}: {width}X {speed or 'SDR'} is {lane * width:g} Gb/s"
            )
    return IbRate(rate, width, speed)


def parse_lid(text: str) -> int:
    """``"0x3a4"`` -> 932 (``ports/N/lid`` and ``sm_lid`` are printed in hex; a LID is 16 bits)."""
    return _hex_bounded(text, 0xFFFF, "LID")


#: Numbered directory entries (``ports/1``, ``gids/0``) as the kernel names them: ``%u``, no leading zeros.
_ENTRY_NUMBER_RE = re.compile(r"0|[1-9][0-9]{0,9}")


def parse_entry_number(name: str) -> int:
    """``"1"`` -> 1 for ``ports/<N>`` and ``gids/<N>`` (u32 in the rdma core); ``"01"``, ``"²"`` or
    ``"1a"`` are not names the kernel makes (and ``int()`` would read some of them)."""
    if not _ENTRY_NUMBER_RE.fullmatch(name) or int(name) > 2**32 - 1:
        raise ValueError(f"not a numbered entry: {safe_value(name)}")
    return int(name)


# --- PCI ----------------------------------------------------------------------------------------

#: PCIe generation by transfer rate (GT/s per lane).
PCIE_GEN_BY_GTS = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6, 128.0: 7}


def parse_pci_speed(text: str) -> float | None:
    """``"32.0 GT/s PCIe"`` -> 32.0, ``"8 GT/s"`` (old kernels) -> 8.0, ``"Unknown"`` -> None (GT/s).

    Only the rates of a PCIe generation (pci_speed_string in drivers/pci/probe.c) are accepted."""
    t = text.strip()
    if t.lower().startswith("unknown"):
        return None
    m = _PCI_SPEED.fullmatch(t)
    if not m:
        raise ValueError(f"not a PCIe link speed: {safe_value(text)}")
    gts = float(m.group(1))
    if gts not in PCIE_GEN_BY_GTS:
        raise ValueError(
            f"{m.group(1)} GT/s is not a PCIe link speed ({', '.join(f'{g:g}' for g in PCIE_GEN_BY_GTS)})"
        )
    return gts


#: Link widths a PCIe link trains to (the 6-bit Negotiated Link Width; 0: not trained).
PCIE_WIDTHS = (0, 1, 2, 4, 8, 12, 16, 32)
#: What max_link_width prints when the device has no link capability (PCIE_LNK_WIDTH_UNKNOWN).
PCIE_WIDTH_UNKNOWN = 255


def parse_pci_width(text: str) -> int | None:
    """``"16"`` -> 16 lanes; ``"255"`` (PCIE_LNK_WIDTH_UNKNOWN) -> None.

    The kernel prints ``%u`` (drivers/pci/pci-sysfs.c current_link_width_show, max_link_width_show);
    ``x16`` is lspci's spelling (pciutils ls-caps.c prints ``Width x%d``), accepted for trees written
    from lspci output."""
    t = text.strip().lower()
    if t.startswith("x"):
        t = t[1:]
    n = parse_int(t)
    if n == PCIE_WIDTH_UNKNOWN:
        return None
    if n not in PCIE_WIDTHS:
        raise ValueError(f"not a PCIe link width: {safe_value(text.strip())}")
    return n


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
        raise ValueError(f"not a PCI address: {safe_value(address)}")
    return (int(m.group(1), 16), int(m.group(2), 16), int(m.group(3), 16), int(m.group(4), 16))


# --- software versions -----------------------------------------------------------------------------

#: Characters of a kernel release (``uname -r``): the kernel keeps it in ``utsname()->release``, a
#: ``char[__NEW_UTS_LEN + 1]`` with __NEW_UTS_LEN = 64 (include/uapi/linux/utsname.h).
MAX_KERNEL_RELEASE_CHARS = 64
#: ``6.8.0-45-generic``, ``5.14.0-427.13.1.el9_4.x86_64``, ``6.1.0-57-amd64``, ``6.9.0-rc1+``: printable
#: ASCII without blanks (the build makes it from VERSION.PATCHLEVEL.SUBLEVEL plus CONFIG_LOCALVERSION).
_KERNEL_RELEASE_RE = re.compile(rf"[0-9A-Za-z][\x21-\x7e]{{0,{MAX_KERNEL_RELEASE_CHARS - 1}}}")


def parse_kernel_release(text: str) -> str:
    """``/proc/sys/kernel/osrelease`` (what ``uname -r`` prints): ``"6.8.0-45-generic"``."""
    if not _KERNEL_RELEASE_RE.fullmatch(text):
        raise ValueError(
            f"not a kernel release (printable ASCII without blanks, at most {MAX_KERNEL_RELEASE_CHARS} characters): {safe_value(text)}"
        )
    return text


#: Characters of a module's ``version`` this tool believes. The kernel does not bound MODULE_VERSION;
#: the longest of Debian 12's 6.1 modules has 43 (``modinfo -F version``), MLNX_OFED's look like ``24.10-1.1.4``.
MAX_MODULE_VERSION_CHARS = 64
#: Printable ASCII, inner blanks allowed: real ones include ``0.29 04Jul2016`` and ``1.2.1[50983]-custom``.
_MODULE_VERSION_RE = re.compile(
    rf"[\x21-\x7e](?:[\x20-\x7e]{{0,{MAX_MODULE_VERSION_CHARS - 2}}}[\x21-\x7e])?"
)
#: ``srcversion``: modpost's digest of the module's sources, upper-case hex (23 digits on Linux 6.1:
#: ``0716E17594E7E6D0EC026C5``; scripts/mod/sumversion.c); a little room either way.
_SRCVERSION_RE = re.compile(r"[0-9A-F]{16,32}")


def parse_module_version(text: str) -> str:
    """``/sys/module/<name>/version`` (MODULE_VERSION; ``modinfo -F version``): ``"24.10-1.1.4"``."""
    if not _MODULE_VERSION_RE.fullmatch(text):
        raise ValueError(
            f"not a module version (printable ASCII, at most {MAX_MODULE_VERSION_CHARS} characters): {safe_value(text)}"
        )
    return text


def parse_srcversion(text: str) -> str:
    """``/sys/module/<name>/srcversion`` (``modinfo -F srcversion``): 16 to 32 upper-case hex digits."""
    if not _SRCVERSION_RE.fullmatch(text):
        raise ValueError(
            f"not a module srcversion (16 to 32 upper-case hex digits): {safe_value(text)}"
        )
    return text

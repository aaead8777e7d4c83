"""What each RDMA port counter is: its width (which decides saturation), its IBA name, its kind.

This is the one place that knows counter widths. Source: the kernel's
``drivers/infiniband/core/sysfs.c`` (``PORT_PMA_ATTR(name, counter, width, offset)`` for the
PortCounters attribute, ``PORT_PMA_ATTR_EXT(name, width, offset)`` for PortCountersExtended), which
follows the IBA PortCounters / PortCountersExtended layouts that ``perfquery`` and ``perfquery -x`` print.

IBA counters *saturate*: they stop at all ones instead of wrapping (IBA vol. 1, PortCounters). A
value at its maximum is therefore a lower bound, and a value lower than before means the counters
were reset.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Kind(str, Enum):
    ERROR = "error"
    """A link or packet error: any increase deserves attention."""
    DATA = "data"
    """``port_xmit_data``/``port_rcv_data``: 4-octet words (bytes = value x 4)."""
    PACKETS = "packets"
    WAIT = "wait"
    """``port_xmit_wait``: ticks with data to send and no credits (backpressure)."""
    OTHER = "other"


@dataclass(frozen=True)
class CounterSpec:
    name: str
    """File name under ``ports/N/counters/``."""
    iba: str
    """IBA / ``perfquery`` field name (SymbolErrorCounter ...)."""
    bits: int | None
    """Width in bits; ``None`` for data/packet counters whose width is 32 or 64 (extended counters)."""
    kind: Kind
    prom: str | None
    """node_exporter's infiniband collector metric (without ``node_infiniband_``), where one exists."""
    meaning: str


_C = CounterSpec

#: ``ports/N/counters/*`` (kernel drivers/infiniband/core/sysfs.c, PORT_PMA_ATTR / PORT_PMA_ATTR_EXT).
IB_COUNTERS: dict[str, CounterSpec] = {
    c.name: c
    for c in (
        _C(
            "symbol_error",
            "SymbolErrorCounter",
            16,
            Kind.ERROR,
            "symbol_error_total",
            "minor link errors on the physical lanes",
        ),
        _C(
            "link_error_recovery",
            "LinkErrorRecoveryCounter",
            8,
            Kind.ERROR,
            "link_error_recovery_total",
            "link retrained after an error (recovered)",
        ),
        _C(
            "link_downed",
            "LinkDownedCounter",
            8,
            Kind.ERROR,
            "link_downed_total",
            "link failed to recover and went down",
        ),
        _C(
            "port_rcv_errors",
            "PortRcvErrors",
            16,
            Kind.ERROR,
            "port_errors_received_total",
            "received packets with errors",
        ),
        _C(
            "port_rcv_remote_physical_errors",
            "PortRcvRemotePhysicalErrors",
            16,
            Kind.ERROR,
            "port_receive_remote_physical_errors_total",
            "received packets marked bad (EBP) upstream",
        ),
        _C(
            "port_rcv_switch_relay_errors",
            "PortRcvSwitchRelayErrors",
            16,
            Kind.ERROR,
            "port_receive_switch_relay_errors_total",
            "packets a switch could not forward",
        ),
        _C(
            "port_xmit_discards",
            "PortXmitDiscards",
            16,
            Kind.ERROR,
            "port_discards_transmitted_total",
            "outbound packets discarded (port down or congestion timeout)",
        ),
        _C(
            "port_xmit_constraint_errors",
            "PortXmitConstraintErrors",
            8,
            Kind.ERROR,
            "port_constraint_errors_transmitted_total",
            "outbound packets dropped by partition/filter constraints",
        ),
        _C(
            "port_rcv_constraint_errors",
            "PortRcvConstraintErrors",
            8,
            Kind.ERROR,
            "port_constraint_errors_received_total",
            "inbound packets dropped by partition/filter constraints",
        ),
        _C(
            "local_link_integrity_errors",
            "LocalLinkIntegrityErrors",
            4,
            Kind.ERROR,
            "local_link_integrity_errors_total",
            "local physical errors exceeded LocalPhyErrors",
        ),
        _C(
            "excessive_buffer_overrun_errors",
            "ExcessiveBufferOverrunErrors",
            4,
            Kind.ERROR,
            "excessive_buffer_overrun_errors_total",
            "consecutive receive buffer overruns",
        ),
        _C(
            "VL15_dropped",
            "VL15Dropped",
            16,
            Kind.ERROR,
            "vl15_dropped_total",
            "subnet management packets dropped",
        ),
        _C(
            "port_xmit_data",
            "PortXmitData",
            None,
            Kind.DATA,
            None,
            "data transmitted, in 4-octet words",
        ),
        _C(
            "port_rcv_data", "PortRcvData", None, Kind.DATA, None, "data received, in 4-octet words"
        ),
        _C(
            "port_xmit_packets",
            "PortXmitPkts",
            None,
            Kind.PACKETS,
            "port_packets_transmitted_total",
            "packets transmitted",
        ),
        _C(
            "port_rcv_packets",
            "PortRcvPkts",
            None,
            Kind.PACKETS,
            "port_packets_received_total",
            "packets received",
        ),
        # PortXmitWait stays the 32-bit PortCounters field even where the extended set is used (sysfs.c).
        _C(
            "port_xmit_wait",
            "PortXmitWait",
            32,
            Kind.WAIT,
            "port_transmit_wait_total",
            "ticks with data to send but no flow-control credits",
        ),
        # Only in the extended set (pma_attrs_ext in sysfs.c): their presence proves 64-bit counters.
        _C(
            "unicast_xmit_packets",
            "PortUnicastXmitPkts",
            64,
            Kind.PACKETS,
            "unicast_packets_transmitted_total",
            "unicast packets transmitted",
        ),
        _C(
            "unicast_rcv_packets",
            "PortUnicastRcvPkts",
            64,
            Kind.PACKETS,
            "unicast_packets_received_total",
            "unicast packets received",
        ),
        _C(
            "multicast_xmit_packets",
            "PortMulticastXmitPkts",
            64,
            Kind.PACKETS,
            "multicast_packets_transmitted_total",
            "multicast packets transmitted",
        ),
        _C(
            "multicast_rcv_packets",
            "PortMulticastRcvPkts",
            64,
            Kind.PACKETS,
            "multicast_packets_received_total",
            "multicast packets received",
        ),
    )
}

ERROR_COUNTERS: tuple[str, ...] = tuple(n for n, c in IB_COUNTERS.items() if c.kind is Kind.ERROR)
#: Counters whose width is 32 or 64 bits depending on extended-counter support.
VARIABLE_WIDTH: tuple[str, ...] = tuple(n for n, c in IB_COUNTERS.items() if c.bits is None)
#: Files that exist only when the kernel uses PortCountersExtended (64-bit data and packet counters).
EXTENDED_ONLY: tuple[str, ...] = (
    "unicast_xmit_packets",
    "unicast_rcv_packets",
    "multicast_xmit_packets",
    "multicast_rcv_packets",
)

#: The data counters and the byte values the reader derives from them (x 4: they count 4-octet words).
DATA_BYTES: dict[str, str] = {"port_xmit_data": "xmit_bytes", "port_rcv_data": "rcv_bytes"}
BYTES_PER_DATA_WORD = 4


#: What sysfs prints instead of a value when the device has no PMA (old kernels, sysfs.c show_pma_counter).
NO_PMA = "N/A (no PMA)"


#: Per-counter advice for the IB error counters and port_xmit_wait (what an operator does next).
HINTS: dict[str, str] = {
    "symbol_error": "a marginal cable, transceiver or dirty connector: check `mlxlink -d <dev> -p <port> -c -m` (BER, eye, module) and reseat or replace the cable",
    "link_error_recovery": "the link retrained after errors (a marginal cable or optic): check `mlxlink -d <dev> -c` and the switch port",
    "link_downed": "the link flapped: check the cable/optic, the switch port's log, and `mlxlink -d <dev> -c`",
    "port_rcv_errors": "malformed packets arrived (CRC, length): the link or its far end; check mlxlink and the peer switch port's counters",
    "port_rcv_remote_physical_errors": "packets already marked bad upstream reached this port: the fault is elsewhere on the path; find the port that counts symbol or receive errors",
    "port_rcv_switch_relay_errors": "packets a switch could not forward (routing): check the subnet manager's routing tables",
    "port_xmit_discards": "packets dropped on the way out: the port went down, or packets timed out under congestion (head-of-queue lifetime)",
    "port_xmit_constraint_errors": "packets violated partition (P_Key) or filter constraints: check the subnet manager's partition configuration",
    "port_rcv_constraint_errors": "packets violated partition (P_Key) or filter constraints: check the subnet manager's partition configuration",
    "local_link_integrity_errors": "local physical errors crossed LocalPhyErrors: a marginal link; check mlxlink and the cable",
    "excessive_buffer_overrun_errors": "receive buffer overruns (flow-control credit trouble), often the link partner: check the switch port",
    "VL15_dropped": "subnet management packets dropped (the SMA was busy): usually harmless unless it grows quickly",
    "port_xmit_wait": "the port waited for flow-control credits: the receiver or the fabric behind it is congested (incast, a slow peer, oversubscription)",
}


def data_counter_bits(counters: dict[str, int | None], forced: int | None = None) -> int:
    """64 when the port uses PortCountersExtended, else 32.

    Proof of 64 bits: a file only the extended set has (unicast_/multicast_ packets, kernel
    ``pma_attrs_ext``), or a data/packet value above 2^32-1. Devices with 64-bit data counters but
    without the unicast/multicast files (``pma_attrs_noietf``) look 32-bit until a value passes 2^32;
    only the exact all-ones value is then treated as saturated. ``forced`` (config) overrides.
    """
    if forced is not None:
        return forced
    if any(name in counters for name in EXTENDED_ONLY):
        return 64
    limit = max_value(32)
    if any((counters.get(name) or 0) > limit for name in VARIABLE_WIDTH):
        return 64
    return 32


def iba_name(name: str) -> str:
    """``symbol_error`` -> ``SymbolErrorCounter``; names ibdiag does not know come back unchanged."""
    spec = IB_COUNTERS.get(name)
    return spec.iba if spec else name


def width_bits(name: str, *, data_bits: int) -> int | None:
    """Width of ``counters/<name>``; ``data_bits`` (32 or 64) for the variable-width data/packet counters.

    Files ibdiag does not know (a newer kernel) have no known width: never called saturated.
    """
    spec = IB_COUNTERS.get(name)
    if spec is None:
        return None
    return data_bits if spec.bits is None else spec.bits


def max_value(bits: int) -> int:
    return (1 << bits) - 1

"""``[counters]`` settings: thresholds, the rate limit, the xmit_wait assumption, counters not judged.

Which ports are judged and their expected rate are ``[ports]`` (:class:`~ibdiag.ports.config.PortsConfig`).

Example (every key optional; tables merge over the defaults)::

    [counters]
    rate_limit_per_s = 10
    xmit_wait_bytes_per_count = 8
    ignore_counters = ["VL15_dropped"]

    [counters.thresholds]
    symbol_error = 5
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ibdiag.counters.hw_spec import HW_JUDGED, HwGroup
from ibdiag.counters.spec import ERROR_COUNTERS, IB_COUNTERS
from ibdiag.errors import InputError

#: Counts per interval above which a counter fails. Source: infiniband-diags' default
#: error_thresholds (the values ibqueryerrors/ibcheckerrors use; IBA names in comments).
IBDIAGS_THRESHOLDS: dict[str, int] = {
    "symbol_error": 10,  # SymbolErrorCounter
    "link_error_recovery": 10,  # LinkErrorRecoveryCounter
    "link_downed": 10,  # LinkDownedCounter
    "port_rcv_errors": 10,  # PortRcvErrors
    "port_rcv_remote_physical_errors": 100,  # PortRcvRemotePhysicalErrors
    "port_rcv_switch_relay_errors": 100,  # PortRcvSwitchRelayErrors
    "port_xmit_discards": 100,  # PortXmitDiscards
    "port_xmit_constraint_errors": 100,  # PortXmitConstraintErrors
    "port_rcv_constraint_errors": 100,  # PortRcvConstraintErrors
    "local_link_integrity_errors": 10,  # LocalLinkIntegrityErrors
    "excessive_buffer_overrun_errors": 10,  # ExcessiveBufferOverrunErrors
    "VL15_dropped": 100,  # VL15Dropped
    "port_xmit_wait": 1000,  # PortXmitWait
}

#: Counters whose rate above ``rate_limit_per_s`` is excessive (issue 3: symbol errors, link error
#: recovery, receive errors, local link integrity and transmit discards).
RATE_LIMITED: tuple[str, ...] = (
    "symbol_error",
    "link_error_recovery",
    "port_rcv_errors",
    "local_link_integrity_errors",
    "port_xmit_discards",
)

#: RoCE/transport hw_counters: counts per interval above which the port warns. 0 (any increase)
#: because RoCE for RDMA is deployed lossless (PFC/ECN), so a retransmission means a drop
#: (NVIDIA RoCE deployment guidance); congestion (ECN/CNP) warns as congestion, not as an error.
ROCE_THRESHOLDS: dict[str, int] = {name: 0 for name in HW_JUDGED}


@dataclass(frozen=True)
class CountersConfig:
    """``[counters]`` settings (``load_config(path).section("counters", CountersConfig)``)."""

    thresholds: dict[str, int] = field(default_factory=lambda: dict(IBDIAGS_THRESHOLDS))
    """Counts per interval (``--interval``/``--since``) above which a counter fails (port_xmit_wait warns)."""
    rate_limit_per_s: float = 10.0
    """Counts per second above which the ``rate_limited`` counters are excessive (issue 3's rate limit)."""
    rate_limited: tuple[str, ...] = RATE_LIMITED
    roce_thresholds: dict[str, int] = field(default_factory=lambda: dict(ROCE_THRESHOLDS))
    """Counts per interval above which a judged hw_counter warns; loss counters fail above the rate limit."""
    software_loss_pct: float = 5.0
    """Share of the packets (sent + received in the interval) above which the loss counters of a software
    device (rxe, siw) fail; below it they warn. Measured: a clean 2 s ib_write_bw on rxe in the project's
    qemu guest (2026-12-02) counted 864 duplicate requests and 28 retries in 124904 packets (0.7%)."""
    xmit_wait_bytes_per_count: float = 8.0
    """Bytes one port_xmit_wait count stands for: NVIDIA ibdiagnet computes lost bytes as count x (tick + 1)
    with tick 7 on Quantum switches. An HCA's tick is not in sysfs, so the wait share is labelled estimated."""
    extended_counters: str = "auto"
    """Width of port_xmit/rcv_data/packets: ``auto`` (64-bit when the extended-only files exist or a value
    exceeds 32 bits, else 32-bit), ``yes`` (64-bit) or ``no`` (32-bit). Decides when they count as saturated."""
    ignore_counters: tuple[str, ...] = ()
    """Counter names never judged (``VL15_dropped`` on a node where SM traffic drops are expected)."""
    prom_names: str = "node_exporter"
    """``node_exporter``: port counters under node_exporter's infiniband collector names (dashboards carry
    over; disable that collector then). ``ibdiag``: under ``ibdiag_counters_*`` so both can run side by side."""

    def __post_init__(self) -> None:
        for name, value in {**self.thresholds, **self.roce_thresholds}.items():
            if value < 0:
                raise InputError(
                    f"config [counters] threshold {name} = {value} is negative",
                    hint="thresholds are counts per interval, 0 or more",
                )
        if not self.rate_limit_per_s > 0:
            raise InputError(
                "config [counters] rate_limit_per_s must be positive",
                hint="e.g. rate_limit_per_s = 10",
            )
        if not 0 < self.software_loss_pct <= 100:
            raise InputError(
                "config [counters] software_loss_pct must be in (0, 100]",
                hint="a percentage of packets, e.g. software_loss_pct = 5",
            )
        if not self.xmit_wait_bytes_per_count > 0:
            raise InputError(
                "config [counters] xmit_wait_bytes_per_count must be positive",
                hint="8 for NVIDIA Quantum (tick 7)",
            )
        if self.extended_counters not in ("auto", "yes", "no"):
            raise InputError(
                f"config [counters] extended_counters = {self.extended_counters!r}",
                hint='use "auto", "yes" or "no"',
            )
        if self.prom_names not in ("node_exporter", "ibdiag"):
            raise InputError(
                f"config [counters] prom_names = {self.prom_names!r}",
                hint='use "node_exporter" or "ibdiag"',
            )
        known = set(IB_COUNTERS) | set(HW_JUDGED)
        for key, names in (
            ("rate_limited", self.rate_limited),
            ("ignore_counters", self.ignore_counters),
        ):
            unknown = sorted(set(names) - known)
            if unknown:
                raise InputError(
                    f"config [counters] {key} names unknown counter(s) {', '.join(unknown)}",
                    hint=f"counter names are the sysfs file names, e.g. {', '.join(ERROR_COUNTERS[:3])}, port_xmit_wait, {next(iter(HW_JUDGED))}",
                )

    @property
    def data_bits(self) -> int | None:
        """Forced width of the variable-width counters, or None for auto-detection."""
        return {"yes": 64, "no": 32}.get(self.extended_counters)

    def judged(self, counter: str) -> bool:
        return counter not in self.ignore_counters

    def roce_group(self, counter: str) -> HwGroup | None:
        spec = HW_JUDGED.get(counter)
        return spec.group if spec else None

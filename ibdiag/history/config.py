"""``[history]`` settings: how long the port history is kept, and when flaps fail or count as recovered.

Example (every key optional)::

    [history]
    window_hours = 24          # flaps are counted over this window
    flaps_fail = 2             # this many flaps in the window fail (NVIDIA's bring-up guidance: 2 in 24 h)
    flaps_warn = 1             # this many warn
    recovery_hours = 4         # a port stable this long since its last flap is "recovered" (OK)
    retention_days = 7         # records older than this are deleted when a run records
    max_bytes = 67108864       # the store is kept under this size (oldest records go first)
    aer_correctable_warn = 1   # correctable AER errors on a GPU-NIC path between two records that warn
    access_reg_flood = 10      # this many "ACCESS_REG(0x805) ... failed" kernel messages from one adapter warn
"""

from __future__ import annotations

from dataclasses import dataclass

from ibdiag.config import bounded

#: Where docs suggest keeping the store (``--history /var/lib/ibdiag/history``); nothing is written
#: anywhere unless ``--history DIR`` names it.
DEFAULT_DIR = "/var/lib/ibdiag/history"


@dataclass(frozen=True)
class HistoryConfig:
    """``[history]`` settings (``load_config(path).section("history", HistoryConfig)``)."""

    window_hours: float = bounded(24.0, low=0, low_open=True, high=24 * 366)
    """Flaps are counted over the last this many hours (NVIDIA's bring-up guidance counts per 24 h)."""
    flaps_fail: int = bounded(2, low=1, high=1_000_000)
    """Flaps in the window that fail the port (``flaps >= 2 in 24 h``)."""
    flaps_warn: int = bounded(1, low=1, high=1_000_000)
    """Flaps in the window that warn (below ``flaps_fail``)."""
    recovery_hours: float = bounded(4.0, low=0, high=24 * 366)
    """A port whose last flap is at least this old, and that is up now, is recovered (OK): a health
    check returns the node to service instead of failing it for the whole window. A site choice, not a
    vendor number; 0 reports every flapped port as recovered as soon as it is up."""
    retention_days: float = bounded(7.0, low=0, low_open=True, high=3660)
    """Records older than this are deleted when a run records."""
    max_bytes: int = bounded(64 * 2**20, low=2**16, high=2**40)
    """The store's size limit: the oldest records are deleted until it fits."""
    aer_correctable_warn: int = bounded(1, low=1, high=2**62)
    """Correctable PCIe AER errors, between two records, on a GPU, NIC or bridge between them, that warn
    (they precede a link's downtraining)."""

    access_reg_flood: int = bounded(10, low=1, high=2**62)
    """``ACCESS_REG(0x805) ... failed`` kernel messages from one adapter that warn: a tool or daemon
    polling a register the firmware refuses (a flood fills the log and hides the real messages)."""

    @property
    def window_s(self) -> float:
        return self.window_hours * 3600.0

    @property
    def recovery_s(self) -> float:
        return self.recovery_hours * 3600.0

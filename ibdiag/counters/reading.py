"""One reading of a node's counters judged without printing: for other commands (``ibdiag verdict``)."""

from __future__ import annotations

from ibdiag.counters.checks import check_snapshot, no_ports
from ibdiag.counters.config import CountersConfig
from ibdiag.counters.read import discover_layout, read_sample
from ibdiag.findings.model import Finding
from ibdiag.node.sysfs import SysfsRoot
from ibdiag.ports.config import PortsConfig


def reading_findings(
    sysfs: SysfsRoot,
    config: CountersConfig | None = None,
    ports: PortsConfig | None = None,
    *,
    port_health: bool = True,
) -> list[Finding]:
    """The findings ``ibdiag counters --root X`` judges from one reading, without printing.

    For other commands (``ibdiag verdict``) that need the node's counter health; ``port_health`` False
    leaves out ``port.state``/``port.rate`` for a caller that has them from ``ibdiag topo``'s checks.
    A tree without RDMA ports gives one OK ``counters.ports`` finding (nothing to judge); whether the
    node should have adapters is ``ibdiag topo``'s question.
    """
    cfg = config or CountersConfig()
    layout = discover_layout(sysfs)
    if not any(item.port is not None for item in layout):
        return no_ports()
    return check_snapshot(
        read_sample(sysfs, layout, data_bits=cfg.data_bits), cfg, ports, port_health=port_health
    )

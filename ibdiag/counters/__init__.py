"""``ibdiag counters``: RDMA port error, backpressure and throughput counters — read, delta, judge.

Data flow: :mod:`~ibdiag.counters.read` (sysfs -> :class:`~ibdiag.counters.model.Sample`),
:mod:`~ibdiag.counters.delta` (saturation- and reset-aware deltas), :mod:`~ibdiag.counters.checks`
(findings), :mod:`~ibdiag.counters.views` (JSON, CSV, Prometheus, table: one module each). Nothing here imports pandas,
numpy, torch or pyverbs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ibdiag.counters.config import CountersConfig

if TYPE_CHECKING:
    from ibdiag.findings.model import Finding
    from ibdiag.node.sysfs import SysfsRoot
    from ibdiag.ports.config import PortsConfig

__all__ = ["CountersConfig", "snapshot_findings"]


def snapshot_findings(
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
    # Importing the package (for CountersConfig: ibdiag fabric, before its tools run) loads no judging
    # modules (0.1 s of imports): they load here.
    from ibdiag.counters.checks import check_snapshot, no_ports  # lazy: not with the package
    from ibdiag.counters.read import discover_layout, read_sample  # lazy: not with the package

    cfg = config or CountersConfig()
    layout = discover_layout(sysfs)
    if not any(item.port is not None for item in layout):
        return no_ports()
    return check_snapshot(
        read_sample(sysfs, layout, data_bits=cfg.data_bits), cfg, ports, port_health=port_health
    )

"""``--root``: what the node itself says — its GPUs, its rails, and the topo/counters findings that make
the fabric unhealthy. Reads through :class:`ibdiag.sysfs.SysfsRoot` like ``ibdiag topo`` and ``ibdiag counters``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ibdiag.report.model import Finding
from ibdiag.verdict.judge import Health, RailInfo, rails_from_topology, sort_health


@dataclass(frozen=True)
class NodeFacts:
    gpus: int
    rails: RailInfo
    health: Health


def counters_findings(sysfs: Any, config: Any = None) -> tuple[list[Finding] | None, str | None]:
    """``ibdiag.counters.snapshot_findings`` when this build has it: (findings, None), else (None, why)."""
    import importlib

    try:
        mod = importlib.import_module("ibdiag.counters")
    except ImportError:
        return None, "counters (ibdiag.counters is missing)"
    fn = getattr(mod, "snapshot_findings", None)
    if fn is None:
        return None, "counters (not supported by this build: no ibdiag.counters.snapshot_findings)"
    return list(fn(sysfs, config)), None


def counters_config(cfg: Any) -> Any:
    """The ``[counters]`` settings when the counters package declares its config class, else None (its defaults)."""
    import importlib

    try:
        mod = importlib.import_module("ibdiag.counters")
    except ImportError:
        return None
    cls = getattr(mod, "CountersConfig", None)
    if cls is None:
        return None
    return cfg.section("counters", cls)


def read_node(directory: Path, cfg: Any) -> NodeFacts:
    """Discover the topology under ``directory`` (which contains ``sys/``), check it and its counters."""
    from ibdiag.sysfs import SysfsRoot
    from ibdiag.topo.checks import TopoConfig, check_topology
    from ibdiag.topo.discover import discover

    topo_cfg = cfg.section("topo", TopoConfig)
    sysfs = SysfsRoot(directory).check()
    topo = discover(sysfs, gdr_level=topo_cfg.gdr_path_class)
    found = list(check_topology(topo, topo_cfg))
    checked = ["topo"]
    skipped: list[str] = []
    counter_found, why = counters_findings(sysfs, counters_config(cfg))
    if counter_found is None:
        skipped.append(why or "counters")
    else:
        found.extend(counter_found)
        checked.append("counters")
    rails = rails_from_topology(topo)
    health = sort_health(found, checked=tuple(checked), skipped=tuple(skipped), rails=rails)
    return NodeFacts(len(topo.gpus), rails, health)

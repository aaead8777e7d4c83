"""A saved fabric (``ibdiag fabric --save``) judged as ``ibdiag fabric`` judges it, asked one question
per NIC: which leaf port does its cable go to, and what did the fabric's checks (port state, link
rate, error counters, xmit_wait) say of either end of that cable.

Hosts are named as ``ibdiag fabric --topo`` names them: by the topo files' adapters and node GUIDs,
else by the node description rdma-ndd writes (``gpu03 mlx5_2``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ibdiag.counters.config import CountersConfig
from ibdiag.fabric import dump
from ibdiag.fabric.build import build_fabric
from ibdiag.fabric.config import FabricConfig
from ibdiag.fabric.hosts import HostEnd
from ibdiag.fabric.judge import Judged, judge
from ibdiag.fabric.model import PortRef
from ibdiag.fabric.paths import Attachment, attachments
from ibdiag.findings.model import Finding, Severity


@dataclass
class FabricView:
    judged: Judged

    def __post_init__(self) -> None:
        self.atts: dict[tuple[str, str], list[Attachment]] = attachments(
            self.judged.fabric, self.judged.names
        )
        self.by_subject: dict[str, list[Finding]] = {}
        for f in self.judged.findings:
            if f.severity is Severity.OK:
                continue
            for part in f.subject.split("<>"):
                self.by_subject.setdefault(part, []).append(f)

    @property
    def source(self) -> str:
        return self.judged.fabric.source

    def leaf(self, host: str, adapter: str) -> tuple[str | None, tuple[Finding, ...]]:
        """``leaf-r2-1 port 5`` for the adapter's first active cable, and the findings on its ends."""
        atts = self.atts.get((host, adapter), [])
        if not atts:
            return None, ()
        names = self.judged.names
        labels: list[str] = []
        found: list[Finding] = []
        for at in atts:
            labels.append(names.port(at.switch_port))
            for ref in (at.switch_port, PortRef(at.ca, at.ca_port)):
                for f in self.by_subject.get(names.subject(ref), []):
                    if f not in found:
                        found.append(f)
        return ", ".join(labels), tuple(found)


def load_fabric(
    path: Path,
    hosts: dict[str, HostEnd],
    counters: CountersConfig | None = None,
    fabric: FabricConfig | None = None,
) -> FabricView:
    """The saved fabric at ``path`` (a directory or archive of ``ibdiag fabric --save``), judged."""
    fab = build_fabric(dump.load(path))
    return FabricView(
        judge(fab, hosts=hosts, cfg=counters or CountersConfig(), fcfg=fabric or FabricConfig())
    )

"""SHARP: which switches carry an Aggregation Node (in-network reduction), said as such, never as hosts.

Each SHARP-capable switch (Switch-IB 2, Quantum, Quantum-2) exposes its aggregation engine as a
one-port channel adapter on an extra port (``Mellanox Technologies Aggregation Node``,
:func:`ibdiag.fabric.devices.is_aggregation_node`). NCCL's SHARP plugin (and UFM's SHARP manager,
``sharp_am``) can build reduction trees only through switches that have one: a fabric with them on
some switches only reduces in the network only where the tree avoids the others.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ibdiag.fabric.checks import CHECKS, listed
from ibdiag.fabric.devices import is_aggregation_node
from ibdiag.fabric.hosts import Names
from ibdiag.fabric.model import SWITCH, Fabric
from ibdiag.findings.model import Finding, Severity


@dataclass(frozen=True)
class Sharp:
    nodes: int
    """Aggregation Nodes in the fabric."""
    switches_with: tuple[str, ...]
    """Switches (GUIDs) with an Aggregation Node cabled to them."""
    switches: int
    missing: tuple[str, ...]
    """Switches without one, when some have one."""

    def to_json(self) -> dict[str, Any]:
        return {
            "aggregation_nodes": self.nodes,
            "switches_with": len(self.switches_with),
            "switches": self.switches,
            "missing": list(self.missing),
        }


def sharp(fab: Fabric) -> Sharp:
    """The Aggregation Nodes and the switches they are cabled to, in one pass over the ports."""
    ans = {n.guid for n in fab.nodes if is_aggregation_node(n)}
    with_an = {p.peer.guid for p in fab.ports if p.guid in ans and p.peer is not None}
    switches = [n.guid for n in fab.nodes if n.kind == SWITCH]
    missing = tuple(g for g in switches if g not in with_an) if with_an else ()
    return Sharp(len(ans), tuple(sorted(with_an)), len(switches), missing)


@CHECKS.check(
    "fabric.sharp",
    "SHARP Aggregation Nodes: on how many of the switches (in-network reduction); none when the fabric has none: ok",
)
def sharp_check(names: Names, s: Sharp) -> Finding | None:
    if s.nodes == 0:
        return None
    text = (
        f"SHARP Aggregation Nodes on {len(s.switches_with)} of {s.switches} switches "
        "(in-network reduction for NCCL's SHARP plugin where the SHARP manager runs; "
        "they are the switches' own engines, not hosts)"
    )
    if s.missing:
        text += f"; none on {listed([names.node(g) for g in s.missing], 6)}"
    return Finding(
        "fabric.sharp",
        Severity.OK,
        "fabric",
        text,
        value=len(s.switches_with),
        limit=s.switches,
    )

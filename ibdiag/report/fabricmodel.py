"""The model of a sweep on the fabric (``ibdiag report --fabric``): hops, ends, pair paths, culprits.

Built by :mod:`ibdiag.report.fabricpath`; each part writes its own JSON (``fabric`` in ``ibdiag.report/1``),
a placed sweep its plain lines (:func:`fabric_lines`: the table and the page).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # for its annotation only: fabric.paths loads networkx, which only --fabric needs
    from ibdiag.fabric.paths import Attachment

#: Slow pairs that must share a hop before it is named.
MIN_SHARED = 2
HOST_LINK = "host link"
UPLINKS = "uplinks"
#: One inter-switch link, exactly (the routes were read: ``ibdiag fabric --routes``).
ISL = "isl"
#: Slow pairs listed per sweep (every one counts; JSON and the table show this many).
MAX_PATHS = 200
#: Slow pairs' routes listed per sweep in the table (JSON has up to MAX_PATHS).
FABRIC_PATHS = 20


@dataclass(frozen=True)
class Hop:
    kind: str
    """``host link`` (a switch port and its cable to an adapter), ``uplinks`` (a switch's uplinks) or
    ``isl`` (one inter-switch link, from the routes)."""
    switch: str
    """The switch's GUID (an ISL's lower end: the switch whose uplink it is)."""
    port: int
    """The switch port of a host link or an ISL's lower end; 0 for an uplink group."""
    label: str
    """``leaf-r1-1 port 3 (cable to gpu03 mlx5_1)``, ``the uplinks of leaf-r0-1 (ports 9, 10)``,
    ``leaf-r0-1 port 5 <> spine-1 port 1``."""
    subject: str
    """One token: ``leaf-r1-1:3``, ``leaf-r0-1:uplinks``, ``leaf-r0-1:5<>spine-1:1``."""
    far_switch: str = ""
    """An ISL's upper end: the switch's GUID and port."""
    far_port: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "switch": self.switch,
            "port": self.port or None,
            "label": self.label,
            "subject": self.subject,
            "far_switch": self.far_switch or None,
            "far_port": self.far_port or None,
        }


@dataclass(frozen=True)
class End:
    """One end of a tested pair: a sweep node's adapter, and where it is on the fabric."""

    host: str
    adapter: str
    at: Attachment | None
    why: str | None
    """Why it is not placed (None when it is)."""
    rail: int | None
    """Its rail on the fabric (NIC index or device number)."""
    where: str | None = None
    """The switch port its cable goes to, by name (``leaf-r0-1 port 3``)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "adapter": self.adapter,
            "at": self.where,
            "switch": None if self.at is None else self.at.switch,
            "switch_port": None if self.at is None else self.at.port,
            "fabric_rail": self.rail,
            "not_found": self.why,
        }


@dataclass(frozen=True)
class PairPath:
    subject: str
    """``gpu01 (rank 0) mlx5_0 <-> gpu05 (rank 4) mlx5_0``."""
    rail: int
    slow: bool
    verdict: str
    """The sweep's link verdict (``bad``, ``node``, ``unresolved``, ``ok``)."""
    bw_gbs: float | None
    ends: tuple[End, End]
    hops: tuple[Hop, ...]
    route: str
    """``gpu01 mlx5_0 -> leaf-r0-1 port 1 -> any of 4 uplink(s) of leaf-r0-1 (port(s) 5, 6, 7, 8) -> ...``
    (a healthy pair's, which is only counted, without the uplinks; its subject empty)."""
    isl_hops: int | None
    """ISLs on the path: 0 on one switch, None when not known."""
    notes: tuple[str, ...]

    @property
    def cross_rail(self) -> bool:
        """Its ends are adapters of different rails on the fabric (NIC index or device number)."""
        a, b = self.ends
        return a.rail is not None and b.rail is not None and a.rail != b.rail

    def to_json(self) -> dict[str, Any]:
        return {
            "pair": self.subject,
            "rail": self.rail,
            "verdict": self.verdict,
            "bw_gbs": self.bw_gbs,
            "ends": [e.to_json() for e in self.ends],
            "route": self.route,
            "isl_hops": self.isl_hops,
            "hops": [h.subject for h in self.hops],
            "notes": list(self.notes),
            "cross_rail": self.cross_rail,
        }


@dataclass(frozen=True)
class Culprit:
    hop: Hop
    slow: int
    """Slow pairs through it."""
    slow_total: int
    """Slow pairs the sweep placed on the fabric."""
    healthy: int
    """Healthy pairs through it."""
    inside: int
    """Uplinks: tested pairs within the switch (all fine); 0 for a host link."""
    pairs: tuple[str, ...]
    alternatives: tuple[Hop, ...] = ()
    """Hops through which the same slow pairs, and as many healthy ones, pass: the pairs cannot tell
    them from this one."""
    explains: tuple[str, ...] = ()
    """Uplinks: adapters the sweep called bad whose every slow pair crosses them (``gpu01 mlx5_0``)."""
    isls_unknown: bool = False
    """The fabric is not a tree of tiers: the ISLs were not counted, and the slow pairs may share one."""
    routes_read: bool = False
    """The snapshot holds routes (an uplink group is named only for pairs whose route could not be
    followed)."""
    fabric_says: tuple[str, ...] = ()
    """What the saved fabric's own judgement says of this hop (``ibdiag fabric --from``: a 1x link,
    errors), each ``message (check, severity)``."""

    @property
    def text(self) -> str:
        h = self.hop
        also = (
            f"{self.healthy} healthy pair(s) also {'cross them' if h.kind == UPLINKS else 'pass it'}"
            if self.healthy
            else f"no healthy pair {'crosses them' if h.kind == UPLINKS else 'passes it'}"
        )
        if h.kind == UPLINKS:
            inside = (
                f"; the {self.inside} pair(s) within the switch are fine"
                if self.inside
                else "; no pair within the switch was tested"
            )
            why = "their routes could not be followed" if self.routes_read else "routes not read"
            spread = (
                f" ({why}: with ECMP one bad uplink slows only the pairs routed over it)"
                if self.healthy
                else ""
            )
            text = f"{h.label}: {self.slow} of {self.slow_total} slow pairs cross them, {also}{spread}{inside}"
        elif h.kind == ISL:
            also = (
                f"{self.healthy} healthy pair(s) also cross it"
                if self.healthy
                else "no healthy pair crosses it"
            )
            text = f"{h.label}: {self.slow} of {self.slow_total} slow pairs cross it (the subnet manager's routes), {also}"
        else:
            text = f"{h.label}: {self.slow} of {self.slow_total} slow pairs pass it, {also}"
        if self.alternatives:
            text += "; the pairs cannot tell it from " + " or ".join(
                a.label for a in self.alternatives
            )
        if self.explains:
            shown = ", ".join(self.explains[:6]) + (
                f" and {len(self.explains) - 6} more" if len(self.explains) > 6 else ""
            )
            text += (
                f"; every slow pair of the sweep's bad {shown} crosses them: "
                "fix these before draining those"
            )
        if self.isls_unknown:
            text += "; the ISLs were not counted (not a tree of tiers): the slow pairs may share one instead"
        if self.fabric_says:
            text += "; the saved fabric says of it: " + "; ".join(self.fabric_says)
        return text

    def to_json(self) -> dict[str, Any]:
        return {
            **self.hop.to_json(),
            "slow_pairs": self.slow,
            "slow_pairs_total": self.slow_total,
            "healthy_pairs": self.healthy,
            "pairs_inside": self.inside,
            "pairs": list(self.pairs),
            "alternatives": [a.subject for a in self.alternatives],
            "explains": list(self.explains),
            "isls_unknown": self.isls_unknown,
            "fabric_findings": list(self.fabric_says),
            "text": self.text,
        }


@dataclass(frozen=True)
class HopLoad:
    """A hop some slow pairs cross: which, and how many healthy pairs cross it too."""

    hop: Hop
    slow_pairs: tuple[str, ...]
    """The slow pairs' subjects, every one (not only the :data:`MAX_PATHS` listed)."""
    healthy: int


@dataclass(frozen=True)
class SweepOnFabric:
    sweep: str
    """The sweep file."""
    source: str
    """The fabric snapshot."""
    shape: str
    names_isls: bool
    paths: tuple[PairPath, ...]
    """The slow pairs (at most :data:`MAX_PATHS`)."""
    slow: int
    healthy: int
    """Healthy pairs placed with both ends on the fabric."""
    bad_nodes: tuple[tuple[str, tuple[End, ...]], ...]
    """Each node the sweep called bad, with the adapters of its bad rails on the fabric."""
    missing: tuple[End, ...]
    """The sweep's adapters the fabric does not have (or has with no active cable)."""
    culprits: tuple[Culprit, ...]
    tcp_nodes: tuple[str, ...] = ()
    """Nodes the sweep measured over TCP (no adapter): nothing of them is placed."""
    slow_placed: int = 0
    """Slow pairs with both ends on the fabric."""
    routes_read: bool = False
    """The fabric holds the subnet manager's routes: pairs' ISLs are exact."""
    unrouted: int = 0
    """With routes: tested pairs (slow or healthy) whose route could not be followed (their ISLs are
    the candidates, a note on each slow one says why)."""
    loads: tuple[HopLoad, ...] = ()
    """Every hop a slow pair crosses (host links, ISLs, uplink groups), most slow pairs first."""
    uplinks: tuple[tuple[str, tuple[int, ...]], ...] = ()
    """Per switch (GUID) whose uplinks are a group hop, the candidate uplink ports the pairs may take."""

    def to_json(self) -> dict[str, Any]:
        return {
            "sweep": self.sweep,
            "tcp_nodes": list(self.tcp_nodes),
            "fabric": self.source,
            "shape": self.shape,
            "isls_named": self.names_isls,
            "routes_read": self.routes_read,
            "pairs_unrouted": self.unrouted,
            "slow_pairs": self.slow,
            "slow_pairs_placed": self.slow_placed,
            "healthy_pairs": self.healthy,
            "paths": [p.to_json() for p in self.paths],
            "bad_nodes": [
                {"node": label, "links": [e.to_json() for e in ends]}
                for label, ends in self.bad_nodes
            ],
            "not_on_fabric": [e.to_json() for e in self.missing],
            "culprits": [c.to_json() for c in self.culprits],
        }


def fabric_lines(placed: SweepOnFabric, limit: int = FABRIC_PATHS) -> list[str]:
    """A sweep on the fabric in plain lines: what was placed, the culprits, the slow pairs' routes."""
    lines = [
        f"sweep {placed.sweep} on the fabric {placed.source}: {placed.shape}; {placed.slow} slow pair(s), "
        f"{placed.healthy} healthy pair(s) compared ({routes_text(placed)})"
    ]
    lines += [f"likely culprit: {c.text}" for c in placed.culprits]
    if placed.slow and not placed.culprits:
        lines.append(
            f"no port or uplink is shared by {MIN_SHARED} or more slow pairs that way: no culprit named"
        )
    for label, ends in placed.bad_nodes:
        at = ", ".join(f"{e.adapter} at {_where(e)}" for e in ends)
        lines.append(f"bad node {label}: {at}")
    for e in placed.missing:
        lines.append(f"not on the fabric: {e.why}")
    for p in placed.paths[:limit]:
        bw = f"{p.bw_gbs:.3g} GB/s" if p.bw_gbs is not None else "failed"
        lines.append(f"  {p.subject} ({p.verdict}, {bw}): {p.route}")
        lines += [
            f"    note: {n}"
            for n in p.notes
            if not n.endswith("(no adapter's node description names it)")
        ]
    if len(placed.paths) > limit or placed.slow > len(placed.paths):
        lines.append(
            f"  ... {placed.slow - min(limit, len(placed.paths))} more slow pair(s) (all in -o json up to {MAX_PATHS})"
        )
    return lines


def routes_text(placed: SweepOnFabric) -> str:
    """How the pairs' ISLs were found, from what the snapshot holds: the subnet manager's routes, the
    shortest-path candidates, or (not a tree of tiers, no routes) none."""
    if placed.routes_read:
        text = "routes read: each pair's ISLs are those of the subnet manager's forwarding tables"
        if placed.unrouted:
            text += (
                f"; {placed.unrouted} pair(s) whose route could not be followed have the candidates"
            )
        return text
    if placed.names_isls:
        return "routes not read: the ISLs are the candidates on shortest paths (fabric --routes --save reads them)"
    return "routes not read, and the fabric is not a tree of tiers: only the host links are named"


def _where(e: End) -> str:
    return e.where or e.why or "?"

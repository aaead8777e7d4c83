"""What the page draws of the fabric (``ibdiag report --fabric -o html``): its switches by tier (leaves,
spines, cores), the ISLs between them, the host adapters on the leaves; on top, the slow pairs' paths,
the culprits, and the saved fabric's own failing and warning findings. :mod:`ibdiag.report.fabricsvg`
draws it.

How it scales: a tier of at most :data:`MAX_BOXES` switches is drawn switch by switch. A larger tier
(a fabric of thousands of switches) keeps up to :data:`MAX_SHOWN` switches that have something to
show — a culprit, a failing or warning finding, a slow pair's path — one by one, most important
first, and folds every run of the others (in name order, so a rail's or a pod's leaves stay together)
into one box: ``38 leaves`` with their names as a host list in its tooltip and the worst of its
members in its colour. ISLs between two boxes are one line (its cables counted); when more than
:data:`MAX_BUNDLES` lines would be drawn, only those with something to show are. Host adapters are dots
under a drawn leaf when it has at most :data:`MAX_HOST_DOTS`, else only those on a slow path or with a
finding. So the picture holds at most :data:`MAX_BOXES` boxes a tier and a bounded number of lines
however large the fabric; building it is a few passes over the ports.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from ibdiag.fabric.model import SWITCH, FabricPort, PortRef
from ibdiag.fabric.shape import host_links, tier_plural, up
from ibdiag.findings.model import Finding
from ibdiag.report.fabrichealth import FabricHealth
from ibdiag.report.fabricmodel import HOST_LINK, ISL, UPLINKS, SweepOnFabric
from ibdiag.report.picturemodel import Box, Bundle, Picture, Shown

if TYPE_CHECKING:  # networkx behind fabric's judgement: the picture is drawn for --fabric only
    from ibdiag.fabric.judge import Judged

#: Boxes per tier (a tier with more switches is folded into groups).
MAX_BOXES = 22
#: Switches of a larger tier drawn one by one: those with the most to show.
MAX_SHOWN = (MAX_BOXES - 1) // 2
#: Lines between boxes drawn at most (else only those with something to show).
MAX_BUNDLES = 300
#: Host adapters drawn as dots under one leaf (more: only those with something to show).
MAX_HOST_DOTS = 8


@dataclass
class Mark:
    """The accumulator behind :class:`Shown` (pairs as sets, so that a pair through two ports of one
    switch counts once)."""

    culprits: set[int] = field(default_factory=set)
    findings: dict[int, Finding] = field(default_factory=dict)
    """By identity: a finding on both ends of a cable, or on many members of a box, counts once."""
    slow: set[str] = field(default_factory=set)
    candidate: set[str] = field(default_factory=set)

    def add(self, other: Mark) -> Mark:
        self.culprits |= other.culprits
        self.findings.update(other.findings)
        self.slow |= other.slow
        self.candidate |= other.candidate
        return self

    def said(self, f: Finding) -> None:
        self.findings[id(f)] = f

    @property
    def shows(self) -> bool:
        return self.shown().shows

    def shown(self) -> Shown:
        return Shown(
            tuple(sorted(self.culprits)),
            tuple(self.findings.values()),
            len(self.slow),
            len(self.candidate - self.slow),
        )


def _natural(name: str) -> tuple[object, ...]:
    return tuple(int(x) if x.isdigit() else x for x in re.split(r"(\d+)", name))


class _Marks:
    """Each switch, ISL and host cable's mark, from the sweeps on the fabric and its health."""

    def __init__(self, judged: Judged, placed: Sequence[SweepOnFabric], health: FabricHealth):
        self.judged = judged
        self.port: dict[PortRef, Mark] = {}
        self.switch: dict[str, Mark] = {}
        self.culprits: list[tuple[int, str]] = []
        self._findings(health)
        for sweep in placed:
            self._sweep(sweep)

    def at(self, ref: PortRef) -> Mark:
        return self.port.setdefault(ref, Mark())

    def _findings(self, health: FabricHealth) -> None:
        names, fab = self.judged.names, self.judged.fabric
        tokens: dict[str, PortRef | str] = {}
        for n in fab.nodes:
            if n.kind == SWITCH:
                tokens[names.switch_token(n.guid)] = n.guid
        for p in fab.ports:
            tokens.setdefault(names.subject(p.ref), p.ref)
        for f in health.findings:
            for part in dict.fromkeys(f.subject.split("<>")):
                where = tokens.get(part)
                if isinstance(where, PortRef):
                    self.at(where).said(f)
                elif where is not None:
                    self.switch.setdefault(where, Mark()).said(f)

    def _sweep(self, sweep: SweepOnFabric) -> None:
        fab, uplinks = self.judged.fabric, dict(sweep.uplinks)
        # by subject: a culprit's hop is relabelled (its uplink ports listed) after the loads are counted
        number = {c.hop.subject: len(self.culprits) + k + 1 for k, c in enumerate(sweep.culprits)}
        self.culprits += [(number[c.hop.subject], c.text) for c in sweep.culprits]
        for load in sweep.loads:
            hop, pairs = load.hop, set(load.slow_pairs)
            n = number.get(hop.subject)
            if hop.kind in (HOST_LINK, ISL):
                refs = [PortRef(hop.switch, hop.port)]
                if hop.kind == ISL:
                    refs.append(PortRef(hop.far_switch, hop.far_port))
                for ref in refs:
                    mark = self.at(ref)
                    mark.slow |= pairs
                    mark.culprits |= {n} if n else set()
            elif hop.kind == UPLINKS:
                for port in uplinks.get(hop.switch, ()):
                    p = fab.port(PortRef(hop.switch, port))
                    mark = self.at(PortRef(hop.switch, port))
                    mark.candidate |= pairs
                    if p is not None and p.peer is not None:
                        self.at(p.peer).candidate |= pairs
                if n:
                    self.switch.setdefault(hop.switch, Mark()).culprits.add(n)

    def cable(self, a: PortRef, b: PortRef | None) -> Mark:
        """Both ends' marks together (a finding on either end is the cable's)."""
        out = Mark()
        for ref in (a, b):
            if ref is not None and ref in self.port:
                out.add(self.port[ref])
        return out


def _fold(
    tier: int, guids: list[str], own: dict[str, Mark], path: dict[str, Mark], name: dict[str, str]
) -> list[Box]:
    """The tier's boxes: every switch, or (more than MAX_BOXES) the most telling one by one and
    each run of the rest folded."""
    order = sorted(guids, key=lambda g: _natural(name[g]))
    if len(order) <= MAX_BOXES:
        shown = set(order)
    else:
        telling = sorted((g for g in order if path[g].shows), key=lambda g: path[g].shown().rank())
        shown = set(telling[:MAX_SHOWN])
    out: list[Box] = []
    run: list[str] = []

    def flush() -> None:
        if not run:
            return
        mark = Mark()
        for g in run:
            mark.add(path[g])
        label = f"{len(run)} {_tier_name(tier, len(run))}"
        key = f"group-{tier}-{len(out)}"
        shown = mark.shown()
        out.append(Box(key, label, tier, tuple(run), tuple(name[g] for g in run), shown, shown))
        run.clear()

    for g in order:
        if g in shown:
            flush()
            out.append(Box(g, name[g], tier, (g,), (name[g],), own[g].shown(), path[g].shown()))
        else:
            run.append(g)
    flush()
    return out


def _tier_name(tier: int, n: int) -> str:
    return tier_plural(tier, n) if tier >= 0 else ("switches" if n != 1 else "switch")


def picture(judged: Judged, placed: Sequence[SweepOnFabric], health: FabricHealth) -> Picture:
    """The fabric to draw: boxes per tier, the lines between them, the host dots, the marks."""
    fab, names = judged.fabric, judged.names
    tiers = judged.shape.tiers if judged.shape is not None else {}
    marks = _Marks(judged, placed, health)
    switches = [n.guid for n in fab.nodes if n.kind == SWITCH]
    name = {g: names.node(g) for g in switches}
    hosts = host_links(fab)
    own = {g: marks.switch.get(g, Mark()) for g in switches}
    path: dict[str, Mark] = {}
    for g in switches:
        path[g] = Mark()
        path[g].add(own[g])
    isls = [
        (p, p.peer) for p, _far in fab.links() if p.peer is not None and fab.is_isl(p) and up(p)
    ]
    for a, b in isls:
        cable = marks.cable(a.ref, b)
        path[a.guid].add(cable)
        path[b.guid].add(cable)
    for g, ports in hosts.items():
        for p in ports:
            path[g].add(marks.cable(p.ref, p.peer))
    by_tier: dict[int, list[str]] = {}
    for g in switches:
        by_tier.setdefault(tiers.get(g, -1), []).append(g)
    box_of: dict[str, Box] = {}
    drawn: list[tuple[int, str, tuple[Box, ...]]] = []
    notes: list[str] = []
    for t in sorted(by_tier, key=lambda t: (t < 0, -t)):
        row = [_with_hosts(b, hosts, judged, marks) for b in _fold(t, by_tier[t], own, path, name)]
        drawn.append((t, _tier_name(t, len(by_tier[t])), tuple(row)))
        box_of.update({g: b for b in row for g in b.members})
        folded = [b for b in row if b.folded]
        if folded:
            n = sum(len(b.members) for b in folded)
            notes.append(
                f"{n} of {len(by_tier[t])} {_tier_name(t, len(by_tier[t]))} folded into "
                f"{len(folded)} box(es), their names in each box's tooltip"
            )
    bundles = _bundles(isls, box_of, marks, notes)
    return Picture(
        tuple(drawn), bundles, tuple(marks.culprits), tuple(notes), len(switches), len(isls)
    )


def _with_hosts(box: Box, hosts: dict[str, list[FabricPort]], judged: Judged, marks: _Marks) -> Box:
    """The box with its host links counted and, for a switch drawn alone, its host dots."""
    ports = [p for g in box.members for p in hosts.get(g, ())]
    if box.folded or not ports:
        return replace(box, hosts=len(ports))
    names = judged.names
    dots: list[tuple[str, Shown]] = []
    for p in sorted(ports, key=lambda p: p.port):
        peer = p.peer
        h = names.host(peer.guid) if peer is not None else None
        label = h.text if h is not None else names.port(peer) if peer is not None else "?"
        dots.append((label, marks.cable(p.ref, peer).shown()))
    if len(dots) > MAX_HOST_DOTS:
        dots = sorted((d for d in dots if d[1].shows), key=lambda d: d[1].rank())[:MAX_HOST_DOTS]
    return replace(box, hosts=len(ports), dots=tuple(dots))


def _bundles(
    isls: Iterable[tuple[FabricPort, PortRef]],
    box_of: dict[str, Box],
    marks: _Marks,
    notes: list[str],
) -> tuple[Bundle, ...]:
    """The ISLs between boxes, one line per pair of boxes (lower tier first)."""
    lines: dict[tuple[str, str], tuple[int, Mark]] = {}
    for p, peer in isls:
        a, b = box_of[p.guid], box_of[peer.guid]
        if a.key == b.key:
            continue
        low, high = (a, b) if (a.tier, a.key) <= (b.tier, b.key) else (b, a)
        count, mark = lines.get((low.key, high.key), (0, Mark()))
        mark.add(marks.cable(p.ref, peer))
        lines[(low.key, high.key)] = (count + 1, mark)
    out = [Bundle(low, high, n, m.shown()) for (low, high), (n, m) in lines.items()]
    if len(out) > MAX_BUNDLES:
        kept = [b for b in out if b.mark.shows]
        notes.append(f"{len(out) - len(kept)} of {len(out)} lines of healthy ISLs not drawn")
        out = kept
    return tuple(out)

"""``ibdiag report --fabric SNAPSHOT``: each slow pair of a sweep on its fabric path, and the shared culprit.

Every link a sweep tested (node pair, rail: both ends' adapters) is placed on the fabric: each end's
adapter (matched by host and adapter name: the node description ``gpu03 mlx5_2`` or ``--topo``) and
the switch port its cable goes to; between two switches, the candidate ISLs of
:mod:`ibdiag.fabric.paths` grouped as a switch's uplinks (the routes are not read: "any of 4 uplinks of
leaf-r0-1"). A pair on one switch crosses no ISL.

The *hops* a pair crosses are its two host links (a switch port and its cable) and the uplink groups
between. Per hop: the slow pairs through it and the healthy ones. A hop is named the likely culprit
(``report.fabric_culprit``) when at least :data:`MIN_SHARED` slow pairs pass it and it explains them
better than any other hop, greedily: the hop with the highest share of slow among the pairs through it
(then the most slow pairs, then a host link before an uplink group) is taken, its slow pairs set aside,
and the rest judged again. A host link needs more slow pairs than healthy ones through it (a port that
healthy pairs cross is less likely the cause); an uplink group needs every tested pair inside its
switch to be fine (else the switch or its hosts explain them better) and at least 1/N of the pairs
across it slow, N its candidate uplinks: healthy pairs across it are allowed — with ECMP or static
routes one bad uplink of N slows about 1/N of the pairs — but fewer slow than that is no pattern. One
slow pair alone names nothing.

With the routes (a fabric saved by ``ibdiag fabric --routes``) a pair's ISLs are exact: the ISLs the
subnet manager's route from each end to the other crosses (both directions: a bad cable slows the
data and the acknowledgements alike), each an ``isl`` hop judged like a host link (more slow pairs than
healthy ones through it). A pair whose route cannot be followed falls back to the candidates, and says why.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from ibdiag.fabric.hosts import Names
from ibdiag.fabric.model import Fabric, PortRef
from ibdiag.fabric.paths import Attachment, Crossed, Router, attachments, known_adapters
from ibdiag.fabric.rails import rail_of
from ibdiag.fabric.shape import Shape, shape
from ibdiag.report.fabricmodel import (
    HOST_LINK,
    ISL,
    MAX_PATHS,
    MIN_SHARED,
    UPLINKS,
    Culprit,
    End,
    Hop,
    HopLoad,
    PairPath,
    SweepOnFabric,
)
from ibdiag.sweep.analysis import LinkStat, NodeStatus
from ibdiag.sweep.checks import link_subject
from ibdiag.sweep.model import SweepResult


class _Placer:
    """The sweep's adapters on the fabric, and the hops between them."""

    def __init__(self, fab: Fabric, names: Names, router: Router) -> None:
        self.fab, self.names, self.router = fab, names, router
        self.atts = attachments(fab, names)
        self.known = known_adapters(fab, names)
        self.hosts = {h for h, _a in self.known}
        short: dict[str, list[str]] = {}
        for h in self.hosts:
            short.setdefault(h.split(".")[0], []).append(h)
        self.short = {k: v[0] for k, v in short.items() if len(v) == 1}
        self.uplink_ports: dict[str, set[int]] = {}
        self._ends: dict[tuple[str, str | None, int | None], End] = {}
        self._hops: dict[tuple[str, int], Hop] = {}
        self._isls: dict[frozenset[PortRef], Hop] = {}
        self.unrouted = 0
        """Pairs whose route (with routes read) could not be followed."""

    def widths(self) -> dict[str, int]:
        """Per switch, the uplinks any placed pair may take."""
        return {sw: len(ports) for sw, ports in self.uplink_ports.items()}

    def end(self, host: str, adapter: str | None, port: int | None) -> End:
        key = (host, adapter, port)
        if key not in self._ends:
            self._ends[key] = self._end(host, adapter, port)
        return self._ends[key]

    def _end(self, host: str, adapter: str | None, port: int | None) -> End:
        if adapter is None:
            return End(host, "tcp", None, "measured over TCP: no adapter to place", None)
        name = host if host in self.hosts else self.short.get(host.split(".")[0], host)
        guid = self.known.get((name, adapter))
        if guid is None:
            why = f"{host} {adapter} is not on this fabric (no adapter's node description names it)"
            return End(host, adapter, None, why, None)
        h = self.names.host(guid)
        rail = rail_of(h) if h else None
        atts = self.atts.get((name, adapter), [])
        at = next(
            (a for a in atts if a.ca_port == (port or 1)), atts[0] if len(atts) == 1 else None
        )
        if at is None:
            why = f"{host} {adapter} is on this fabric with no active cable to a switch"
            return End(host, adapter, None, why, rail)
        return End(host, adapter, at, None, rail, self.names.port(at.switch_port))

    def port_hop(self, at: Attachment) -> Hop:
        key = (at.switch, at.port)
        if key not in self._hops:
            ref = at.switch_port
            p = self.fab.port(ref)
            label = self.names.cable(p) if p is not None else self.names.port(ref)
            self._hops[key] = Hop(HOST_LINK, at.switch, at.port, label, self.names.subject(ref))
        return self._hops[key]

    def uplink_hop(self, switch: str, ports: tuple[int, ...]) -> Hop:
        self.uplink_ports.setdefault(switch, set()).update(ports)
        key = (switch, 0)
        if key not in self._hops:
            name = self.names.node(switch)
            subject = self.names.subject(PortRef(switch, 0)).rsplit(":", 1)[0]
            self._hops[key] = Hop(
                UPLINKS, switch, 0, f"the uplinks of {name}", f"{subject}:uplinks"
            )
        return self._hops[key]

    def isl_hop(self, isl: Crossed) -> Hop:
        key = frozenset(isl)
        if key not in self._isls:
            tiers = self.router.shape.tiers
            low, high = sorted(isl, key=lambda r: (tiers.get(r.guid, 0), r.guid, r.port))
            label = f"{self.names.port(low)} <> {self.names.port(high)}"
            subject = f"{self.names.subject(low)}<>{self.names.subject(high)}"
            self._isls[key] = Hop(ISL, low.guid, low.port, label, subject, high.guid, high.port)
        return self._isls[key]

    def _named(self, why: str) -> str:
        return re.sub(r"0x[0-9a-f]{16}", lambda m: self.names.node(m.group(0)), why)

    def routed(
        self, a: Attachment, b: Attachment, notes: list[str]
    ) -> tuple[tuple[Crossed, ...], tuple[Crossed, ...]] | None:
        """The ISLs of the routes there and back; None (and a note) when either cannot be followed."""
        there, back = self.router.route(a, b), self.router.route(b, a)
        for way, r in (("there", there), ("back", back)):
            if isinstance(r, str):
                notes.append(
                    f"the route {way} is not followed ({self._named(r)}): the ISLs are candidates"
                )
        if isinstance(there, str) or isinstance(back, str):
            self.unrouted += 1
            return None
        return there, back

    def _crossed(self, isls: Iterable[Crossed]) -> str:
        return ", ".join(f"{self.names.port(o)} > {self.names.port(i)}" for o, i in isls)

    def path(self, result: SweepResult, link: LinkStat) -> PairPath:
        ends = []
        for rank in (link.a, link.b):
            node = result.nodes[rank]
            r = node.rail(link.rail)
            ends.append(self.end(node.host, r.adapter if r else None, r.port if r else None))
        a, b = ends
        hops: list[Hop] = []
        words: list[str] = []
        notes = [e.why for e in ends if e.why]
        isl_hops: int | None = None
        if a.at is not None:
            hops.append(self.port_hop(a.at))
        if a.at is not None and b.at is not None:
            exact = self.routed(a.at, b.at, notes) if self.router.routes_read else None
            crossing = self.router.between(a.at.switch, b.at.switch) if exact is None else None
            if exact is not None:
                there, back = exact
                isl_hops = len(there)
                hops += dict.fromkeys(self.isl_hop(x) for x in (*there, *back))
                words += [f"{self.names.port(o)} > {self.names.port(i)}" for o, i in there]
                if [frozenset(x) for x in there] != [frozenset(x) for x in reversed(back)]:
                    notes.append(f"the route back crosses {self._crossed(back) or 'no ISL'}")
            elif crossing is None:
                shape = self.router.shape.text
                why = (
                    "no active ISL path joins them"
                    if self.router.names_isls
                    else shape
                    if shape.startswith("not ")
                    else f"the fabric is not a tree of tiers ({shape})"
                )
                a_sw, b_sw = self.names.node(a.at.switch), self.names.node(b.at.switch)
                notes.append(f"the ISLs between {a_sw} and {b_sw} are not named: {why}")
                words.append("(ISLs not named)")
            else:
                isl_hops = crossing.hops
                for sw, ports in crossing.uplinks:
                    hops.append(self.uplink_hop(sw, ports))
                    if link.slow:  # words for the pairs shown; a healthy pair is only counted
                        words.append(
                            f"any of {len(ports)} uplink(s) of {self.names.node(sw)} (port(s) {_ports(ports)})"
                        )
            if a.rail is not None and b.rail is not None and a.rail != b.rail:
                notes.append(
                    f"the ends are on different rails of the fabric ({a.rail} and {b.rail})"
                )
        if b.at is not None:
            hops.append(self.port_hop(b.at))
        route = " -> ".join(
            [
                f"{a.host} {a.adapter}",
                a.where or "?",
                *(words or (["(same switch, no ISL)"] if isl_hops == 0 else [])),
                b.where or "?",
                f"{b.host} {b.adapter}",
            ]
        )
        return PairPath(
            link_subject(result, link) if link.slow else "",
            link.rail,
            link.slow,
            link.verdict.value,
            link.bw_gbs,
            (a, b),
            tuple(hops),
            route,
            isl_hops,
            tuple(dict.fromkeys(notes)),
        )


def _ports(ports: Iterable[int]) -> str:
    return ", ".join(str(p) for p in sorted(ports))


def place_sweep(
    result: SweepResult, sweep: str, fab: Fabric, names: Names, router: Router
) -> SweepOnFabric:
    """Every tested pair of ``result`` on ``fab``; the slow ones' paths and the shared culprits."""
    placer = _Placer(fab, names, router)
    slow: list[PairPath] = []
    healthy: list[PairPath] = []
    for link in result.analysis.links:
        if link.tests == 0:
            continue
        if link.slow:
            slow.append(placer.path(result, link))
        elif link.bw_gbs is not None:
            healthy.append(placer.path(result, link))
    missing: dict[tuple[str, str], End] = {}
    for node in result.nodes:
        for r in node.rails:
            e = placer.end(node.host, r.adapter, r.port)
            if e.at is None and r.adapter is not None:
                missing.setdefault((e.host, e.adapter), e)
    tcp = tuple(n.label for n in result.nodes if all(r.adapter is None for r in n.rails))
    bad_nodes = []
    for v in result.analysis.nodes:
        if v.status is NodeStatus.BAD:
            node = result.nodes[v.rank]
            rails = range(len(node.rails)) if v.whole_node else v.bad_rails
            ends = [placer.end(node.host, node.rails[k].adapter, node.rails[k].port) for k in rails]
            bad_nodes.append((node.label, tuple(ends)))
    both = [p for p in healthy if all(e.at is not None for e in p.ends)]
    return SweepOnFabric(
        sweep,
        fab.source,
        router.shape.text,
        router.names_isls or router.routes_read,
        tuple(slow[:MAX_PATHS]),
        len(slow),
        len(both),
        tuple(bad_nodes),
        tuple(missing.values()),
        tuple(
            _caveat(
                _explaining(
                    _with_ports(culprits(slow, healthy, placer.widths()), placer), bad_nodes, slow
                ),
                router,
            )
        ),
        tcp,
        sum(1 for p in slow if all(e.at is not None for e in p.ends)),
        router.routes_read,
        placer.unrouted,
        loads(slow, healthy),
        tuple((sw, tuple(sorted(ports))) for sw, ports in sorted(placer.uplink_ports.items())),
    )


def loads(slow: list[PairPath], healthy: list[PairPath]) -> tuple[HopLoad, ...]:
    """Each hop the slow pairs cross, with those pairs and the count of healthy ones through it."""
    through: dict[Hop, list[str]] = {}
    for p in slow:
        for hop in dict.fromkeys(p.hops):
            through.setdefault(hop, []).append(p.subject)
    fine: Counter[Hop] = Counter(x for p in healthy for x in set(p.hops))
    out = [HopLoad(hop, tuple(pairs), fine[hop]) for hop, pairs in through.items()]
    return tuple(sorted(out, key=lambda x: (-len(x.slow_pairs), x.hop.subject)))


def _explaining(
    found: Iterable[Culprit], bad_nodes: list[tuple[str, tuple[End, ...]]], slow: list[PairPath]
) -> Iterable[Culprit]:
    """Uplink culprits with the bad adapters below them whose slow pairs they all carry."""
    for c in found:
        if c.hop.kind != UPLINKS:
            yield c
            continue
        pairs = set(c.pairs)
        names = []
        for _label, ends in bad_nodes:
            for e in ends:
                if e.at is None or e.at.switch != c.hop.switch:
                    continue
                mine = {p.subject for p in slow if (e.host, e.adapter) in _hosts(p)}
                if mine and mine <= pairs:
                    names.append(f"{e.host} {e.adapter}")
        yield replace(c, explains=tuple(names))


def _caveat(found: Iterable[Culprit], router: Router) -> Iterable[Culprit]:
    for c in found:
        if router.routes_read:
            yield replace(c, routes_read=True)
        else:
            yield c if router.names_isls else replace(c, isls_unknown=True)


def _hosts(p: PairPath) -> set[tuple[str, str]]:
    return {(e.host, e.adapter) for e in p.ends}


def _with_ports(found: list[Culprit], placer: _Placer) -> Iterable[Culprit]:
    """Uplink groups labelled with every candidate port seen."""
    for c in found:
        if c.hop.kind == UPLINKS:
            c = replace(c, hop=_labelled(c.hop, placer))
        yield replace(c, alternatives=tuple(_labelled(a, placer) for a in c.alternatives))


def _labelled(hop: Hop, placer: _Placer) -> Hop:
    if hop.kind != UPLINKS:
        return hop
    ports = placer.uplink_ports.get(hop.switch, set())
    return replace(hop, label=f"{hop.label} (port(s) {_ports(ports)})")


def culprits(
    slow: list[PairPath], healthy: list[PairPath], widths: dict[str, int] | None = None
) -> list[Culprit]:
    """The hops shared by slow pairs, greedily, best explanation first (the module docstring);
    ``widths``: per switch, its candidate uplinks (default 1)."""
    widths = widths or {}
    through: dict[Hop, list[PairPath]] = {}
    for p in slow:
        for hop in dict.fromkeys(p.hops):
            through.setdefault(hop, []).append(p)
    fine: Counter[Hop] = Counter(x for p in healthy for x in set(p.hops))
    inside_ok: Counter[str] = Counter()
    inside_slow: Counter[str] = Counter()
    for p, counter in [(p, inside_ok) for p in healthy] + [(p, inside_slow) for p in slow]:
        a, b = p.ends
        if a.at is not None and b.at is not None and a.at.switch == b.at.switch:
            counter[a.at.switch] += 1
    placed = sum(1 for p in slow if p.hops)
    left = {id(p) for p in slow}
    out: list[Culprit] = []
    while True:
        best: tuple[tuple[float, int, int, str], Hop, list[PairPath]] | None = None
        for hop, pairs in through.items():
            rem = [p for p in pairs if id(p) in left]
            n, h = len(rem), fine[hop]
            if n < MIN_SHARED:
                continue
            if hop.kind in (HOST_LINK, ISL) and n <= h:
                continue
            if hop.kind == UPLINKS and (
                inside_slow[hop.switch] or n * widths.get(hop.switch, 1) < n + h
            ):
                continue
            key = (-n / (n + h), -n, (HOST_LINK, ISL, UPLINKS).index(hop.kind), hop.subject)
            if best is None or key < best[0]:
                best = (key, hop, rem)
        if best is None:
            return out
        _key, hop, rem = best
        same = {id(p) for p in rem}
        alike = tuple(
            other
            for other, pairs in through.items()
            if other != hop
            and fine[other] == fine[hop]
            and {id(p) for p in pairs if id(p) in left} == same
        )
        inside = inside_ok[hop.switch] if hop.kind == UPLINKS else 0
        subjects = tuple(p.subject for p in rem)
        out.append(Culprit(hop, len(rem), placed, fine[hop], inside, subjects, alike))
        left -= {id(p) for p in rem}


def on_fabric(
    sweeps: Iterable[Any], fab: Fabric, names: Names | None = None, sh: Shape | None = None
) -> tuple[SweepOnFabric, ...]:
    """Each sweep (:class:`ibdiag.report.view.SweepPart`) on ``fab``; ``names`` and ``sh``: the
    judged fabric's (:class:`ibdiag.fabric.judge.Judged`), else made here."""
    names = names or Names(fab, {})
    router = Router(sh or shape(fab), fab)
    return tuple(place_sweep(part.result, part.path, fab, names, router) for part in sweeps)

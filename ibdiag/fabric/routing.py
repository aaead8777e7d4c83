"""``fabric.routing``: what the subnet manager's routes (``--routes``) do with the host ports. Pure over
the model.

*Destinations* are the base LIDs of the active host ports (an adapter port with a LID whose cable to a
switch is up at both ends, :func:`ibdiag.fabric.shape.host_links`). Every switch whose forwarding table
was read must send each of them out of a port whose link is up, and the switch the host hangs on out of
that host's cable; a table without the entry, or one naming port 0, a port not cabled or not Active, is a
destination that switch cannot reach (ibdiagnet's routing check says the same).

*Balance*, on a tree of tiers (:mod:`ibdiag.fabric.shape`): per leaf, the destinations not on that leaf
that each of its active uplinks carries. Static routes that stack them on one uplink make a
non-blocking fat tree block: traffic to those hosts shares one link while the others idle. A leaf
warns when its busiest uplink carries more than ``ceil(total / uplinks) x (1 + tolerance)``
destinations and at least :data:`MIN_EXCESS` more than that even share (``[fabric]
route_balance_tolerance``, 0.5 by default). Only base LIDs (LMC 0) and the linear tables are judged.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil
from typing import Any

from ibdiag.fabric.checks import CHECKS, listed
from ibdiag.fabric.hosts import Names
from ibdiag.fabric.model import Fabric, PortRef
from ibdiag.fabric.shape import TREE, Shape, host_links, up
from ibdiag.findings.model import Finding, Severity

#: The busiest uplink must carry at least this many destinations over the even share to warn.
MIN_EXCESS = 2
#: Destinations given a finding each; more are summed up in one (``-o json`` counts them all).
MAX_FINDINGS = 50


@dataclass(frozen=True)
class Destination:
    lid: int
    ca: PortRef
    """The adapter port."""
    switch: PortRef
    """The switch port its cable goes to."""


@dataclass(frozen=True)
class Miss:
    """A switch whose table does not get a destination anywhere."""

    switch: str
    dest: Destination
    why: str


@dataclass(frozen=True)
class LeafBalance:
    leaf: str
    carried: tuple[tuple[int, int], ...]
    """(uplink port, remote destinations it carries), by port; every active uplink, 0 included."""

    @property
    def total(self) -> int:
        return sum(n for _p, n in self.carried)

    @property
    def even(self) -> int:
        return ceil(self.total / len(self.carried)) if self.carried else 0

    @property
    def busiest(self) -> tuple[int, int]:
        """(port, count): the lowest-numbered of the busiest uplinks."""
        return max(self.carried, key=lambda pc: (pc[1], -pc[0]))

    def unbalanced(self, tolerance: float) -> bool:
        if not self.carried:
            return False
        most = self.busiest[1]
        return most > self.even * (1 + tolerance) and most >= self.even + MIN_EXCESS

    def to_json(self) -> dict[str, Any]:
        return {
            "leaf": self.leaf,
            "destinations": self.total,
            "even": self.even,
            "uplinks": [{"port": p, "destinations": n} for p, n in self.carried],
        }


@dataclass(frozen=True)
class Routing:
    destinations: tuple[Destination, ...]
    switches: int
    """Switches whose tables were judged."""
    misses: tuple[Miss, ...]
    balance: tuple[LeafBalance, ...] | None
    """Per leaf, on a tree of tiers; None on any other shape."""

    def to_json(self, tolerance: float) -> dict[str, Any]:
        return {
            "destinations": len(self.destinations),
            "unreachable": len(self.misses),
            "balance": None
            if self.balance is None
            else [{**b.to_json(), "unbalanced": b.unbalanced(tolerance)} for b in self.balance],
        }


def destinations(fab: Fabric) -> list[Destination]:
    out = []
    for ports in host_links(fab).values():
        for p in ports:
            assert p.peer is not None
            ca = fab.port(p.peer)
            if ca is not None and ca.lid:
                out.append(Destination(ca.lid, ca.ref, p.ref))
    return sorted(out, key=lambda d: d.lid)


def _why(fab: Fabric, sw: str, d: Destination, out: int | None) -> str | None:
    if out is None:
        return f"no entry for LID {d.lid}"
    if sw == d.switch.guid:
        return None if out == d.switch.port else f"port {out}, not its cable (port {d.switch.port})"
    if out == 0:
        return "port 0 (the switch itself)"
    p = fab.port(PortRef(sw, out))
    if p is None or p.peer is None:
        return f"port {out}, not cabled"
    far = fab.port(p.peer)
    if far is None:
        return f"port {out}, its far end not discovered"
    for end in (p, far):
        if not up(end):
            return f"port {out}, {end.state or 'not Active'}"
    return None


def routing(fab: Fabric, sh: Shape) -> Routing | None:
    """None without routes (``--routes`` not given)."""
    if fab.routes is None:
        return None
    dests = destinations(fab)
    # The ports whose link is up at both ends, per switch: one look-up per entry on the common path
    # (48 switches x 1024 LIDs on the benchmark's fabric); _why says what is wrong with the rest.
    live: dict[str, set[int]] = {}
    for p in fab.ports:
        far = fab.port(p.peer) if p.peer is not None else None
        if far is not None and up(p) and up(far):
            ports = live.get(p.guid)
            if ports is None:
                ports = live[p.guid] = set()
            ports.add(p.port)
    misses = []
    for sw, table in sorted(fab.routes.items()):
        if fab.node(sw) is None:
            continue
        ok = live.get(sw, set()) - {0}
        for d in dests:
            out = table.get(d.lid)
            if out == d.switch.port if sw == d.switch.guid else out in ok:
                continue
            misses.append(Miss(sw, d, _why(fab, sw, d, out) or f"port {out}"))
    balance = None
    if sh.kind == TREE and sh.graph is not None:
        balance = []
        for leaf in sorted(s for s, t in sh.tiers.items() if t == 0):
            lft = fab.routes.get(leaf)
            if lft is None:
                continue
            ups = sorted(
                e.mine(leaf).port
                for e in sh.graph.edges_of(leaf)
                if sh.tiers.get(e.other(leaf), 0) > 0
            )
            count = dict.fromkeys(ups, 0)
            for d in dests:
                out = lft.get(d.lid)
                if d.switch.guid != leaf and out in count:
                    count[out] += 1
            balance.append(LeafBalance(leaf, tuple(sorted(count.items()))))
    return Routing(
        tuple(dests), len(fab.routes), tuple(misses), None if balance is None else tuple(balance)
    )


def _unreachable(names: Names, misses: tuple[Miss, ...]) -> list[Finding]:
    by_dest: dict[Destination, list[Miss]] = {}
    for m in misses:
        by_dest.setdefault(m.dest, []).append(m)
    out = []
    for d, ms in sorted(by_dest.items(), key=lambda kv: kv[0].lid):
        out.append(
            Finding(
                "fabric.routing",
                Severity.FAIL,
                names.subject(d.ca),
                f"{names.port(d.ca)} (LID {d.lid}, on {names.port(d.switch)}) cannot be reached from "
                f"{len(ms)} switch(es): "
                + listed([f"{names.node(m.switch)} ({m.why})" for m in ms]),
                value=len(ms),
                limit=0,
                hint="the subnet manager has not routed it, or a route points at a dead link: check the SM's log "
                "and `ibroute -n LID` of the switch; a new sweep should fix it (`ibdiag fabric --routes` again)",
            )
        )
    if len(out) > MAX_FINDINGS:
        rest = len(out) - MAX_FINDINGS
        out = out[:MAX_FINDINGS] + [
            Finding(
                "fabric.routing",
                Severity.FAIL,
                "fabric",
                f"and {rest} more host ports some switch cannot reach: -o json counts them",
                value=rest,
                hint="so many at once: the subnet manager's routing failed (its log says why)",
            )
        ]
    return out


def _balance_warn(names: Names, b: LeafBalance) -> Finding:
    port, most = b.busiest
    counts = [n for _p, n in b.carried]
    return Finding(
        "fabric.routing",
        Severity.WARN,
        names.subject(PortRef(b.leaf, 0)).rsplit(":", 1)[0],
        f"leaf {names.node(b.leaf)} sends {most} of its {b.total} remote destinations through "
        f"{names.port(PortRef(b.leaf, port))} where an even share is {b.even} over {len(counts)} uplinks "
        f"(uplinks carry {min(counts)}–{max(counts)})",
        value=most,
        limit=b.even,
        hint="static routes stacked on one uplink make a non-blocking tree block (traffic to those hosts shares "
        "one link while others idle): were all uplinks up at the SM's last heavy sweep? a fat-tree routing "
        "engine (opensm `routing_engine ftree` or `updn`) spreads them; re-sweep and read again",
    )


@CHECKS.check(
    "fabric.routing",
    "with --routes: a switch with no route (or a route over a dead link) to an active host port: fail; "
    "a leaf whose routes stack remote destinations on one uplink ([fabric] route_balance_tolerance): warn",
)
def routing_check(names: Names, r: Routing | None, tolerance: float) -> list[Finding]:
    if r is None or not r.destinations or not r.switches:
        return []
    out = _unreachable(names, r.misses)
    out += [_balance_warn(names, b) for b in r.balance or () if b.unbalanced(tolerance)]
    if out:
        return out
    reach = f"{r.switches} switches route all {len(r.destinations)} host ports"
    if r.balance is None:
        return [
            Finding(
                "fabric.routing",
                Severity.OK,
                "fabric",
                reach + "; balance not judged (not a tree of tiers)",
            )
        ]
    counts = [n for b in r.balance for _p, n in b.carried]
    lo, hi = min(counts, default=0), max(counts, default=0)
    spread = f"{lo}" if lo == hi else f"{lo}–{hi}"
    return [
        Finding(
            "fabric.routing",
            Severity.OK,
            "fabric",
            f"routes balanced: {len(r.balance)} leaves, uplinks carry {spread} destinations each; {reach}",
        )
    ]

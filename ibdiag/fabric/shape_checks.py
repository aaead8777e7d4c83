"""Checks on the fabric's shape: its tiers, the oversubscription of each switch, the rails' cabling.

They judge the active links only, and nothing on a fabric discovered in part (``fabric.discovery``
fails then: a leaf whose uplinks were not reached is not short of them) or with no link up (no SM).
"""

from __future__ import annotations

from collections import Counter
from statistics import median, median_low

from ibdiag.fabric.checks import CHECKS, listed
from ibdiag.fabric.config import FabricConfig
from ibdiag.fabric.devices import device_key
from ibdiag.fabric.hosts import Names
from ibdiag.fabric.model import Fabric
from ibdiag.fabric.rails import Rails
from ibdiag.fabric.shape import (
    MESH,
    TREE,
    Shape,
    SwitchLoad,
    host_links,
    tier_name,
    tier_plural,
    up,
)
from ibdiag.findings.model import Finding, Severity

#: Ratios within this share of each other are the same (1.005:1 is 1:1).
RATIO_TOL = 0.01


def judgeable(fab: Fabric) -> bool:
    return not fab.partial and any(up(p) for p in fab.ports if fab.is_isl(p) or p.peer)


def ratio_text(r: float | None) -> str:
    return "no uplink" if r is None else f"{r:.3g}:1"


@CHECKS.check(
    "fabric.tiers",
    "the fabric's shape from its graph: a tree of tiers (leaf/spine/core), a single switch; not a tree (a mesh, parts not connected): warn",
)
def tiers(fab: Fabric, sh: Shape) -> Finding | None:
    if not judgeable(fab):
        return None
    if sh.kind == TREE or sh.kind == "single-switch" or sh.kind == "no-switch":
        bis = (
            f"; bisection {sh.bisection_gbps:g} Gb/s of {sh.host_gbps / 2:g} Gb/s (half the host links)"
            if sh.bisection_gbps is not None
            else ""
        )
        return Finding("fabric.tiers", Severity.OK, "fabric", sh.text + bis)
    return Finding(
        "fabric.tiers",
        Severity.WARN,
        "fabric",
        sh.text + "; oversubscription and placement are not judged",
        value=sh.kind,
        hint="a tree of tiers has ISLs only between adjacent tiers: an ISL inside a tier is a miscabled link or a mesh design"
        if sh.kind == MESH
        else "switches with no active ISL between them cannot reach each other: check the links between them",
    )


def _peers(loads: list[SwitchLoad]) -> float | None:
    """The typical ratio of a tier: the lower median (of two leaves, one short of an uplink, the
    typical one is the other)."""
    ratios = [x.ratio for x in loads if x.ratio is not None]
    return median_low(ratios) if ratios else None


def _why(fab: Fabric, names: Names, x: SwitchLoad, peers: list[SwitchLoad]) -> str:
    carrying = [p for p in peers if p.down_gbps > 0] or peers
    more = median(p.uplinks for p in carrying)
    reach = median(len(p.up_to) for p in carrying)
    parts = [
        f"{x.down_gbps:g} Gb/s down over {x.up_gbps:g} Gb/s up in {x.uplinks} uplink(s)"
        + (f" where its peers have {more:g}" if x.uplinks < more else "")
        + (
            f", to {len(x.up_to)} switches where its peers reach {reach:g}"
            if len(x.up_to) < reach
            else ""
        )
    ]
    if x.slow_uplinks:
        parts.append(
            "uplink(s) trained below their peers: "
            + listed([f"{names.port(p.ref)} at {p.link_text}" for p in x.slow_uplinks], 4)
        )
    return "; ".join(parts)


def _short(x: SwitchLoad, loads: list[SwitchLoad]) -> Severity | None:
    """How a switch above its peers' ratio is judged: None when it has its peers' uplink capacity
    (more hosts by design, not fewer uplinks); warn when an uplink only trained slow (fabric.link_rate
    fails the link) or when it has fewer cables evenly to as many switches as its peers reach (built
    so, or every cable of a bundle missing: the dump cannot tell); fail when it reaches fewer switches
    above than its peers or has fewer cables to some of them (an uplink down or missing)."""
    carrying = [p for p in loads if p.down_gbps > 0] or loads
    if x.up_gbps >= median(p.up_gbps for p in carrying) * (1 - RATIO_TOL):
        return None
    if x.slow_uplinks and x.uplinks >= median(p.uplinks for p in carrying):
        return Severity.WARN
    reach = median(len(p.up_to) for p in carrying)
    even = len(set(x.up_to)) <= 1
    if len(x.up_to) >= reach and even:
        return Severity.WARN
    return Severity.FAIL


def _leaf_classes(fab: Fabric, leaves: list[SwitchLoad]) -> list[tuple[int, list[SwitchLoad]]]:
    """Leaves grouped by the adapters they serve (the device most of their hosts have): a storage
    leaf of EDR servers is judged against storage leaves, not the compute leaves (its own class)."""
    links = host_links(fab)
    groups: dict[str, list[SwitchLoad]] = {}
    for x in leaves:
        kinds = Counter(
            device_key(fab.node(p.peer.guid)) for p in links.get(x.guid, []) if p.peer is not None
        )
        groups.setdefault(kinds.most_common(1)[0][0] if kinds else "", []).append(x)
    return [(0, g) for _k, g in sorted(groups.items(), key=lambda kv: -len(kv[1]))]


@CHECKS.check(
    "fabric.oversubscription",
    "a switch more oversubscribed than its tier's peers for want of uplinks: fail (it reaches fewer switches above, or has fewer cables to some: an uplink down or missing), warn (an uplink trained slow, or fewer cables evenly spread: built so?); the leaves above [fabric] expect_oversubscription: warn",
)
def oversubscription(fab: Fabric, names: Names, sh: Shape, cfg: FabricConfig) -> list[Finding]:
    if not judgeable(fab) or sh.kind != TREE:
        return []
    out: list[Finding] = []
    expect = cfg.expect_oversubscription
    typical: dict[int, float | None] = {}
    typical_size: dict[int, int] = {}
    groups = [(t, [x for x in sh.loads if x.tier == t]) for t in range(sh.depth - 1)]
    if groups:
        groups = _leaf_classes(fab, groups[0][1]) + groups[1:]
    for t, loads in groups:
        peer = _peers(loads)
        if t not in typical or len(loads) > typical_size.get(t, 0):
            typical[t], typical_size[t] = peer, len(loads)
        bar = max(expect, peer or 0.0) * (1 + RATIO_TOL)
        for x in loads:
            if (x.ratio is not None and x.ratio <= bar) or (x.ratio is None and x.down_gbps <= 0):
                continue
            sev = _short(x, loads)
            if sev is None:
                continue
            out.append(
                Finding(
                    "fabric.oversubscription",
                    sev,
                    names.switch_token(x.guid),
                    f"{tier_name(t)} {names.node(x.guid)} is {ratio_text(x.ratio)} where its peers are "
                    f"{ratio_text(peer)} (expected {expect:g}:1): {_why(fab, names, x, loads)}",
                    value=None if x.ratio is None else round(x.ratio, 4),
                    limit=round(max(expect, peer or 0.0), 4),
                    hint="an uplink down, missing or trained narrow/slow: compare its ISLs with a peer's (`iblinkinfo`), reseat or replace; `--since` names links lost"
                    if sev is Severity.FAIL
                    else "an uplink trained slow: fabric.link_rate names the link; reseat or replace it"
                    if x.slow_uplinks
                    else "fewer cables to each switch above than its peers: if built so, nothing to do; else compare its ISLs with a peer's (`iblinkinfo`)",
                )
            )
    leaf = typical.get(0)
    if leaf is not None and leaf > expect * (1 + RATIO_TOL):
        out.append(
            Finding(
                "fabric.oversubscription",
                Severity.WARN,
                "fabric",
                f"the leaves are {ratio_text(leaf)} (the median leaf) where [fabric] expect_oversubscription says {expect:g}:1; "
                + _tier_text(sh),
                value=round(leaf, 4),
                limit=expect,
                hint=f"if the fabric is built {leaf:.3g}:1, set [fabric] expect_oversubscription = {leaf:.3g}; otherwise uplinks are missing on every leaf",
            )
        )
    if not out:
        out.append(
            Finding(
                "fabric.oversubscription",
                Severity.OK,
                "fabric",
                _tier_text(sh) + f" (expected {expect:g}:1 or better)",
            )
        )
    return out


def _tier_text(sh: Shape) -> str:
    parts = []
    for t in range(sh.depth - 1):
        ratios = sorted({round(x.ratio, 3) for x in sh.loads if x.tier == t and x.ratio})
        each = (
            f"every {tier_name(t)} {ratios[0]:g}:1"
            if len(ratios) == 1
            else f"{tier_plural(t, 2)} {ratios[0]:g}:1 to {ratios[-1]:g}:1"
            if ratios
            else f"{tier_plural(t, 2)} carry nothing"
        )
        whole = sh.tier_ratio(t)
        parts.append(
            each + (f" ({whole:.3g}:1 over the tier)" if len(ratios) > 1 and whole else "")
        )
    if sh.bisection_gbps is not None:
        parts.append(f"bisection {sh.bisection_gbps:g} Gb/s")
    return "; ".join(parts)


@CHECKS.check(
    "fabric.rails",
    "rail-optimised cabling: an adapter on a leaf of another rail (a swapped or moved cable), or on its rail's leaf of another unit: fail; on another port than its host keeps on every rail: warn",
)
def rails(fab: Fabric, names: Names, r: Rails) -> list[Finding]:
    if not judgeable(fab) or r.verdict is None:
        return []
    out = []
    for m in r.misplaced:
        out.append(
            Finding(
                "fabric.rails",
                Severity.FAIL,
                m.subject,
                m.text,
                value=m.rail,
                limit=m.leaf_rail,
                hint="rail k of every host of a scalable unit belongs on rail k's leaf: swap the cables back, or, "
                "if the host names its adapters in another order (udev/PCI), rename them (the plan: `ibdiag fabric --expect PLAN`)",
            )
        )
    for v in r.moved:
        out.append(
            Finding(
                "fabric.rails",
                Severity.FAIL if v.kind == "unit" else Severity.WARN,
                v.subject,
                v.text,
                value=v.end.port,
                hint="a cable on another unit's leaf sends the unit's traffic over the spines: move it back"
                if v.kind == "unit"
                else "the link works, but not where the cabling pattern (and a plan) puts it: move it back, or "
                "update the plan (`ibdiag fabric --expect PLAN` names every moved cable)",
            )
        )
    if not out:
        text = r.verdict
        if r.not_judged:
            text += " (" + listed([f"{h}: {w}" for h, w in r.not_judged], 4) + ")"
        out.append(Finding("fabric.rails", Severity.OK, "fabric", text))
    return out

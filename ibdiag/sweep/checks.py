"""Findings of a sweep (``sweep.*``), one function per check id (:mod:`ibdiag.findings.registry`).

Every node gets one finding — ``sweep.node`` (ok, warn: suspect or untested, fail: bad) or
``sweep.unreachable`` (fail) — so JUnit has one case per node and Prometheus one gauge per node.
Links get a finding only when they are bad (``sweep.link`` fail) or slow without attribution (warn).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from ibdiag.findings.model import Finding, Severity
from ibdiag.findings.registry import CheckRegistry
from ibdiag.sweep.analysis import (
    EndStat,
    EndVerdict,
    LinkStat,
    LinkVerdict,
    NodeStatus,
    NodeVerdict,
    RailStats,
)
from ibdiag.sweep.model import SweepResult
from ibdiag.sweep.nodes import FleetNode
from ibdiag.sweep.stats import gbs_text

CHECKS = CheckRegistry("sweep")

NODE_HINT = (
    "a host-side problem slows every rail: run `ibdiag topo` and `ibdiag counters` on it (PCIe width, "
    "NUMA placement, GPUDirect module, errors) and drain it until fixed"
)
RAIL_HINT = (
    "one adapter, its cable or its switch port: run `ibdiag topo` and `ibdiag counters --device {dev}` on "
    "the node, then check the cable and the switch port (mlxlink -d {dev} -c)"
)
LINK_HINT = (
    "the cable, the switch ports or the route between these two: compare both ports' counters "
    "(`ibdiag counters --device ...` on each node) and the switch ports on the path (ibdiagnet, mlxlink)"
)


CONFOUNDED_HINT = (
    "raise confirm_max_rounds ([sweep]) so every such link is re-tested alone, or give the sweep the "
    "fabric (a saved `ibdiag fabric --routes` snapshot, or a cabling plan) so its rounds keep tests apart"
)


def _gbs(v: float | None) -> str:
    return gbs_text(v)


def _z(v: float | None) -> str:
    return "" if v is None else f", z {v:+.1f}"


def _rail_name(result: SweepResult, rank: int, rail: int) -> str:
    adapter = result.adapter(rank, rail)
    return f"rail {rail} ({adapter})" if adapter else f"rail {rail} (tcp)"


def _ratio(bw_gbs: float | None, rail: RailStats | None) -> float | None:
    """Bandwidth as a share of the rail's median."""
    if bw_gbs is None or rail is None or not rail.bw.median:
        return None
    return bw_gbs / rail.bw.median


def _end_text(result: SweepResult, end: EndStat, rail: RailStats | None) -> str:
    median = rail.bw.median if rail else None
    ratio = (
        f", {end.bw_gbs / median:.2f} x the rail's {_gbs(median)}"
        if end.bw_gbs is not None and median
        else ""
    )
    return (
        f"{_rail_name(result, end.rank, end.rail)}: median {_gbs(end.bw_gbs)}{ratio}{_z(end.z)}, "
        f"slow with {end.slow_partners} of {end.partners} partners ({end.confirming} of them fine with others)"
    )


@CHECKS.check(
    "sweep.node",
    "a node's rails slow with most partners, confirmed against partners fine with others: fail; suspect or untested: warn",
)
def node_health(result: SweepResult, verdict: NodeVerdict) -> Finding | None:
    if verdict.status is NodeStatus.UNREACHABLE:
        return None
    node = result.nodes[verdict.rank]
    a = result.analysis
    worst: EndStat | None  # a bad node's slowest bad end; else the slowest end, if any
    if verdict.status is NodeStatus.UNTESTED:
        confounded = [
            lk
            for lk in a.links
            if lk.verdict is LinkVerdict.CONFOUNDED and verdict.rank in (lk.a, lk.b)
        ]
        if confounded:
            return Finding(
                "sweep.node",
                Severity.WARN,
                node.label,
                f"not judged: its {len(confounded)} slow link(s) were slow only beside other tests "
                "that may have crossed their links, and were not re-tested alone",
                hint=CONFOUNDED_HINT,
            )
        return Finding(
            "sweep.node",
            Severity.WARN,
            node.label,
            "not tested: every partner it was given did not answer",
            hint="rerun the sweep once the unreachable nodes are back or left out",
        )
    if verdict.status is NodeStatus.BAD:
        return _bad_node(result, verdict)
    if verdict.status is NodeStatus.SUSPECT:
        sus = [e for e in verdict.ends if e.verdict is EndVerdict.SUSPECT]
        msg = (
            "; ".join(_end_text(result, e, a.rail(e.rail)) for e in sus)
            + f": not confirmed (needs {a.config.confirm_partners} slow partners fine with others)"
        )
        return Finding(
            "sweep.node",
            Severity.WARN,
            node.label,
            msg,
            value=sus[0].bw_gbs,
            unit="GB/s",
            hint="too few known-good partners to tell this node from its links: keep the second pass on, add --rounds, or sweep these nodes with --pattern pairwise",
        )
    worst = verdict.worst_end()
    partners = max((e.partners for e in verdict.ends), default=0)
    msg = f"{len(verdict.ends)} rail{'s' if len(verdict.ends) != 1 else ''} within range of the fleet, {partners} partner{'s' if partners != 1 else ''} each"
    if worst is not None and worst.bw_gbs is not None:
        msg += f"; slowest {_rail_name(result, worst.rank, worst.rail)}: median {_gbs(worst.bw_gbs)}{_z(worst.z)}"
    return Finding(
        "sweep.node",
        Severity.OK,
        node.label,
        msg,
        value=None if worst is None else worst.bw_gbs,
        unit="GB/s",
    )


def _bad_node(result: SweepResult, verdict: NodeVerdict) -> Finding:
    """A bad node: as a whole (most of its rails bad), or rail by rail."""
    node = result.nodes[verdict.rank]
    a = result.analysis
    bad = [e for e in verdict.ends if e.verdict is EndVerdict.BAD]
    worst = min(bad, key=lambda e: e.bw_gbs if e.bw_gbs is not None else -1.0)
    worst_rail = a.rail(worst.rail)
    limit = worst_rail.bw_limit_gbs if worst_rail else None
    if verdict.whole_node:
        ratios = sorted(r for e in bad if (r := _ratio(e.bw_gbs, a.rail(e.rail))) is not None)
        span = (
            (
                f"{ratios[0]:.2f}"
                if ratios[-1] - ratios[0] < 0.005
                else f"{ratios[0]:.2f}-{ratios[-1]:.2f}"
            )
            if ratios
            else ""
        )
        share = f", {span} x the rails' medians" if ratios else ""
        partners = max(e.partners for e in bad)
        msg = f"slow on {len(bad)} of {len(verdict.ends)} rails{share}, slow with most of its {partners} partners, who are fine with others"
        hint = NODE_HINT
    else:
        msg = "; ".join(_end_text(result, e, a.rail(e.rail)) for e in bad)
        dev = result.adapter(worst.rank, worst.rail) or "<adapter>"
        hint = RAIL_HINT.format(dev=dev)
    return Finding(
        "sweep.node",
        Severity.FAIL,
        node.label,
        msg,
        value=worst.bw_gbs,
        limit=limit,
        unit="GB/s",
        hint=hint,
    )


def link_subject(result: SweepResult, link: LinkStat) -> str:
    """``gpu-017 (rank 17) mlx5_3 <-> gpu-040 (rank 40) mlx5_3``."""
    ends = []
    for rank in (link.a, link.b):
        ends.append(f"{result.nodes[rank].label} {result.adapter(rank, link.rail) or 'tcp'}")
    return " <-> ".join(ends)


def _link_text(link: LinkStat, rail: RailStats | None) -> str:
    if link.failed:
        text = f"rail {link.rail}: {link.failed} of {link.tests} test{'s' if link.tests != 1 else ''} failed"
        return text + (f", the others gave {_gbs(link.bw_gbs)}" if link.bw_gbs is not None else "")
    median = rail.bw.median if rail else None
    ratio = (
        f", {link.bw_gbs / median:.2f} x the rail's median {_gbs(median)}"
        if link.bw_gbs is not None and median
        else ""
    )
    text = f"rail {link.rail}: {_gbs(link.bw_gbs)}{ratio}{_z(link.z)}"
    if (
        link.lat_z is not None
        and rail is not None
        and rail.lat_limit_us is not None
        and link.lat_us is not None
        and link.lat_us >= rail.lat_limit_us
    ):
        text += f", latency {link.lat_us:.1f} us (z {link.lat_z:+.1f})"
    return text


@CHECKS.check(
    "sweep.link",
    "a slow or failing pair whose ends are both fine with other partners: fail; slow but not attributable: warn",
)
def link_health(result: SweepResult, link: LinkStat) -> Finding | None:
    said = _LINK_SAYS.get(link.verdict)
    if said is None:
        return None
    severity, why, hint = said
    rail = result.analysis.rail(link.rail)
    return Finding(
        "sweep.link",
        severity,
        link_subject(result, link),
        _link_text(link, rail) + "; " + why,
        value=link.bw_gbs,
        limit=rail.bw_limit_gbs if rail else None,
        unit="GB/s",
        hint=hint,
    )


#: What ``sweep.link`` says of each verdict it names: severity, why, what to do.
_LINK_SAYS = {
    LinkVerdict.BAD: (Severity.FAIL, "both ends are fine with other partners", LINK_HINT),
    LinkVerdict.CONFOUNDED: (
        Severity.WARN,
        "slow only beside other tests that may have crossed its links (a collision can be what was "
        "measured), and not re-tested alone: not named",
        CONFOUNDED_HINT,
    ),
    LinkVerdict.UNRESOLVED: (
        Severity.WARN,
        "an end has no fine partner to compare with, so link and node cannot be told apart",
        "rerun with the second pass on and more --rounds, or test the two nodes against others with bench p2p",
    ),
}


def first_silent_rounds(result: SweepResult) -> dict[int, int]:
    """Rank -> the first round in which it did not answer."""
    out: dict[int, int] = {}
    for p in result.pairs:
        for rank in p.unreachable:
            if rank not in out or p.round < out[rank]:
                out[rank] = p.round
    return out


@CHECKS.check(
    "sweep.unreachable",
    "a node that did not answer within --timeout: fail (the sweep goes on without it)",
)
def unreachable(result: SweepResult, verdict: NodeVerdict, first: int | None) -> Finding | None:
    if verdict.status is not NodeStatus.UNREACHABLE:
        return None
    node = result.nodes[verdict.rank]
    when = (
        f" from round {first + 1} of {result.settings.first_pass_rounds + result.settings.second_pass_rounds}"
        if first is not None
        else ""
    )
    return Finding(
        "sweep.unreachable",
        Severity.FAIL,
        node.label,
        f"did not answer within {result.settings.spec.timeout_s:g} s{when} ({node.address}); the sweep went on without it",
        value=result.settings.spec.timeout_s,
        unit="s",
        hint="check that the node is up and its ibdiag process is running (the launcher's log for that rank); then sweep again",
    )


@CHECKS.check(
    "sweep.fleet",
    "a rail's median bandwidth below min_bw_share of its line rate: warn (the whole fleet, not one node)",
)
def fleet_rail(result: SweepResult, rail: RailStats) -> Finding | None:
    share = rail.share
    subject = f"rail {rail.rail}"
    if rail.bw.median is None:
        return None
    if share is None:
        return Finding(
            "sweep.fleet",
            Severity.OK,
            subject,
            f"median {_gbs(rail.bw.median)} over {rail.bw.count} links; line rate unknown",
            value=rail.bw.median,
            unit="GB/s",
        )
    msg = f"median {_gbs(rail.bw.median)} over {rail.bw.count} links = {share:.0%} of the {rail.line_rate_gbps:g} Gb/s line rate"
    limit = result.analysis.config.min_bw_share
    if share < limit:
        return Finding(
            "sweep.fleet",
            Severity.WARN,
            subject,
            msg + ": the whole rail is slow, not one node",
            value=round(share, 4),
            limit=limit,
            hint="a fleet-wide setting or the test itself: message size (--sizes), transport (tcp is host-bound), NCCL/adapter settings, or congestion from other jobs",
        )
    return Finding("sweep.fleet", Severity.OK, subject, msg, value=round(share, 4), limit=limit)


@CHECKS.check(
    "sweep.rails",
    "a node with fewer rails than most nodes: warn (its missing rails were not tested)",
)
def missing_rails(result: SweepResult, usual: int, rank: int) -> Finding | None:
    node = result.nodes[rank]
    if len(node.rails) >= usual:
        return None
    return Finding(
        "sweep.rails",
        Severity.WARN,
        node.label,
        f"has {len(node.rails)} rail{'s' if len(node.rails) != 1 else ''}, most nodes have {usual}: rails {len(node.rails)}..{usual - 1} were not tested",
        value=len(node.rails),
        limit=usual,
        hint="run `ibdiag topo` on it: an adapter is missing, down, or left out of the rail list",
    )


@CHECKS.check(
    "sweep.tcp_fallback",
    "--transport auto measured a node over TCP (no usable RDMA on it): warn",
)
def tcp_fallback(result: SweepResult, rank: int) -> Finding | None:
    node = result.nodes[rank]
    return Finding(
        "sweep.tcp_fallback",
        Severity.WARN,
        node.label,
        "no usable RDMA on this node: --transport auto measured it over TCP",
        hint="run `ibdiag topo` on it (no adapter, driver, or libibverbs); --transport rdma refuses such a node (exit 3)",
    )


@CHECKS.check(
    "sweep.fabric",
    "the fabric the rounds were kept apart on (--fabric): ok; nodes it does not have, or routes assumed rather than read: warn",
)
def fabric_use(result: SweepResult) -> Finding | None:
    use = result.settings.fabric
    if use is None:
        return None
    s = result.settings
    pattern = s.pattern_rounds if s.pattern_rounds is not None else s.first_pass_rounds
    cost = f"the pattern's {pattern} round(s) ran as {s.first_pass_rounds}"
    load = (
        "" if use.max_load is None else f"; at most {use.max_load} test(s) on one link in a round"
    )
    how = {
        "routes": "the subnet manager's routes: no two tests of a round cross one link (proven)",
        "hashed": "one cross-leaf test per leaf and direction a round, whatever the hash"
        + (" (proven on two tiers)" if use.two_tier else " (not proven: more than two tiers)"),
        "destination": "destination routing assumed, not read: at most one test per leaf, direction "
        "and uplink group (a pattern a fat tree routes apart); slow results beside others are re-tested alone",
    }[use.routing]
    msg = f"rounds kept apart on {use.source}: {how}; {cost}{load}"
    if use.unplaced:
        names = ", ".join(result.nodes[r].label for r in use.unplaced[:5])
        more = f" +{len(use.unplaced) - 5} more" if len(use.unplaced) > 5 else ""
        return Finding(
            "sweep.fabric",
            Severity.WARN,
            "fabric",
            f"{len(use.unplaced)} node(s) not on {use.source} ({names}{more}): their tests are not "
            f"kept apart, and a slow one is re-tested alone; {msg}",
            value=len(use.unplaced),
            hint="add them to the plan, or check that the fabric's node descriptions carry their host names (rdma-ndd)",
        )
    severity = Severity.WARN if use.routing == "destination" else Severity.OK
    hint = (
        "save the fabric with `ibdiag fabric --routes --save` for exact paths"
        if use.routing == "destination"
        else None
    )
    return Finding("sweep.fabric", severity, "fabric", msg, value=use.max_load, hint=hint)


@CHECKS.check(
    "sweep.confirm",
    "slow results of rounds shared with other tests, re-tested alone: ok with how many were cleared; some never re-tested: warn",
)
def confirmation(result: SweepResult) -> Finding | None:
    c = result.confirmation()
    if not c["shared_tests"] and not c["retests"]:
        return None
    left = c["links_confounded"]
    msg = (
        f"{c['shared_tests']} test(s) ran beside others that may have crossed their links; "
        f"{c['retests']} re-test(s) alone or proven apart ({result.settings.confirm_rounds} round(s)): "
        f"{c['links_cleared']} link(s) and {c['nodes_cleared']} node(s) slow beside others were fine alone"
    )
    if left:
        return Finding(
            "sweep.confirm",
            Severity.WARN,
            "sweep",
            msg + f"; {left} link(s) still slow only beside others, not named",
            value=left,
            hint=CONFOUNDED_HINT,
        )
    return Finding("sweep.confirm", Severity.OK, "sweep", msg, value=c["links_cleared"])


def sweep_findings(result: SweepResult) -> list[Finding]:
    """Every finding of a sweep: unreachable nodes, nodes, links, rails, then the fleet's rails."""
    a = result.analysis
    out: list[Finding] = []
    silent = first_silent_rounds(result)
    for verdict in a.nodes:
        out += unreachable(result, verdict, silent.get(verdict.rank))
    for verdict in a.nodes:
        out += node_health(result, verdict)
    for link in a.links:
        if link.slow or link.verdict is LinkVerdict.CONFOUNDED:
            out += link_health(result, link)
    out += fabric_use(result)
    out += confirmation(result)
    usual = _usual_rails(result.nodes)
    for node in result.nodes:
        out += missing_rails(result, usual, node.rank)
    for rank in result.tcp_fallback:
        out += tcp_fallback(result, rank)
    for rail in a.rails:
        out += fleet_rail(result, rail)
    return out


def _usual_rails(nodes: Sequence[FleetNode]) -> int:
    counts = Counter(len(n.rails) for n in nodes)
    return max(counts.items(), key=lambda kv: (kv[1], kv[0]))[0]

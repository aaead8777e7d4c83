"""A fabric (and, for ``--since``/``--interval``, an earlier read) -> findings, in the order shown."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ibdiag.counters.config import CountersConfig
from ibdiag.counters.delta import build_span
from ibdiag.counters.model import Span
from ibdiag.fabric.checks import CHECKS, discovery, link_lost, port_state, subnet_manager
from ibdiag.fabric.config import FabricConfig
from ibdiag.fabric.counter_checks import errors, xmit_wait
from ibdiag.fabric.hosts import HostEnd, Names
from ibdiag.fabric.inventory import duplicate_guid, loopback, names_check
from ibdiag.fabric.linkrate import link_rate
from ibdiag.fabric.model import Fabric
from ibdiag.fabric.namemap import NodeNameMap
from ibdiag.fabric.plan import Plan, plan_check, plan_diff
from ibdiag.fabric.rails import Rails, rails
from ibdiag.fabric.routing import Routing, routing, routing_check
from ibdiag.fabric.shape import TREE, Shape, shape
from ibdiag.fabric.shape_checks import oversubscription, tiers
from ibdiag.fabric.shape_checks import rails as rail_check
from ibdiag.fabric.sharp import Sharp, sharp, sharp_check
from ibdiag.findings.model import Finding
from ibdiag.units import format_duration

__all__ = ["CHECKS", "Judged", "judge"]


@dataclass(frozen=True)
class Judged:
    fabric: Fabric
    names: Names
    findings: tuple[Finding, ...]
    span: Span | None
    shape: Shape | None = None
    rails: Rails | None = None
    extra: dict[str, Any] | None = None
    """More keys for the JSON document (``--expect``'s plan diff)."""
    routing: Routing | None = None
    """What the SM's routes do with the host ports (``--routes``)."""
    tolerance: float = 0.5
    """``[fabric] route_balance_tolerance``, for the JSON document."""
    sharp: Sharp | None = None
    """The SHARP Aggregation Nodes and the switches they are on."""


def counter_span(before: Fabric | None, after: Fabric, mode: str) -> Span | None:
    if before is None or before.counters is None or after.counters is None:
        return None
    if not after.counters.taken_at_s > before.counters.taken_at_s:
        return None
    return build_span([before.counters, after.counters], mode=mode, keep_steps=False)


def _shape_checks(
    fab: Fabric, names: Names, fcfg: FabricConfig
) -> tuple[list[Finding], Shape, Rails]:
    """Tiers, loopbacks, oversubscription and rails: what the topology's shape says."""
    sh = shape(fab)
    rl = rails(fab, names, {g for g, t in sh.tiers.items() if t == 0} if sh.kind == TREE else None)
    out = tiers(fab, sh)
    out += loopback(fab, names)
    out += oversubscription(fab, names, sh, fcfg)
    out += rail_check(fab, names, rl)
    return out, sh, rl


def judge(
    fab: Fabric,
    *,
    hosts: dict[str, HostEnd],
    cfg: CountersConfig,
    fcfg: FabricConfig,
    origin: str | None = None,
    earlier: Fabric | None = None,
    reference: Fabric | None = None,
    mode: str = "interval",
    plan: Plan | None = None,
    name_map: NodeNameMap | None = None,
) -> Judged:
    """``earlier``: the counters' first read (``--interval``) or the reference (``--since``);
    ``reference``: the fabric whose links must still be there (``--since``); ``plan``: ``--expect``'s;
    ``name_map``: a site's node-name map (``--node-name-map``: names by GUID)."""
    names = Names(fab, hosts, name_map)
    span = counter_span(earlier, fab, mode)
    dur = format_duration(span.interval_s) if span is not None else "since the last reset"
    ref_names = Names(reference, hosts, name_map) if reference is not None else None
    out: list[Finding] = []
    out += discovery(fab, names, origin)
    out += duplicate_guid(fab, names)
    out += subnet_manager(fab, names)
    out += link_lost(fab, names, reference, ref_names)
    out += port_state(fab, names)
    out += link_rate(fab, names, fcfg)
    out += errors(fab, names, cfg, span, dur)
    out += xmit_wait(fab, names, cfg, fcfg, span, dur)
    sh, rl, rt = None, None, None
    if fab.topology_known:
        said, sh, rl = _shape_checks(fab, names, fcfg)
        out += said
    sh_sharp = sharp(fab) if fab.topology_known else None
    out += sharp_check(names, sh_sharp) if sh_sharp is not None else []
    out += names_check(fab, names)
    if sh is not None:
        rt = routing(fab, sh)
        out += routing_check(names, rt, fcfg.route_balance_tolerance)
    extra = None
    if plan is not None:
        changes, got = plan_diff(fab, names, plan)
        out += plan_check(plan, changes, got["texts"])
        extra = {"plan": got["doc"]}
    return Judged(
        fab, names, tuple(out), span, sh, rl, extra, rt, fcfg.route_balance_tolerance, sh_sharp
    )

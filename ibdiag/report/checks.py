"""Findings of ``ibdiag report`` (``report.*``), one function per id (:mod:`ibdiag.findings.registry`).

One ``report.node`` per node (its worst status over everything read for it), so JUnit has a case and
Prometheus a gauge per node; ``report.config`` per node that differs from the majority (and one for
settings without a majority); ``report.input`` per file
skipped. A sweep's bad links are carried over as its own ``sweep.link`` findings. With ``--fabric``:
``report.fabric_path`` per sweep (its slow pairs placed, or what could not be) and ``report.fabric_culprit``
per switch port or uplink group that slow pairs share (:mod:`ibdiag.report.fabricpath`), and
``report.fabric_health``: the saved fabric's own failing and warning findings, on the slow pairs' paths
or not (:mod:`ibdiag.report.fabrichealth`).
"""

from __future__ import annotations

from collections.abc import Sequence

from ibdiag.findings.model import Finding, Severity
from ibdiag.findings.registry import CheckRegistry
from ibdiag.report.fabrichealth import FabricHealth
from ibdiag.report.fabricmodel import HOST_LINK, ISL, MIN_SHARED, Culprit, SweepOnFabric
from ibdiag.report.files import Skipped
from ibdiag.report.outliers import Outlier, Split, group_outliers, group_splits
from ibdiag.report.view import FleetView, NodeRow

CHECKS = CheckRegistry("report")
#: Subject of findings about the whole fleet rather than one node.
FLEET = "fleet"


def _listed(items: tuple[str, ...], limit: int = 6) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def _settings(items: Sequence[object]) -> str:
    """``1 setting``, ``N settings``."""
    return f"{len(items)} setting{'s' if len(items) != 1 else ''}"


def _first_four(texts: list[str]) -> str:
    return "; ".join(texts[:4]) + (f"; and {len(texts) - 4} more" if len(texts) > 4 else "")


@CHECKS.check(
    "report.node",
    "a node's worst finding over its topo, counters, bench and sweep files, and configuration outliers",
)
def node_status(row: NodeRow) -> Finding:
    parts = []
    if row.failing:
        parts.append(f"failing: {_listed(row.failing)}")
    if row.warnings:
        parts.append(f"warnings: {_listed(row.warnings)}")
    if row.outliers:
        parts.append(f"differs from the fleet: {_listed(row.outliers)}")
    msg = "; ".join(parts) if parts else f"all checks passed ({', '.join(row.sources)})"
    hint = None
    if row.status is Severity.FAIL:
        hint = "drain it, then run the command each failing check names (ibdiag topo, counters ...) on the node for the details"
    elif row.outliers:
        hint = "bring it in line with the rest of the fleet (firmware, driver, cabling, PCIe slot) or explain why it differs"
    return Finding(
        "report.node",
        row.status,
        row.host,
        msg,
        value=len(row.failing),
        unit="failing checks",
        hint=hint,
    )


@CHECKS.check(
    "report.config",
    "a node's configuration differs from the fleet's majority (kernel, firmware, drivers, rates, PCIe, GPUDirect module, NCCL_IB_HCA, the NCCL_IB_GID_INDEX topo judged), or a setting has no majority: warn",
)
def config_outlier(host: str, items: Sequence[Outlier | Split]) -> Finding:
    """One finding per node (all its outliers), or for the fleet (``host`` "fleet": the splits)."""
    if host == FLEET:
        splits = [s for s in items if isinstance(s, Split)]
        texts = [
            f"{g.key}: "
            + ", ".join(f"{v} on {n} node{'s' if n != 1 else ''} ({h})" for v, n, h in g.values)
            for g in group_splits(splits)
        ]
        return Finding(
            "report.config",
            Severity.WARN,
            FLEET,
            f"{_settings(splits)} without a majority value: {_first_four(texts)}",
            hint="decide which value is right and converge the fleet",
        )
    outliers = [o for o in items if isinstance(o, Outlier)]
    texts = [
        f"{g.key} is {g.value} ({g.majority_hosts} of {g.compared} nodes: {g.majority})"
        for g in group_outliers(outliers)
    ]
    return Finding(
        "report.config",
        Severity.WARN,
        host,
        f"differs from the fleet's majority in {_settings(outliers)}: {_first_four(texts)}",
        hint="an outlier node behaves differently under the same job: align it with the majority (firmware, driver, cabling, PCIe slot), or find out why it differs",
    )


@CHECKS.check(
    "report.input",
    "a file that could not be used (unreadable, too large, not JSON, unknown schema, malformed value): warn, skipped",
)
def input_skipped(item: Skipped) -> Finding:
    return Finding(
        "report.input",
        Severity.WARN,
        item.path,
        f"skipped: {item.reason}",
        hint="give the JSON files ibdiag wrote (topo, counters, bench, sweep -o json or --save)",
    )


@CHECKS.check(
    "report.fabric_path",
    "with --fabric: a sweep's adapters not on the fabric, or ISLs that cannot be named (not a tree of tiers): warn; else ok, its slow pairs placed",
)
def fabric_path(placed: SweepOnFabric) -> list[Finding]:
    out = []
    by_host: dict[str, list[str]] = {}
    for e in placed.missing:
        by_host.setdefault(e.host, []).append(e.why or e.adapter)
    for host, whys in by_host.items():
        out.append(
            Finding(
                "report.fabric_path",
                Severity.WARN,
                host,
                f"{_first_four(whys)}: its pairs in {placed.sweep} are placed at the other end only",
                value=len(whys),
                unit="adapters",
                hint="the fabric names hosts by node description (`gpu03 mlx5_2`, rdma-ndd) or --topo; "
                "check the snapshot is of this cluster and the host's cable is up (ibdiag fabric)",
            )
        )
    if placed.tcp_nodes:
        out.append(
            Finding(
                "report.fabric_path",
                Severity.WARN,
                FLEET,
                f"{len(placed.tcp_nodes)} node(s) of {placed.sweep} were measured over TCP, with no adapter "
                f"to place on the fabric: {_listed(placed.tcp_nodes)}",
                value=len(placed.tcp_nodes),
                unit="nodes",
                hint="a sweep over RDMA (--transport rdma) names each pair's adapters",
            )
        )
    crossed = [p for p in placed.paths if p.cross_rail]
    if crossed:
        shown = "; ".join(
            f"{p.ends[0].host} {p.ends[0].adapter} (rail {p.ends[0].rail}) <-> "
            f"{p.ends[1].host} {p.ends[1].adapter} (rail {p.ends[1].rail})"
            for p in crossed[:4]
        )
        out.append(
            Finding(
                "report.fabric_path",
                Severity.WARN,
                FLEET,
                f"{len(crossed)} slow pair(s) of {placed.sweep} join adapters of different rails of the fabric, "
                f"so they cross between rails' leaves: {shown}"
                + (" ..." if len(crossed) > 4 else ""),
                value=len(crossed),
                unit="slow pairs",
                hint="the sweep tests a node's k-th adapter in topo order against the others' k-th: "
                "check the node's adapter order (NCCL_IB_HCA, --rails) and its cabling (ibdiag fabric's fabric.rails)",
            )
        )
    if not placed.names_isls:
        out.append(
            Finding(
                "report.fabric_path",
                Severity.WARN,
                FLEET,
                f"the ISLs between switches are not named, only each pair's host links — the fabric: {placed.shape}",
                hint="see `ibdiag fabric`'s fabric.tiers finding",
            )
        )
    if not out:
        out.append(
            Finding(
                "report.fabric_path",
                Severity.OK,
                FLEET,
                f"{placed.slow_placed} of {placed.slow} slow pair(s) of {placed.sweep} placed on {placed.source} ({placed.shape}); "
                f"{placed.healthy} healthy pair(s) compared",
                value=placed.slow,
                unit="slow pairs",
            )
        )
    return out


@CHECKS.check(
    "report.fabric_culprit",
    "with --fabric: a switch port (host link), a switch's uplinks, or with routes (fabric --routes) one ISL, that at least 2 of a sweep's slow pairs share, the best explanation of them: warn",
)
def fabric_culprit(c: Culprit) -> Finding:
    if c.hop.kind == HOST_LINK:
        hint = (
            "check that cable, both its ports and the adapter: `ibdiag fabric` (errors, rate at the switch port), "
            "`ibdiag counters` on the host; reseat or replace the cable"
        )
    elif c.hop.kind == ISL:
        hint = (
            "check that ISL's cable and both its ports: `ibdiag fabric` (fabric.errors, fabric.link_rate); "
            "reseat or replace the cable, or disable the port so the subnet manager routes around it"
        )
    else:
        hint = (
            "check the switch's uplinks (`ibdiag fabric`: fabric.errors, fabric.link_rate on its ISLs); "
            "`ibdiag fabric --routes --save` reads the SM's routes: the report then names the one ISL"
        )
    return Finding(
        "report.fabric_culprit",
        Severity.WARN,
        c.hop.subject,
        f"likely culprit: {c.text}",
        value=c.slow,
        limit=MIN_SHARED,
        unit="slow pairs",
        hint=hint,
    )


@CHECKS.check(
    "report.fabric_health",
    "with --fabric: the saved fabric judged as `ibdiag fabric --from` judges it; each of its failing or warning findings on a slow pair's path (a 1x link, errors), at its own severity; one warn for those on no slow pair's path; else ok",
)
def fabric_health(health: FabricHealth) -> list[Finding]:
    out = [
        Finding(
            "report.fabric_health",
            o.finding.severity,
            o.finding.subject,
            o.text,
            value=len(o.slow_pairs),
            unit="slow pairs",
            hint=o.finding.hint
            or f"`ibdiag fabric --from {health.source}` for the details; fix it before draining the nodes",
        )
        for o in health.on_paths
    ]
    off = health.off_paths
    if off:
        fails = sum(1 for f in off if f.severity is Severity.FAIL)
        texts = [f"{f.check} {f.subject} ({f.severity.value})" for f in off]
        out.append(
            Finding(
                "report.fabric_health",
                Severity.WARN,
                "fabric",
                f"the saved fabric {health.source} has {fails} failing and {len(off) - fails} warning "
                f"finding(s) on no slow pair's path: {_first_four(texts)}",
                value=len(off),
                unit="findings",
                hint=f"`ibdiag fabric --from {health.source}` says each with its hint; no slow pair of the sweep crosses them",
            )
        )
    if not out:
        out.append(
            Finding(
                "report.fabric_health",
                Severity.OK,
                "fabric",
                f"the saved fabric {health.source}: nothing failing or warning ({health.passed} passed)",
                value=0,
                unit="findings",
            )
        )
    return out


def report_findings(view: FleetView) -> list[Finding]:
    """Skipped files, outliers and splits, nodes, the sweeps' bad and unresolved links, then with
    ``--fabric`` the sweeps on the fabric."""
    out: list[Finding] = []
    for s in view.skipped:
        out += input_skipped(s)
    by_host: dict[str, list[Outlier]] = {}
    for o in view.outliers:
        by_host.setdefault(o.host, []).append(o)
    for host, items in by_host.items():
        out += config_outlier(host, items)
    if view.splits:
        out += config_outlier(FLEET, view.splits)
    for row in view.rows:
        out += node_status(row)
    for part in view.sweeps:
        out += [f for f in part.findings if f.check == "sweep.link"]
    for placed in view.fabric:
        out += fabric_path(placed)
        for c in placed.culprits:
            out += fabric_culprit(c)
    if view.fabric_health is not None:
        out += fabric_health(view.fabric_health)
    return out

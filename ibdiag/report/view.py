"""The fleet view: one row per node, configuration outliers, counter errors, sweeps, the drain list.

Built with pandas (imported by :func:`ibdiag.report.outliers.pandas` only): the nodes' facts go into
long tables (host, key, value) whose group-bys give each key's majority value
(:mod:`ibdiag.report.outliers`), each node's failing checks and the fleet's top error rates.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ibdiag.findings.model import Finding, Severity, worst
from ibdiag.report import jobdocs
from ibdiag.report.fabrichealth import FabricHealth
from ibdiag.report.files import Skipped
from ibdiag.report.flapping import FlappingPort, most_flapping
from ibdiag.report.inputs import InputDoc
from ibdiag.report.outliers import (
    Outlier,
    OutlierGroup,
    Split,
    SplitGroup,
    config_outliers,
    group_outliers,
    group_splits,
    pandas,
)
from ibdiag.report.picturemodel import Picture
from ibdiag.sweep.analysis import LinkVerdict, NodeStatus
from ibdiag.sweep.checks import link_subject, sweep_findings

#: What a fleet would compare but ``ibdiag topo -o json`` does not carry (so it is not compared): since
#: topo reports the kernel release and each adapter's driver module version, nothing.
NOT_COMPARED: tuple[str, ...] = ()
#: Counter errors listed, worst first.
TOP_COUNTER_ERRORS = 20
#: The columns of the nodes table (the terminal's and the HTML page's).
NODE_COLUMNS = (
    "node",
    "status",
    "failing checks",
    "warnings",
    "differs from the fleet",
    "sweep",
    "read",
)


@dataclass(frozen=True)
class CounterError:
    host: str
    port: str
    counter: str
    value: float
    per_second: bool
    saturated: bool = False
    """A count at its counter's maximum: at least ``value`` (``counters`` shows ``≥65535 (saturated)``)."""

    @property
    def value_text(self) -> str:
        """As ``ibdiag counters`` shows it: a rate, a count since reset, or a saturated floor."""
        if self.per_second:
            return f"{self.value:.3g}/s"
        if self.saturated:
            return f"≥{self.value:.0f} (saturated)"
        return f"{self.value:.0f} since reset"


@dataclass(frozen=True)
class NodeRow:
    host: str
    status: Severity
    failing: tuple[str, ...]
    """``topo.port_rate (mlx5_7:1)``: failing checks and their subjects."""
    warnings: tuple[str, ...]
    outliers: tuple[str, ...]
    """Keys on which this node differs from the majority."""
    sources: tuple[str, ...]
    """Kinds of document read for it: topo, counters, bench, sweep."""
    sweep: str | None
    """Its status in the sweep(s): ok, bad, suspect, unreachable, untested."""


@dataclass(frozen=True)
class SweepPart:
    path: str
    result: Any
    """:class:`ibdiag.sweep.model.SweepResult`."""
    findings: tuple[Finding, ...]


@dataclass(frozen=True)
class FleetView:
    rows: tuple[NodeRow, ...]
    outliers: tuple[Outlier, ...]
    splits: tuple[Split, ...]
    counter_errors: tuple[CounterError, ...]
    sweeps: tuple[SweepPart, ...]
    drain: tuple[str, ...]
    inputs: tuple[tuple[str, str, str], ...]
    """(path, kind, host) of every file read."""
    skipped: tuple[Skipped, ...]
    not_compared: tuple[str, ...] = NOT_COMPARED
    flapping: tuple[FlappingPort, ...] = ()
    """The fleet's most-flapping ports (from ``counters --history`` documents), most flaps first."""
    findings: tuple[tuple[str, tuple[Finding, ...]], ...] = ()
    """Per host with a failing or warning finding (worst first): those findings, with message and hint,
    from its newest topo and counters, its benches and the sweeps (each once)."""
    fabric: tuple[Any, ...] = ()
    """With ``--fabric``: each sweep on the fabric (:class:`ibdiag.report.fabricmodel.SweepOnFabric`)."""
    fabric_health: FabricHealth | None = None
    """With ``--fabric``: the saved fabric's own failing and warning findings, and which lie on slow
    pairs' paths."""
    fabric_picture: Picture | None = None
    """With ``--fabric``: the fabric the page draws (its tiers, the slow pairs' paths, the culprits)."""
    outlier_groups: tuple[OutlierGroup, ...] = ()
    """The outliers grouped for people: one per difference, naming its nodes and devices."""
    split_groups: tuple[SplitGroup, ...] = ()

    def row(self, host: str) -> NodeRow | None:
        return next((r for r in self.rows if r.host == host), None)

    def worst_first(self) -> list[NodeRow]:
        """The nodes, worst status first, then most failing checks, then by host."""
        return sorted(self.rows, key=lambda r: (-r.status.rank, -len(r.failing), r.host))


#: The configuration outliers' columns (the terminal's and the page's).
OUTLIER_COLUMNS = ("nodes", "what", "value", "majority", "nodes with the majority")


def outlier_rows(view: FleetView) -> list[tuple[str, str, str, str, str]]:
    """One row per difference (its nodes as a host list, and how many), then one per split."""
    rows = [
        (
            g.host_list + (f" ({len(g.hosts)} nodes)" if len(g.hosts) > 1 else ""),
            g.key,
            g.value,
            g.majority,
            f"{g.majority_hosts} of {g.compared}",
        )
        for g in view.outlier_groups
    ]
    rows += [
        (
            "(fleet)",
            g.key,
            "no majority",
            ", ".join(f"{v} x{n} ({h})" for v, n, h in g.values),
            "",
        )
        for g in view.split_groups
    ]
    return rows


def _latest(docs: Sequence[InputDoc], kind: str) -> dict[str, InputDoc]:
    """Per host, its newest document of ``kind`` (ISO 8601 UTC times compare as strings)."""
    out: dict[str, InputDoc] = {}
    for d in docs:
        if d.kind == kind and (d.host not in out or d.generated_at >= out[d.host].generated_at):
            out[d.host] = d
    return out


def counter_errors(
    counters: dict[str, InputDoc], limit: int = TOP_COUNTER_ERRORS
) -> list[CounterError]:
    """The fleet's largest error rates (``--interval``/``--since`` files), then error counts since reset."""
    pd = pandas()
    rows = [
        (
            host,
            f"{c.adapter}:{c.port}" if c.port is not None else c.adapter,
            c.counter,
            c.value,
            c.per_second,
            c.saturated,
        )
        for host, d in counters.items()
        for c in d.counters
    ]
    if not rows:
        return []
    df = pd.DataFrame(rows, columns=["host", "port", "counter", "value", "per_second", "saturated"])
    df = df.sort_values(
        ["per_second", "value", "host", "port"], ascending=[False, False, True, True]
    ).head(limit)
    return [
        CounterError(
            str(r.host),
            str(r.port),
            str(r.counter),
            float(r.value),
            bool(r.per_second),
            bool(r.saturated),
        )
        for r in df.itertuples()
    ]


def _named(findings: Any) -> tuple[str, ...]:
    """``check (subject)`` of each row of a findings frame, each once (topo and counters share checks)."""
    named = (
        f"{check} ({subject})" if subject else check
        for check, subject in zip(findings["check"], findings["subject"], strict=False)
    )
    return tuple(dict.fromkeys(named))


#: A node's worst sweep status first, when several sweeps tested it.
_SWEEP_ORDER = [
    NodeStatus.UNREACHABLE,
    NodeStatus.BAD,
    NodeStatus.SUSPECT,
    NodeStatus.UNTESTED,
    NodeStatus.OK,
]


def _sweep_facts(
    sweeps: Sequence[SweepPart],
) -> tuple[dict[str, str], list[tuple[str, str, str, str, str]], list[str]]:
    """Per host, its worst status over the sweeps; the sweeps' per-node findings as records; the hosts
    the sweeps tested, in their order."""
    sweep_status: dict[str, str] = {}
    records: list[tuple[str, str, str, str, str]] = []
    hosts: list[str] = []
    for part in sweeps:
        by_label = {n.label: n for n in part.result.nodes}
        for node, verdict in zip(part.result.nodes, part.result.analysis.nodes, strict=False):
            hosts.append(node.host)
            cur = sweep_status.get(node.host)
            if cur is None or _SWEEP_ORDER.index(verdict.status) < _SWEEP_ORDER.index(
                NodeStatus(cur)
            ):
                sweep_status[node.host] = verdict.status.value
        for f in part.findings:
            node = by_label.get(f.subject)
            if node is not None and f.check in ("sweep.node", "sweep.unreachable", "sweep.rails"):
                records.append((node.host, "sweep", f.check, f.severity.value, f"rank {node.rank}"))
    return sweep_status, records, hosts


def _findings_by_host(
    docs: Sequence[InputDoc], sweeps: Sequence[SweepPart]
) -> dict[str, tuple[Finding, ...]]:
    """Each host's warn and fail findings, failing first, each (check, subject, message) once."""
    found: dict[str, dict[tuple[str, str, str], Finding]] = {}
    for d in docs:
        for f in d.findings:
            found.setdefault(d.host, {}).setdefault((f.check, f.subject, f.message), f)
    for part in sweeps:
        by_label = {n.label: n.host for n in part.result.nodes}
        for f in part.findings:
            host = by_label.get(f.subject)
            if host is not None and f.severity is not Severity.OK:
                found.setdefault(host, {}).setdefault((f.check, f.subject, f.message), f)
    return {
        host: tuple(sorted(fs.values(), key=lambda f: -f.severity.rank))
        for host, fs in found.items()
    }


def build_view(docs: Sequence[InputDoc], skipped: Sequence[Skipped]) -> FleetView:
    """The fleet view of the documents read (``skipped`` are listed, not used)."""
    pd = pandas()
    topos, counters = _latest(docs, "topo"), _latest(docs, "counters")
    benches = [d for d in docs if d.kind == "bench"]
    benches += jobdocs.per_node(docs)  # a job's findings, each under the node it names
    sweeps = [
        SweepPart(d.path, d.sweep, tuple(sweep_findings(d.sweep)))
        for d in docs
        if d.kind == "sweep"
    ]

    # Findings per host: the newest topo and counters, every bench, and the sweeps' per-node findings.
    records: list[tuple[str, str, str, str, str]] = []
    sources: dict[str, set[str]] = {}
    for d in [*topos.values(), *counters.values(), *benches]:
        sources.setdefault(d.host, set()).add(d.kind)
        records += [(d.host, d.kind, f.check, f.severity.value, f.subject) for f in d.findings]
    by_finding = _findings_by_host([*topos.values(), *counters.values(), *benches], sweeps)
    sweep_status, sweep_records, sweep_hosts = _sweep_facts(sweeps)
    records += sweep_records
    for host in sweep_hosts:
        sources.setdefault(host, set()).add("sweep")

    outliers, splits = config_outliers(topos)
    odd: dict[str, list[str]] = {}
    for o in outliers:
        odd.setdefault(o.host, []).append(o.key)

    df = pd.DataFrame(records, columns=["host", "kind", "check", "severity", "subject"])
    by_host = dict(tuple(df.groupby("host", sort=False))) if len(df) else {}
    empty = df.iloc[0:0]
    rows: list[NodeRow] = []
    for host in sorted(sources):
        mine = by_host.get(host, empty)
        fails = mine[mine["severity"] == "fail"]
        warns = mine[mine["severity"] == "warn"]
        sev = worst(
            [Severity(s) for s in mine["severity"].unique()]
            + ([Severity.WARN] if host in odd else [])
        )
        rows.append(
            NodeRow(
                host=host,
                status=sev,
                failing=_named(fails),
                warnings=_named(warns),
                outliers=tuple(odd.get(host, ())),
                sources=tuple(
                    k for k in ("topo", "counters", "bench", "sweep", "job") if k in sources[host]
                ),
                sweep=sweep_status.get(host),
            )
        )
    drain = tuple(
        r.host
        for r in sorted(
            (r for r in rows if r.status is Severity.FAIL), key=lambda r: (-len(r.failing), r.host)
        )
    )
    ranked = sorted(rows, key=lambda r: (-r.status.rank, -len(r.failing), r.host))
    return FleetView(
        findings=tuple((r.host, by_finding[r.host]) for r in ranked if by_finding.get(r.host)),
        rows=tuple(rows),
        outliers=tuple(outliers),
        splits=tuple(splits),
        outlier_groups=tuple(group_outliers(outliers)),
        split_groups=tuple(group_splits(splits)),
        counter_errors=tuple(counter_errors(counters)),
        flapping=tuple(most_flapping(counters)),
        sweeps=tuple(sweeps),
        drain=drain,
        inputs=tuple((d.path, d.kind, d.host) for d in docs),
        skipped=tuple(skipped),
    )


def view_json(view: FleetView) -> dict[str, Any]:
    """The ``ibdiag.report/1`` data: every part of the view, in the units of its sources."""
    sweeps = []
    for part in view.sweeps:
        res = part.result
        sweeps.append(
            {
                "path": part.path,
                "pattern": res.settings.pattern.value,
                "nodes": len(res.nodes),
                "tests": len(res.pairs),
                "bad_nodes": [
                    res.nodes[v.rank].label
                    for v in res.analysis.nodes
                    if v.status is NodeStatus.BAD
                ],
                "unreachable": [res.nodes[r].label for r in res.analysis.unreachable],
                "bad_links": [
                    link_subject(res, link) for link in res.analysis.links_with(LinkVerdict.BAD)
                ],
                "status": worst(f.severity for f in part.findings).value,
            }
        )
    return {
        "nodes": [
            {
                "host": r.host,
                "status": r.status.value,
                "failing": list(r.failing),
                "warnings": list(r.warnings),
                "outliers": list(r.outliers),
                "sources": list(r.sources),
                "sweep": r.sweep,
            }
            for r in view.rows
        ],
        "outliers": [
            {
                "key": o.key,
                "host": o.host,
                "value": o.value,
                "majority": o.majority,
                "majority_hosts": o.majority_hosts,
                "hosts": o.hosts,
            }
            for o in view.outliers
        ],
        "splits": [
            {"key": s.key, "values": [{"value": v, "hosts": n} for v, n in s.values]}
            for s in view.splits
        ],
        "outlier_groups": [g.to_json() for g in view.outlier_groups],
        "split_groups": [g.to_json() for g in view.split_groups],
        "counter_errors": [
            {
                "host": c.host,
                "port": c.port,
                "counter": c.counter,
                "value": c.value,
                "per_second": c.per_second,
                "saturated": c.saturated,
            }
            for c in view.counter_errors
        ],
        "flapping_ports": [
            {"host": f.host, "port": f.port, "flaps": f.flaps, "last_flap": f.last_flap}
            for f in view.flapping
        ],
        "sweeps": sweeps,
        "drain": list(view.drain),
        "inputs": [{"path": p, "kind": k, "host": h} for p, k, h in view.inputs],
        "skipped": [{"path": s.path, "reason": s.reason} for s in view.skipped],
        "not_compared": list(view.not_compared),
        "fabric": [x.to_json() for x in view.fabric] if view.fabric else None,
        "fabric_health": view.fabric_health.to_json() if view.fabric_health else None,
    }

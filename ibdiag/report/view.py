"""The fleet view: one row per node, configuration outliers, counter errors, sweeps, the drain list.

Built with pandas (imported here only): the nodes' facts go into long tables (host, key, value) whose
group-bys give each key's majority value, each node's failing checks and the fleet's top error rates.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ibdiag.errors import NotSupportedError
from ibdiag.findings.model import Finding, Severity, worst
from ibdiag.report import jobdocs
from ibdiag.report.files import Skipped
from ibdiag.report.flapping import FlappingPort, most_flapping
from ibdiag.report.inputs import AdapterFacts, InputDoc, TopoFacts
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
class Outlier:
    key: str
    """``mlx5_3 firmware``, ``NCCL_IB_HCA`` ..."""
    host: str
    value: str
    majority: str
    majority_hosts: int
    hosts: int
    """Nodes whose topo says anything about the key."""


@dataclass(frozen=True)
class Split:
    """A key without a majority value: the fleet is divided, nobody is the odd one out."""

    key: str
    values: tuple[tuple[str, int], ...]


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

    def row(self, host: str) -> NodeRow | None:
        return next((r for r in self.rows if r.host == host), None)

    def worst_first(self) -> list[NodeRow]:
        """The nodes, worst status first, then most failing checks, then by host."""
        return sorted(self.rows, key=lambda r: (-r.status.rank, -len(r.failing), r.host))


def _pandas() -> Any:
    try:
        import pandas as pd
    except ImportError:
        raise NotSupportedError(
            "ibdiag report needs pandas, a dependency of ibdiag that is missing here",
            hint="pip install 'pandas>=2' (pip install ibdiag installs it; a --no-deps install does not)",
        ) from None
    return pd


def driver_text(a: AdapterFacts) -> str | None:
    """``mlx5_core 24.10-1.1.4``, ``mlx5_core srcversion 0716E1...``, ``mlx5_core (version unknown)``;
    None when topo named no module (or a topo file of an older version): a node that says nothing is
    not compared, as for firmware."""
    if a.driver_module is None:
        return None
    if a.driver_version is None or a.driver_version_kind is None:
        return f"{a.driver_module} (version unknown)"
    if a.driver_version_kind == "srcversion":
        return f"{a.driver_module} srcversion {a.driver_version}"
    return f"{a.driver_module} {a.driver_version}"


def topo_facts(facts: TopoFacts) -> list[tuple[str, str]]:
    """(key, value) pairs of a node's configuration that should be the same across a fleet."""
    out = [("GPUs", str(facts.gpus)), ("RDMA adapters", str(len(facts.adapters)))]
    out.append(("GPUDirect RDMA module", facts.gdr_module or "unknown"))
    if facts.kernel_release is not None:
        out.append(("kernel", facts.kernel_release))
    if facts.gpus:
        out.append(("NVIDIA driver", facts.nvidia_driver or "not loaded"))
    if facts.nccl_ib_hca is not None:
        out.append(("NCCL_IB_HCA", facts.nccl_ib_hca))
    if facts.nccl_gid_index is not None:
        out.append(("NCCL_IB_GID_INDEX", facts.nccl_gid_index))
    for i, w in enumerate(facts.gpu_pcie_widths):
        if w is not None:
            out.append((f"GPU{i} PCIe width", f"x{w}"))
    for a in facts.adapters:
        if a.fw_ver is not None:
            out.append((f"{a.name} firmware", a.fw_ver))
        driver = driver_text(a)
        if driver is not None:
            out.append((f"{a.name} driver", driver))
        if a.board_id is not None:
            out.append((f"{a.name} board", a.board_id))
        if a.pcie_width is not None:
            out.append((f"{a.name} PCIe width", f"x{a.pcie_width}"))
        if a.pcie_speed_gts is not None:
            out.append((f"{a.name} PCIe speed", f"{a.pcie_speed_gts:g} GT/s"))
        for p in a.ports:
            if p.rate_gbps is not None:
                out.append((f"{a.name}:{p.port} rate", f"{p.rate_gbps:g} Gb/s"))
            if p.state is not None or p.phys_state is not None:
                out.append((f"{a.name}:{p.port} state", f"{p.state or '?'}/{p.phys_state or '?'}"))
            if p.link_layer is not None:
                out.append((f"{a.name}:{p.port} link layer", p.link_layer))
    return out


def _latest(docs: Sequence[InputDoc], kind: str) -> dict[str, InputDoc]:
    """Per host, its newest document of ``kind`` (ISO 8601 UTC times compare as strings)."""
    out: dict[str, InputDoc] = {}
    for d in docs:
        if d.kind == kind and (d.host not in out or d.generated_at >= out[d.host].generated_at):
            out[d.host] = d
    return out


def config_outliers(topos: dict[str, InputDoc]) -> tuple[list[Outlier], list[Split]]:
    """Each key's majority value over the nodes that have it; nodes with another value are outliers."""
    pd = _pandas()
    rows = [
        (host, key, value)
        for host, d in topos.items()
        if d.topo is not None
        for key, value in topo_facts(d.topo)
    ]
    if not rows:
        return [], []
    df = pd.DataFrame(rows, columns=["host", "key", "value"])
    counts = df.groupby(["key", "value"]).size().rename("n").reset_index()
    counts = counts.sort_values(["key", "n", "value"], ascending=[True, False, True])
    distinct = counts.groupby("key")["value"].size().rename("values")
    top = (
        counts.drop_duplicates("key")
        .set_index("key")
        .join(df.groupby("key")["host"].nunique().rename("hosts"))
        .join(distinct)
    )
    top = top[top["values"] > 1]
    has_majority = 2 * top["n"] > top["hosts"]
    majority = top[has_majority]
    odd = df.merge(majority, left_on="key", right_index=True, suffixes=("", "_top"))
    odd = odd[odd["value"] != odd["value_top"]].sort_values(["key", "host"])
    outliers = [
        Outlier(str(r.key), str(r.host), str(r.value), str(r.value_top), int(r.n), int(r.hosts))
        for r in odd.itertuples()
    ]
    splits = [
        Split(
            str(key),
            tuple((str(v), int(n)) for v, n in zip(group["value"], group["n"], strict=False)),
        )
        for key, group in counts[counts["key"].isin(top[~has_majority].index)].groupby(
            "key", sort=True
        )
    ]
    return outliers, splits


def counter_errors(
    counters: dict[str, InputDoc], limit: int = TOP_COUNTER_ERRORS
) -> list[CounterError]:
    """The fleet's largest error rates (``--interval``/``--since`` files), then error counts since reset."""
    pd = _pandas()
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
    pd = _pandas()
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
    }

"""Views of ``ibdiag job``'s result (:func:`outputs`): the table (what was read, the ranks named and
where they are, Inspector's busbw per communicator, then the findings), CSV rows (one per rank named)
and Prometheus metrics. JSON, ``-o line`` and ``-o junit`` are written from the report alone (the
shared envelope, :mod:`ibdiag.output.jsonout`). Pure functions of the result; cli/ prints them."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

from ibdiag.job.command import JobResult
from ibdiag.job.timing import largest_rows
from ibdiag.output.outputs import Outputs, TableLayout
from ibdiag.output.prom import Metric, PromSample
from ibdiag.units import format_bytes

if TYPE_CHECKING:  # rich only where a table is drawn: `-o json` does not import it
    from rich.console import RenderableType
    from rich.table import Table
    from rich.text import Text

#: Rows of the ranks table shown (all are in the JSON and the CSV).
MAX_TABLE_ROWS = 64

CSV_HEADER = (
    "comm",
    "rank",
    "roles",
    "node",
    "address",
    "gpu",
    "pid",
    "nics",
    "leaf_ports",
    "path_findings",
    "not_joined",
)


def outputs(result: JobResult) -> Outputs:
    """The result in every format ``ibdiag job`` writes."""
    return Outputs(
        result.report,
        result.meta,
        table=partial(table_items, result),
        csv=lambda: (CSV_HEADER, csv_rows(result)),
        prom=lambda: prom_metrics(result),
    )


def _ras_line(r: JobResult) -> Text:
    from rich.text import Text  # lazy: rich, for the table output only

    s = r.ras
    if s is None:
        return Text("RAS: not read")
    version = f"NCCL {s.nccl_version}" if s.nccl_version else "NCCL (version not given)"
    size = (
        f", {s.processes} processes on {s.nodes} nodes, {s.gpus} GPUs"
        if s.processes is not None
        else ""
    )
    comms = sum(g.comms for g in s.groups)
    return Text(
        f"RAS: {version} {s.format} status from {s.source}{size}; {comms} communicator(s) in "
        f"{len(s.groups)} group(s)"
    )


def ranks_table(r: JobResult) -> Table:
    from rich.table import Table  # lazy: rich, for the table output only

    table = Table(title="Ranks named by the findings", title_justify="left")
    for col in ("comm", "rank", "what", "node", "GPU", "process", "NIC", "leaf port"):
        table.add_column(col, no_wrap=col in ("comm", "rank", "GPU", "process"))
    for row in r.ranks[:MAX_TABLE_ROWS]:
        p = row.place
        table.add_row(
            (row.comm or "")[:8],
            "" if row.rank is None else str(row.rank),
            ", ".join(row.roles),
            p.node or p.address or "?",
            "" if p.gpu is None else str(p.gpu),
            "" if p.pid is None else str(p.pid),
            "/".join(p.nics),
            "; ".join(p.leaves),
        )
    if len(r.ranks) > MAX_TABLE_ROWS:
        table.caption = f"and {len(r.ranks) - MAX_TABLE_ROWS} more (-o json or -o csv for all)"
    return table


def comms_table(r: JobResult) -> Table:
    from rich.table import Table  # lazy: rich, for the table output only

    table = Table(title="Inspector: bus bandwidth per communicator", title_justify="left")
    for col in ("comm", "name", "ranks", "collective", "size", "busbw GB/s", "lowest", "time µs"):
        table.add_column(col, no_wrap=True)
    for t in r.timings:
        for row in t.rows:
            table.add_row(
                t.comm[:8],
                t.name or "",
                f"{row.ranks}/{t.nranks}",
                row.coll,
                format_bytes(row.bytes),
                "" if row.busbw_gbs is None else f"{row.busbw_gbs:.4g}",
                "" if row.busbw_min_gbs is None else f"{row.busbw_min_gbs:.4g}",
                f"{row.exec_us:.4g}",
            )
    return table


def table_items(r: JobResult, layout: TableLayout) -> list[RenderableType]:
    """What was read, the ranks named and where they are, Inspector's numbers, then the findings."""
    from rich.text import Text  # lazy: rich, for the table output only

    from ibdiag.output.table import findings_block  # lazy: rich behind it, as above

    items: list[RenderableType] = [_ras_line(r)]
    if r.inspector is not None:
        n = len(r.inspector.records)
        items.append(
            Text(f"Inspector: {n} collective record(s) from {len(r.inspector.files)} file(s)")
        )
    if r.ranks:
        items.append(ranks_table(r))
    if r.timings:
        items.append(comms_table(r))
    items += findings_block(r.report, strict=layout.strict, width=layout.width)
    return items


def csv_rows(r: JobResult) -> list[dict[str, Any]]:
    """One row per rank (or process) named, with its place."""
    out = []
    for row in r.ranks:
        p = row.place
        out.append(
            {
                "comm": row.comm,
                "rank": row.rank,
                "roles": ";".join(row.roles),
                "node": p.node,
                "address": p.address,
                "gpu": p.gpu,
                "pid": p.pid,
                "nics": ";".join(p.nics),
                "leaf_ports": ";".join(p.leaves),
                "path_findings": ";".join(f"{f.check} {f.subject}" for f in p.path_findings),
                "not_joined": ";".join(p.unknown),
            }
        )
    return out


def prom_metrics(r: JobResult) -> list[Metric]:
    """What a node_exporter textfile can keep: dead and unresponsive processes, communicators by
    state, Inspector's busbw per communicator and collective at its largest size."""
    metrics: list[Metric] = []
    s = r.ras
    if s is not None:
        metrics.append(
            Metric(
                "ibdiag_job_ras_processes",
                "Job processes RAS could not reach, by state (dead: unreachable for 60 s).",
                "gauge",
                (
                    PromSample({"state": "dead"}, s.dead_count),
                    PromSample({"state": "unresponsive"}, s.missing_processes_count),
                ),
            )
        )
        states: dict[str, int] = {}
        for g in s.groups:
            states[g.status] = states.get(g.status, 0) + g.comms
        metrics.append(
            Metric(
                "ibdiag_job_ras_communicators",
                "Communicators RAS reported, by status.",
                "gauge",
                tuple(PromSample({"status": k}, v) for k, v in sorted(states.items())),
            )
        )
    samples = []
    for t in r.timings:
        for row in largest_rows(t):
            if row.busbw_gbs is not None:
                labels = {"comm": t.comm, "collective": row.coll, "bytes": str(row.bytes)}
                samples.append(PromSample(labels, row.busbw_gbs * 1e9))
    if samples:
        metrics.append(
            Metric(
                "ibdiag_job_busbw_bytes_per_second",
                "Inspector's median busbw at each communicator's largest size, bytes per second.",
                "gauge",
                tuple(samples),
            )
        )
    return metrics

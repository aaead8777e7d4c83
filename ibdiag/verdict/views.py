"""Views of ``ibdiag verdict``'s result (:func:`outputs`): sentences with the arithmetic a person can
check, the scaling table, the fabric placement, CSV rows, Prometheus metrics and the PNG chart (the
charts: :mod:`ibdiag.verdict.chart`). Pure functions of the model; cli/ prints what they return.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from ibdiag.output.outputs import Outputs, TableLayout
from ibdiag.output.prom import Metric, PromSample
from ibdiag.units import format_bytes, format_term_seconds
from ibdiag.verdict import model
from ibdiag.verdict.ceiling import Ceiling
from ibdiag.verdict.chart import chart_text, write_png
from ibdiag.verdict.command import VerdictResult
from ibdiag.verdict.judge import Verdict
from ibdiag.verdict.wording import count_text, gb, gbs

if TYPE_CHECKING:  # rich only where a table is drawn: `ibdiag verdict -o json` does not import it
    from rich.console import RenderableType
    from rich.table import Table


def outputs(result: VerdictResult) -> Outputs:
    """The result in every format ``ibdiag verdict`` writes; ``png`` is the ``--chart``."""
    v = result.verdict
    return Outputs(
        result.report,
        result.meta,
        table=partial(result_items, result),
        csv=lambda: (CSV_HEADER, csv_rows(v)),
        prom=lambda: prom_metrics(v),
        png=partial(write_png, v),
    )


def result_items(result: VerdictResult, layout: TableLayout) -> list[RenderableType]:
    """The explanation, the job's placement on the fabric, where the chart went, then the findings."""
    from rich.text import Text  # lazy: rich, for the table output only (start-up of -o json)

    from ibdiag.output.table import findings_block  # lazy: rich behind it, as above

    items = table_items(result.verdict)
    if result.placement_lines:
        items.append(Text("Fabric placement", style="bold"))
        items.extend(Text("  " + line) for line in result.placement_lines)
        items.append(Text(""))
    if result.chart is not None:
        items.append(Text(f"Chart written to {result.chart}"))
    items += findings_block(result.report, strict=layout.strict, width=layout.width)
    return items


@dataclass(frozen=True)
class Section:
    """One part of the verdict's explanation: a heading and its sentences."""

    key: str
    """``traffic``, ``overlap``, ``verdict``, ``what_to_do`` or ``notes``."""
    heading: str
    lines: tuple[str, ...]


def sections(v: Verdict) -> list[Section]:
    """The explanation in the order of the issue: traffic, overlap, verdict, what to do (and notes)."""
    out = [_traffic(v), _overlap(v), _verdict(v), _what_to_do(v)]
    if v.notes:
        out.append(
            Section(
                "notes",
                "Notes",
                tuple(n[0].upper() + n[1:] + ("" if n.endswith(".") else ".") for n in v.notes),
            )
        )
    return out


def _traffic(v: Verdict) -> Section:
    """1. The bytes each rank moves per step, the time they take at the measured busbw and at the ceiling."""
    w, m, c = v.workload, v.measured, v.ceiling
    k = model.STRATEGY_MULTIPLIER[w.strategy]
    lines = []
    if w.params is not None:
        lines.append(
            f"Gradient size S = {count_text(w.params)} parameters x {w.bytes_per_param} B ({w.dtype}) = {gb(w.grad_bytes)} ({w.grad_bytes} B)."
        )
    else:
        lines.append(f"Gradient size S = {gb(w.grad_bytes)} ({w.grad_bytes} B, --grad-bytes).")
    coll = {
        "ddp": "ring all-reduce",
        "zero1": "reduce-scatter + all-gather",
        "zero2": "reduce-scatter + all-gather",
        "fsdp": "all-gather x 2 + reduce-scatter",
        "zero3": "all-gather x 2 + reduce-scatter",
    }[w.strategy]
    lines.append(
        f"{w.ranks} ranks = {w.nodes} nodes x {w.ranks_per_node} rank(s) per node ({w.ranks_per_node_source}); {w.strategy} ({coll}) "
        f"puts {k} x ({w.ranks} - 1) / {w.ranks} = {v.factor:.4g} x S = {gb(v.wire_bytes_per_rank)} on each rank's wire per step."
    )
    src = f"{m.source} {m.path}" if m.path else m.source
    lines.append(
        f"Measured busbw: {gbs(m.busbw_gbs)} ({src}: {m.how})."
        if m.how
        else f"Measured busbw: {gbs(m.busbw_gbs)} ({src})."
    )
    lines.append(
        f"At {gbs(m.busbw_gbs)} that is {gb(v.wire_bytes_per_rank)} / {gbs(m.busbw_gbs)} = {format_term_seconds(v.wire_s)} on the wire per step."
    )
    if c.busbw_gbs is None:
        lines.append(
            "Ceiling: unknown (no --link-gbps, and no rail rate under --root): efficiency is not judged."
        )
    else:
        share = f" x {c.payload_share:g} payload" if c.payload_share != 1 else ""
        rail_word = "rail" if c.rails_used == 1 else "rails"
        lines.append(
            f"Ceiling: {c.rails_used} {rail_word} x {c.link_gbps:g} Gb/s / 8{share} = {gbs(c.busbw_gbs)}; "
            f"at the ceiling the traffic takes {gb(v.wire_bytes_per_rank)} / {gbs(c.busbw_gbs)} = {format_term_seconds(v.ceiling_wire_s)}."
        )
        lines.append(
            f"  {_rails_why(c, w.ranks_per_node)}; link rate {c.link_gbps:g} Gb/s {_link_why(c)}."
        )
        if w.ranks_per_node > 1:
            lines.append(
                f"With {w.ranks_per_node} ranks per node over NVLink the node's NIC traffic is spread over its rails, so busbw is compared with rails x rail rate."
            )
        lines.append(
            f"Efficiency: {gbs(m.busbw_gbs)} / {gbs(c.busbw_gbs)} = {v.efficiency:.1%} of the ceiling (underperforming below {v.config.min_efficiency:.0%})."
        )
    return Section("traffic", "1. Traffic per step", tuple(lines))


def _overlap(v: Verdict) -> Section:
    """2. Whether each bucket's collective hides behind the rest of the backward pass."""
    w, m, ov, step = v.workload, v.measured, v.step.overlap, v.step
    lines = []
    fwd = (
        f"forward {format_term_seconds(w.forward_s)}" if w.forward_s else "forward not given (0 s)"
    )
    last = (
        f" (the last {format_bytes(ov.last_bucket_bytes)})"
        if ov.last_bucket_bytes != ov.bucket_bytes
        else ""
    )
    lines.append(
        f"Backward pass {format_term_seconds(w.backward_s)}, {fwd}. Buckets: {ov.buckets} x {format_bytes(ov.bucket_bytes)}{last}, ready uniformly over the backward pass."
    )
    lines.append(
        f"Each full bucket's collective takes latency {format_term_seconds(v.latency_s)} ({v.latency_source}) + {v.factor:.4g} x {format_bytes(ov.bucket_bytes)} / {gbs(m.busbw_gbs)} "
        f"= {format_term_seconds(ov.bucket_comm_s)}; the backward pass produces a bucket every {format_term_seconds(w.backward_s)} x {format_bytes(ov.bucket_bytes)} / {gb(w.grad_bytes)} "
        f"= {format_term_seconds(ov.bucket_compute_s)}."
    )
    if ov.buckets > 1:
        if ov.keeps_up:
            lines.append(
                f"{format_term_seconds(ov.bucket_comm_s)} <= {format_term_seconds(ov.bucket_compute_s)}: the network keeps up; each bucket's collective ends before the next bucket is ready."
            )
        else:
            lines.append(
                f"{format_term_seconds(ov.bucket_comm_s)} > {format_term_seconds(ov.bucket_compute_s)}: the network falls behind by {format_term_seconds(ov.bucket_comm_s - ov.bucket_compute_s)} per bucket and the collectives queue up."
            )
    first = ov.first_exposed_bucket
    if first is None:
        lines.append(
            "T_comm(bucket k) < T_compute(rest of backward) holds for every bucket: all communication hides."
        )
    elif first == ov.buckets == 1:
        lines.append(
            f"One bucket holds all of S: it is ready when the backward pass ends, with no compute left to hide behind, "
            f"so its whole collective ({format_term_seconds(ov.end_s(1) - w.backward_s)}) is exposed."
        )
    elif first == ov.buckets:
        lines.append(
            f"T_comm(bucket k) < T_compute(rest of backward) holds for buckets 1-{first - 1} of {ov.buckets}; the last bucket is ready when the backward pass ends, "
            f"with no compute left to hide behind: its collective ends {format_term_seconds(ov.end_s(first) - w.backward_s)} after the backward pass."
        )
    else:
        ready = ov.ready_s(first)
        held = f"holds for buckets 1-{first - 1}" if first > 1 else "holds for no bucket"
        lines.append(
            f"T_comm(bucket k) < T_compute(rest of backward) {held} of {ov.buckets}; bucket {first} is ready at {format_term_seconds(ready)} "
            f"with {format_term_seconds(w.backward_s - ready)} of backward left, but its collective ends at {format_term_seconds(ov.end_s(first))} "
            f"({format_term_seconds(ov.end_s(first) - ready)} after it was ready, queueing included)."
        )
    lines.append(
        f"All collectives back to back: {format_term_seconds(ov.comm_s)} ({ov.buckets} x latency + {format_term_seconds(v.wire_s)} on the wire); the last ends at "
        f"{format_term_seconds(ov.comm_end_s)}, {format_term_seconds(step.exposed_s)} after the backward pass: exposed communication {format_term_seconds(step.exposed_s)}."
    )
    lines.append(
        f"Step = forward {format_term_seconds(w.forward_s)} + backward {format_term_seconds(w.backward_s)} + exposed {format_term_seconds(step.exposed_s)} = {format_term_seconds(step.step_s)}; "
        f"waiting for the network is {step.comm_share:.1%} of the step."
    )
    return Section("overlap", "2. Overlap with the backward pass", tuple(lines))


def _verdict(v: Verdict) -> Section:
    """3. Network-bound or not, and the fabric's health."""
    step = v.step
    lines = []
    label = v.verdict.upper()
    cmp = ">" if v.verdict == model.NETWORK_BOUND else "<="
    lines.append(
        f"{label}: exposed communication is {step.comm_share:.1%} of the step {cmp} {v.config.network_bound_share:.0%}."
    )
    lines.append(f"Fabric: {v.fabric}{_fabric_why(v)}.")
    return Section("verdict", "3. Verdict", tuple(lines))


def _what_to_do(v: Verdict) -> Section:
    """4. The bucket size to use, and where scaling stops hiding communication."""
    w, step = v.workload, v.step
    k = model.STRATEGY_MULTIPLIER[w.strategy]
    lines = []
    cur, best = w.bucket_bytes, v.recommended_bucket
    gain = v.bucket_gain_s
    if best == cur or gain <= 0:
        lines.append(
            f"Bucket size: {format_bytes(cur)} is already the best of the sizes tried (powers of two from 1 MiB to S) for these numbers."
        )
    elif gain < v.config.bucket_gain_share * step.step_s:
        lines.append(
            f"Bucket size: {format_bytes(cur)} is fine for these numbers: the best size tried (powers of two from 1 MiB to S), {format_bytes(best)}, "
            f"would save only {format_term_seconds(gain)} per step (less than {v.config.bucket_gain_share:.0%} of the step)."
        )
    else:
        lines.append(
            f"Bucket size: {format_bytes(best)} minimises exposed communication for these numbers: {format_term_seconds(v.recommended.exposed_s)} instead of "
            f"{format_term_seconds(step.exposed_s)} (step {format_term_seconds(v.recommended.step_s)} instead of {format_term_seconds(step.step_s)}, {gain / step.step_s:.1%} shorter)."
        )
    wall = v.wall_ranks
    if wall is None:
        lines.append(
            f"Scaling: with the same global batch, communication keeps hiding up to {v.scaling[-1].ranks} ranks."
        )
    else:
        nodes = wall // w.ranks_per_node
        lines.append(
            f"Scaling wall: with the same global batch, communication stops hiding at {wall} ranks ({nodes} nodes): compute per rank shrinks as 1/ranks "
            f"while each rank still moves ~{k} x S = {gb(k * w.grad_bytes)} per step."
        )
    return Section("what_to_do", "4. What to do", tuple(lines))


def table_items(v: Verdict) -> list[RenderableType]:
    """The table output's explanation (rich renderables): each section, with the scaling table and the
    share-of-step chart under "what to do"."""
    from rich.text import Text  # lazy: rich, as above

    items: list[RenderableType] = []
    for section in sections(v):
        items.append(Text(section.heading, style="bold"))
        items.extend(Text("  " + line) for line in section.lines)
        if section.key == "what_to_do":
            items += [
                scaling_table(v),
                Text("Share of the step waiting for the network:"),
                Text(chart_text(v)),
            ]
        items.append(Text(""))
    return items


def _rails_why(c: Ceiling, ranks_per_node: int) -> str:
    if c.rails_source == "--rails-per-node":
        return f"Rails: {c.rails_per_node} (--rails-per-node)"
    if c.rails_source == "--root":
        ports = ", ".join(c.rail_ports)
        capped = (
            f", of which {c.rails_used} carry traffic with {ranks_per_node} rank(s) per node (a rank drives the rail beside its GPU)"
            if c.rails_used != c.rails_per_node
            else ""
        )
        return f"Rails: {c.rails_per_node} from --root, the active ports of the adapters paired with GPUs ({ports}){capped}"
    if c.root_read:
        return "Rails: 1 (default: no active RDMA port beside a GPU under --root; give --rails-per-node)"
    return "Rails: 1 (default; give --rails-per-node, or --root to read them)"


def _link_why(c: Ceiling) -> str:
    if c.link_source == "--root":
        return "from --root (the highest rate among those ports; a slower one is a health finding)"
    return f"({c.link_source})"


def _fabric_why(v: Verdict) -> str:
    parts = []
    if v.efficiency is not None:
        parts.append(f"efficiency {v.efficiency:.1%}")
    else:
        parts.append("efficiency not judged (ceiling unknown)")
    h = v.health
    if h is None:
        parts.append("health not checked: no --root")
    elif h.failing:
        parts.append(
            f"{len(h.failing)} health problem(s): "
            + ", ".join(f"{f.check} {f.subject}" for f in h.failing[:6])
            + (" ..." if len(h.failing) > 6 else "")
        )
    else:
        parts.append(f"{'/'.join(h.checked)} healthy")
    return " (" + "; ".join(parts) + ")"


def scaling_table(v: Verdict) -> Table:
    from rich.table import Table  # lazy: rich, as above
    from rich.text import Text  # lazy: as above

    t = Table(
        title="Scaling wall: same global batch, compute per rank ~ 1/ranks", title_justify="left"
    )
    for col, just in (
        ("ranks", "right"),
        ("nodes", "right"),
        ("backward/rank", "right"),
        ("traffic/rank", "right"),
        ("comm (all)", "right"),
        ("exposed", "right"),
        ("step", "right"),
        ("network share", "right"),
        ("verdict", "left"),
    ):
        t.add_column(col, justify=just, no_wrap=True)  # type: ignore[arg-type]  # rich types justify as a Literal; each value here is one
    for r in v.scaling:
        style = "bold" if r.anchor else None
        verdict = r.verdict + (" <- job" if r.anchor else "")
        if r.verdict == model.NETWORK_BOUND:
            verdict_style = "red"
        elif r.verdict == model.SINGLE_NODE:
            verdict_style = "dim"
        else:
            verdict_style = "green"
        t.add_row(
            str(r.ranks),
            str(r.nodes),
            format_term_seconds(r.compute_s),
            gb(r.wire_bytes_per_rank)
            if r.comm_s is not None
            else ("none" if r.ranks == 1 else "in-node"),
            format_term_seconds(r.comm_s),
            format_term_seconds(r.exposed_s),
            format_term_seconds(r.step_s),
            "-" if r.comm_share is None else f"{r.comm_share:.1%}",
            Text(verdict, style=verdict_style),
            style=style,
        )
    return t


CSV_HEADER = (
    "ranks",
    "nodes",
    "compute_s",
    "forward_s",
    "traffic_factor",
    "wire_bytes_per_rank",
    "comm_s",
    "exposed_comm_s",
    "step_s",
    "comm_share",
    "verdict",
    "job",
)


def csv_rows(v: Verdict) -> list[dict[str, Any]]:
    """The scaling table in long form, one row per rank count (the job's own row has job=1)."""
    return [{**r.to_json(), "job": int(r.anchor)} for r in v.scaling]


def _bytes(gbs: float | None) -> float | None:
    """GB/s (1e9 B/s) in Prometheus' base unit, bytes per second."""
    return None if gbs is None else gbs * 1e9


def prom_metrics(v: Verdict) -> list[Metric]:
    labels = {"strategy": v.workload.strategy, "ranks": str(v.workload.ranks)}

    def g(name: str, help_: str, value: float | None) -> Metric | None:
        if value is None:
            return None
        return Metric(name, help_, "gauge", (PromSample(labels, value),))

    metrics = [
        g(
            "ibdiag_verdict_busbw_bytes_per_second",
            "Measured bus bandwidth used by the verdict, bytes per second.",
            _bytes(v.measured.busbw_gbs),
        ),
        g(
            "ibdiag_verdict_ceiling_busbw_bytes_per_second",
            "Ceiling busbw: rails x link rate / 8, bytes per second.",
            _bytes(v.ceiling.busbw_gbs),
        ),
        g("ibdiag_verdict_efficiency_ratio", "Measured busbw / ceiling.", v.efficiency),
        g(
            "ibdiag_verdict_comm_seconds",
            "All collectives of one step back to back, seconds.",
            v.step.overlap.comm_s,
        ),
        g(
            "ibdiag_verdict_exposed_comm_seconds",
            "Communication not hidden behind the backward pass, seconds per step.",
            v.step.exposed_s,
        ),
        g("ibdiag_verdict_step_seconds", "Modelled step time, seconds.", v.step.step_s),
        g(
            "ibdiag_verdict_comm_share_ratio",
            "Exposed communication / step time.",
            v.step.comm_share,
        ),
        g(
            "ibdiag_verdict_network_bound",
            "1 when the step is network-bound.",
            1 if v.verdict == model.NETWORK_BOUND else 0,
        ),
        g(
            "ibdiag_verdict_recommended_bucket_bytes",
            "Bucket size that minimises exposed communication, bytes.",
            v.recommended_bucket,
        ),
        g(
            "ibdiag_verdict_scaling_wall_ranks",
            "First rank count at which communication stops hiding (fixed global batch).",
            v.wall_ranks,
        ),
    ]
    return [m for m in metrics if m is not None]

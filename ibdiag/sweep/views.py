"""Views of a sweep: the outputs of ``ibdiag sweep`` and ``--plan`` (:func:`outputs`, :func:`plan_outputs`),
worst nodes and links, the drain line, prom, csv; the node x node matrix is :mod:`~ibdiag.sweep.matrix`'s.

Pure functions of :class:`~ibdiag.sweep.model.SweepResult`; ``cli/`` prints what they return.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, BinaryIO

from ibdiag.findings.model import Severity
from ibdiag.output.outputs import Outputs, TableLayout
from ibdiag.output.prom import Metric, PromSample
from ibdiag.sweep.analysis import LinkStat, LinkVerdict, NodeStatus
from ibdiag.sweep.chart import matrix_png
from ibdiag.sweep.checks import link_subject
from ibdiag.sweep.matrix import matrix_grid, matrix_lines
from ibdiag.sweep.model import SweepResult
from ibdiag.sweep.plan import plan_lines
from ibdiag.sweep.stats import gbs_text
from ibdiag.sweep.summary import summary_lines as summary_lines  # shown first, in its own module

if TYPE_CHECKING:
    # rich only where a table is drawn: `ibdiag sweep -o json` does not import it; the command's result
    # types only for their annotations: `ibdiag report` draws sweeps without loading the sweep's runtime
    from rich.console import RenderableType

    from ibdiag.sweep.command import PlanResult, SweepRunResult


def outputs(result: SweepRunResult) -> Outputs:
    """Rank 0's result in every format ``ibdiag sweep`` writes; ``--png`` draws the matrix per rail."""
    sweep = result.sweep
    return Outputs(
        result.report,
        result.meta,
        table=partial(table_items, result),
        csv=lambda: (CSV_HEADER, csv_rows(sweep)),
        prom=lambda: prom_metrics(sweep),
        png=partial(write_png, sweep),
        line=lambda: line_view(sweep),
    )


def table_items(result: SweepRunResult, layout: TableLayout) -> list[RenderableType]:
    """The summary, the matrix of every rail, the worst nodes and links, then the findings."""
    from rich.text import Text  # lazy: rich, for the table output only (start-up of -o json)

    from ibdiag.output.table import findings_block  # lazy: rich behind it, as above

    sweep = result.sweep
    items: list[RenderableType] = [Text(line) for line in summary_lines(sweep)]
    for k in range(sweep.rails):
        items += matrix_lines(matrix_grid(sweep, k))
    items += worst_tables(sweep, limit=10)
    if result.saved_to is not None:
        items.append(Text(f"Saved to {result.saved_to}"))
    return items + findings_block(result.report, strict=layout.strict, width=layout.width)


def write_png(sweep: SweepResult, fh: BinaryIO) -> None:
    """``--png``: the node x node matrix of every rail, one panel each."""
    fh.write(matrix_png([matrix_grid(sweep, k) for k in range(sweep.rails)]))


def plan_outputs(result: PlanResult) -> Outputs:
    """``--plan`` as a table (the schedule's lines) or JSON; it has no other view."""
    data, given = dict(result.report.data), result.rails_given
    return Outputs(
        result.report, result.meta, table=lambda layout: plan_lines(data, rails_given=given)
    )


# --- the drain line -----------------------------------------------------------------------------------

#: Width of the one-line view (a terminal, a Slurm reason, a chat message).
LINE_WIDTH = 80


def fit_line(
    head: str, items: Sequence[str], tails: Sequence[str] | str = "", width: int = LINE_WIDTH
) -> str:
    """``head item item ... +N more tail`` in at most ``width`` characters (items kept in order).

    ``tails`` are alternatives, most detailed first: the one that lets the most items show is used
    (the most detailed of those); the items that do not fit are counted in ``+N more``, never cut.
    """
    options = [tails] if isinstance(tails, str) else list(tails) or [""]

    def build(shown: int, tail: str) -> str:
        more = len(items) - shown
        parts = [head, *items[:shown], *([f"+{more} more"] if more else [])]
        return " ".join(p for p in parts if p) + tail

    best: tuple[int, str] | None = None
    for tail in options:
        shown = next((k for k in range(len(items), -1, -1) if len(build(k, tail)) <= width), None)
        if shown is not None and (best is None or shown > best[0]):
            best = (shown, build(shown, tail))
    return best[1] if best is not None else build(0, options[-1])[:width]


def drain_hosts(result: SweepResult) -> list[str]:
    """Hostnames to drain: bad nodes, then unreachable ones, each host once (several ranks may share one)."""
    out: list[str] = []
    for status in (NodeStatus.BAD, NodeStatus.UNREACHABLE):
        for verdict in result.analysis.nodes:
            host = result.nodes[verdict.rank].host
            if verdict.status is status and host not in out:
                out.append(host)
    return out


def line_view(result: SweepResult, *, width: int = LINE_WIDTH) -> str:
    """One ASCII line: ``sweep FAIL: drain gpu-017 gpu-040 +2 more; 1 bad link (64 nodes)``."""
    a = result.analysis
    bad_links = len(a.links_with(LinkVerdict.BAD))
    warn_nodes = sum(1 for n in a.nodes if n.status in (NodeStatus.SUSPECT, NodeStatus.UNTESTED))
    unresolved = len(a.links_with(LinkVerdict.UNRESOLVED))
    hosts = drain_hosts(result)
    tcp = len(result.tcp_fallback)
    extra = [f"{tcp} node{'s' if tcp != 1 else ''} over TCP"] if tcp else []
    if bad_links:
        extra.append(f"{bad_links} bad link{'s' if bad_links != 1 else ''}")
    if warn_nodes:
        extra.append(f"{warn_nodes} suspect node{'s' if warn_nodes != 1 else ''}")
    if unresolved:
        extra.append(f"{unresolved} unresolved link{'s' if unresolved != 1 else ''}")
    confounded = len(a.links_with(LinkVerdict.CONFOUNDED))
    if confounded:
        extra.append(f"{confounded} confounded link{'s' if confounded != 1 else ''}")
    cleared = len(a.cleared_links)
    if cleared:
        extra.append(f"{cleared} collided link{'s' if cleared != 1 else ''} cleared")
    count = f" ({len(result.nodes)} nodes)"
    tails = [
        (("; " + ", ".join(extra)) if extra else "") + count,
        *([f"; {extra[0]}{count}"] if extra else []),
        count,
    ]
    if hosts:
        return _ascii(fit_line("sweep FAIL: drain", hosts, tails, width))
    warned = [e for e in extra if not e.endswith(" cleared")]
    status = "FAIL" if bad_links else ("WARN" if warned else "OK")
    body = ", ".join(extra) if extra else "no bad node or link"
    return _ascii(fit_line(f"sweep {status}: {body} ({len(result.nodes)} nodes)", [], "", width))


def _ascii(text: str) -> str:
    return text.encode("ascii", "replace").decode("ascii")


# --- the worst links --------------------------------------------------------------------------------


@dataclass(frozen=True)
class WorstLink:
    """One of the sweep's worst links: the link and its bandwidth as a share of its rail's median."""

    link: LinkStat
    share: float | None
    """``bw_gbs / median``; None where the rail has no median or the link no bandwidth."""


def worst_links(result: SweepResult, *, limit: int = 10, below: float = 0.9) -> list[WorstLink]:
    """The sweep's worst links, worst first: failed tests first, then the lowest bandwidth as a share
    of its rail's median; only links under ``below`` of the median or slow by the analysis (the
    green cells are not named)."""
    out = []
    for link in result.analysis.links:
        stats = result.analysis.rail(link.rail)
        median = stats.bw.median if stats else None
        share = link.bw_gbs / median if link.bw_gbs is not None and median else None
        if link.failed or link.slow or (share is not None and share < below):
            out.append(WorstLink(link, share))
    out.sort(
        key=lambda w: (
            not w.link.failed,
            w.share if w.share is not None else math.inf,
            w.link.rail,
            w.link.a,
            w.link.b,
        )
    )
    return out[:limit]


# --- tables --------------------------------------------------------------------------------------------

_STATUS_SEVERITY = {
    NodeStatus.OK: Severity.OK,
    NodeStatus.SUSPECT: Severity.WARN,
    NodeStatus.UNTESTED: Severity.WARN,
    NodeStatus.BAD: Severity.FAIL,
    NodeStatus.UNREACHABLE: Severity.FAIL,
}


def node_severity(status: NodeStatus) -> Severity:
    return _STATUS_SEVERITY[status]


def worst_nodes(result: SweepResult, limit: int = 10) -> list[int]:
    """Ranks, worst first: unreachable and bad, then suspects, then the slowest by robust distance."""
    order = {
        NodeStatus.UNREACHABLE: 0,
        NodeStatus.BAD: 1,
        NodeStatus.SUSPECT: 2,
        NodeStatus.UNTESTED: 3,
        NodeStatus.OK: 4,
    }

    def key(v: Any) -> tuple[int, float]:
        worst = v.worst_end()
        return (order[v.status], worst.z if worst is not None and worst.z is not None else 0.0)

    return [v.rank for v in sorted(result.analysis.nodes, key=key)[:limit]]


def worst_tables(result: SweepResult, *, limit: int = 10) -> list[Any]:
    """Rich tables: the worst nodes (status, rails, median, z) and the slowest links."""
    from rich.table import Table  # lazy: rich, for the table output only
    from rich.text import Text

    # lazy: output.table imports rich, loaded only where a table is drawn
    from ibdiag.output.table import SEVERITY_STYLE

    a = result.analysis
    nodes = Table(title="Worst nodes", title_justify="left")
    for col in ("node", "status", "slowest rail", "median", "z", "slow partners", "bad rails"):
        nodes.add_column(
            col,
            justify="right" if col in ("median", "z", "slow partners") else "left",
            no_wrap=True,
        )
    for rank in worst_nodes(result, limit):
        v, node = a.nodes[rank], result.nodes[rank]
        worst = v.worst_end()
        status = Text(
            v.status.value.upper() if v.status is not NodeStatus.OK else "ok",
            style=SEVERITY_STYLE[node_severity(v.status)],
        )
        if v.whole_node:
            bad = (
                f"all {len(v.bad_rails)}"
                if len(v.bad_rails) == len(v.ends)
                else f"{len(v.bad_rails)} of {len(v.ends)}"
            )
        else:
            bad = ",".join(result.adapter(rank, k) or str(k) for k in v.bad_rails)
        nodes.add_row(
            node.label,
            status,
            "" if worst is None else (result.adapter(rank, worst.rail) or f"rail {worst.rail}"),
            "" if worst is None or worst.bw_gbs is None else gbs_text(worst.bw_gbs),
            "" if worst is None or worst.z is None else f"{worst.z:+.1f}",
            "" if worst is None else f"{worst.slow_partners}/{worst.partners}",
            bad,
        )
    links = Table(title="Slowest links", title_justify="left")
    for col in ("link", "rail", "bandwidth", "share of line", "z", "tests", "verdict"):
        links.add_column(
            col, justify="left" if col in ("link", "verdict") else "right", no_wrap=col != "link"
        )
    order = {
        LinkVerdict.BAD: 0,
        LinkVerdict.UNRESOLVED: 1,
        LinkVerdict.CONFOUNDED: 2,
        LinkVerdict.NODE: 3,
        LinkVerdict.OK: 4,
    }
    scored = sorted(
        a.links,
        key=lambda link: (
            order[link.verdict],
            -1e9 if link.failed else (link.z if link.z is not None else 0.0),
        ),
    )
    for link in scored[:limit]:
        verdict = {
            LinkVerdict.OK: "ok",
            LinkVerdict.NODE: "explained by a bad node",
            LinkVerdict.BAD: "BAD LINK",
            LinkVerdict.UNRESOLVED: "unresolved",
            LinkVerdict.CONFOUNDED: "slow beside other tests only",
        }[link.verdict] + (" (cleared alone)" if link.cleared else "")
        links.add_row(
            link_subject(result, link),
            str(link.rail),
            "failed"
            if link.failed and link.bw_gbs is None
            else ("" if link.bw_gbs is None else gbs_text(link.bw_gbs)),
            "" if link.share is None else f"{link.share:.0%}",
            "" if link.z is None else f"{link.z:+.1f}",
            f"{link.tests}" + (f" ({link.failed} failed)" if link.failed else ""),
            verdict,
        )
    return [nodes, links]


# --- csv and prom --------------------------------------------------------------------------------------

CSV_HEADER = (
    "round",
    "phase",
    "rail",
    "a",
    "a_host",
    "a_adapter",
    "b",
    "b_host",
    "b_adapter",
    "bw_gbs",
    "lat_us",
    "error",
    "unreachable",
    "engine",
    "shared",
)


def csv_rows(result: SweepResult) -> list[dict[str, Any]]:
    """One row per pair test (long form: ``pandas.read_csv`` and a pivot give the matrix)."""
    rows = []
    for p in result.pairs:
        rows.append(
            {
                "round": p.round,
                "phase": p.phase.value,
                "rail": p.rail,
                "a": p.a,
                "a_host": result.nodes[p.a].host,
                "a_adapter": result.adapter(p.a, p.rail),
                "b": p.b,
                "b_host": result.nodes[p.b].host,
                "b_adapter": result.adapter(p.b, p.rail),
                "bw_gbs": p.bw_gbs,
                "lat_us": p.lat_us,
                "error": p.error,
                "unreachable": " ".join(str(r) for r in p.unreachable),
                "engine": p.engine,
                "shared": p.shared,
            }
        )
    return rows


_STATUS_VALUE = {
    NodeStatus.OK: 0,
    NodeStatus.SUSPECT: 1,
    NodeStatus.UNTESTED: 1,
    NodeStatus.BAD: 2,
    NodeStatus.UNREACHABLE: 3,
}


def prom_metrics(result: SweepResult) -> list[Metric]:
    """Per node and rail: median bandwidth, robust distance, status; per rail: the fleet's median."""
    bw, z, status = [], [], []
    for v in result.analysis.nodes:
        node = result.nodes[v.rank]
        base = {"host": node.host, "rank": str(node.rank)}
        status.append(PromSample(base, _STATUS_VALUE[v.status]))
        for e in v.ends:
            labels = {
                **base,
                "rail": str(e.rail),
                "adapter": result.adapter(v.rank, e.rail) or "tcp",
            }
            if e.bw_gbs is not None:
                bw.append(PromSample(labels, e.bw_gbs * 1e9))
            if e.z is not None:
                z.append(PromSample(labels, e.z))
    rails = [
        PromSample({"rail": str(r.rail)}, r.bw.median * 1e9)
        for r in result.analysis.rails
        if r.bw.median is not None
    ]
    return [
        Metric(
            "ibdiag_sweep_node_status",
            "Sweep verdict per node: 0 ok, 1 suspect or untested, 2 bad, 3 unreachable.",
            "gauge",
            tuple(status),
        ),
        Metric(
            "ibdiag_sweep_node_bw_bytes_per_second",
            "Median pair bandwidth of a node's rail in the last sweep, bytes per second.",
            "gauge",
            tuple(bw),
        ),
        Metric(
            "ibdiag_sweep_node_bw_z",
            "Robust distance (MAD units) of a node's rail from the rail's median; negative is slower.",
            "gauge",
            tuple(z),
        ),
        Metric(
            "ibdiag_sweep_rail_median_bw_bytes_per_second",
            "Median pair bandwidth of a rail over the fleet in the last sweep, bytes per second.",
            "gauge",
            tuple(rails),
        ),
    ]

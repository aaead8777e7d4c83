"""``ibdiag report -o html``: one self-contained page — inline CSS, the sweep matrix as inline SVG.

Nothing is fetched: no scripts, fonts, stylesheets or images from anywhere, and a Content-Security-
Policy that forbids them, so the page opens the same on an air-gapped laptop. Every value from the
input files is HTML-escaped (the files are untrusted).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from html import escape

from ibdiag.findings.model import Finding, RunMeta, Severity, worst
from ibdiag.report.fabricmodel import MAX_PATHS, fabric_lines
from ibdiag.report.fabricpage import CSS as FABRIC_CSS
from ibdiag.report.fabricpage import fabric_section
from ibdiag.report.view import NODE_COLUMNS, OUTLIER_COLUMNS, FleetView, outlier_rows
from ibdiag.sweep import chart
from ibdiag.sweep import views as sweep_views
from ibdiag.sweep.analysis import LinkVerdict, NodeStatus
from ibdiag.sweep.chart import FAILED_COLOUR, PALETTE, UNTESTED_COLOUR
from ibdiag.sweep.checks import link_subject
from ibdiag.sweep.matrix import matrix_grid
from ibdiag.sweep.model import SweepResult
from ibdiag.sweep.stats import gbs_text

#: Rails drawn per sweep (DGX-class nodes have 8).
MAX_RAIL_MATRICES = 8
#: Worst links numbered in the matrices and listed under them, per sweep.
WORST_LINKS = 10

_CSS = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; background: #fff; }
h1 { font-size: 1.5em; margin: 0 0 .2em; } h2 { font-size: 1.15em; margin: 1.4em 0 .4em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: .3em 0 1em; } th, td { border: 1px solid #ddd; padding: .2em .5em; text-align: left; vertical-align: top; }
td { overflow-wrap: anywhere; } /* a long value (NCCL_IB_HCA=...) breaks rather than widen the page */
th { background: #f4f4f4; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.fail { color: #b2182b; font-weight: 600; } .warn { color: #b35806; } .ok { color: #1a7837; }
.status { font-size: 1.2em; } .drain { font-family: ui-monospace, monospace; background: #fff0f0; padding: .4em .6em; }
.matrices { display: flex; flex-wrap: wrap; gap: 1em; } .matrices figure { margin: 0; }
.legend span { display: inline-block; width: .9em; height: .9em; margin: 0 .3em 0 1em; vertical-align: middle; }
.dim { color: #777; }
td.host, td:first-child { white-space: nowrap; font-family: ui-monospace, monospace; }
td.hostlist { white-space: normal; overflow-wrap: anywhere; } /* a long host list breaks at its commas */
.hint { color: #555; font-size: .92em; } h3 { font-size: 1em; margin: 1em 0 .2em; font-family: ui-monospace, monospace; }
figcaption { max-width: 40em; } caption { text-align: left; font-weight: 600; padding: .2em 0; white-space: nowrap; }
"""


def _cls(sev: Severity) -> str:
    return sev.value


def _table(
    header: Sequence[str], rows: Iterable[Sequence[object]], *, numeric: Sequence[int] = ()
) -> str:
    out = ["<table><thead><tr>", *(f"<th>{escape(h)}</th>" for h in header), "</tr></thead><tbody>"]
    for row in rows:
        out.append("<tr>")
        for i, cell in enumerate(row):
            if isinstance(cell, tuple):  # (text, css class)
                out.append(f'<td class="{escape(cell[1])}">{escape(str(cell[0]))}</td>')
            else:
                css = ' class="num"' if i in numeric else ""
                out.append(f"<td{css}>{escape('' if cell is None else str(cell))}</td>")
        out.append("</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _legend() -> str:
    names = (">= 0.9 x rail median", "0.75-0.9", "0.5-0.75", "< 0.5")
    parts = [
        f'<span style="background:{c}"></span>{escape(n)}'
        for (_, c), n in zip(PALETTE, names, strict=False)
    ]
    parts += [
        f'<span style="background:{FAILED_COLOUR}"></span>failed',
        f'<span style="background:{UNTESTED_COLOUR}"></span>not tested',
    ]
    return '<p class="legend">' + "".join(parts) + "</p>"


def _sweep_section(view: FleetView) -> str:
    out = []
    for part in view.sweeps:
        res = part.result
        out.append(f'<h2>Sweep <span class="dim">{escape(part.path)}</span></h2>')
        out += [f"<p>{escape(line)}</p>" for line in sweep_views.summary_lines(res)]
        worst = sweep_views.worst_links(res, limit=WORST_LINKS)
        out.append('<div class="matrices">')
        for rail in range(min(res.rails, MAX_RAIL_MATRICES)):
            grid = matrix_grid(res, rail, max_cells=96)
            marks: dict[tuple[int, int], str] = {}
            for n, w in enumerate(worst, 1):
                if w.link.rail == rail:  # a block cell holding several keeps the worst's number
                    marks.setdefault((w.link.a // grid.block, w.link.b // grid.block), str(n))
            adapters = sorted(
                {a for n in res.nodes if (r := n.rail(rail)) is not None and (a := r.adapter)}
            )
            title = f"rail {rail}" + (
                f" ({', '.join(adapters[:3])}{'…' if len(adapters) > 3 else ''})"
                if adapters
                else ""
            )
            out.append(
                f"<figure>{chart.matrix_svg(grid, title=title, marks=[(i, j, t) for (i, j), t in marks.items()])}"
                f"<figcaption>{escape(title)}</figcaption></figure>"
            )
        out.append("</div>")
        out.append(_legend())
        out.append(_worst_table(res, worst))
        bad = [
            v
            for v in res.analysis.nodes
            if v.status in (NodeStatus.BAD, NodeStatus.UNREACHABLE, NodeStatus.SUSPECT)
        ]
        if bad:
            rows = []
            for v in bad:
                node = res.nodes[v.rank]
                rails = (
                    "all"
                    if v.whole_node
                    else ", ".join(
                        res.adapter(v.rank, k) or str(k) for k in (v.bad_rails or v.suspect_rails)
                    )
                )
                sev = Severity.WARN if v.status is NodeStatus.SUSPECT else Severity.FAIL
                rows.append((node.label, node.address, (v.status.value, _cls(sev)), rails))
            out.append(_table(("node", "address", "verdict", "rails"), rows))
        links = res.analysis.links_with(LinkVerdict.BAD)
        if links:
            out.append(
                _table(
                    ("bad link", "rail", "bandwidth", "z"),
                    [
                        (
                            link_subject(res, link),
                            link.rail,
                            "failed" if link.bw_gbs is None else f"{link.bw_gbs:.1f} GB/s",
                            "" if link.z is None else f"{link.z:+.1f}",
                        )
                        for link in links
                    ],
                    numeric=(1, 2, 3),
                )
            )
    return "".join(out)


def _worst_table(res: SweepResult, worst: Sequence[sweep_views.WorstLink]) -> str:
    """The numbered cells of the matrices: each link's two ends (host names never wrap) and its value."""
    if not worst:
        return ""
    rows = []
    for n, w in enumerate(worst, 1):
        link = w.link
        ends = [
            f'<td class="host">{escape(res.nodes[r].label)} {escape(res.adapter(r, link.rail) or "tcp")}</td>'
            for r in (link.a, link.b)
        ]
        value = f"{link.failed} of {link.tests} failed" if link.failed else gbs_text(link.bw_gbs)
        share = "" if w.share is None else f"{w.share:.2f} x median"
        rows.append(
            f'<tr><td class="num">{n}</td>{"".join(ends)}<td class="num">{link.rail}</td>'
            f'<td class="num {"fail" if link.failed or link.slow else "warn"}">{escape(value)}</td>'
            f'<td class="num">{escape(share)}</td><td>{escape(link.verdict.value)}</td></tr>'
        )
    return (
        f'<table class="worst"><caption>The {len(worst)} worst links (numbered in the matrices)</caption>'
        "<thead><tr><th>#</th><th>node</th><th>partner</th><th>rail</th><th>bandwidth</th>"
        f"<th>of the rail</th><th>verdict</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def render_html(view: FleetView, findings: Sequence[Finding], meta: RunMeta) -> str:
    """The whole page as one string (UTF-8)."""
    status = worst(f.severity for f in findings)
    n_fail = sum(1 for r in view.rows if r.status is Severity.FAIL)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\">",
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>ibdiag fleet report: {len(view.rows)} nodes, {escape(status.value.upper())}</title>",
        f"<style>{_CSS}{FABRIC_CSS}</style></head><body>",
        "<header><h1>Fleet report</h1>",
        f'<p class="status {_cls(status)}">{escape(status.value.upper())}: {len(view.rows)} nodes, {n_fail} failing, '
        f"{len({o.host for o in view.outliers})} off the configuration majority, {len(view.skipped)} files skipped</p>",
        f'<p class="dim">ibdiag {escape(meta.version)} on {escape(meta.host)}, {escape(meta.generated_at)}, from {len(view.inputs)} files</p></header>',
    ]
    if view.drain:
        parts.append(f'<h2>Drain</h2><p class="drain">{escape(" ".join(view.drain))}</p>')
    parts += fabric_section(view)
    parts += _findings_section(view)
    parts.append(_sweep_section(view))
    for placed in view.fabric:
        lines = fabric_lines(placed, limit=MAX_PATHS)
        parts.append(f"<h2>Sweep {escape(placed.sweep)} on the fabric</h2>")
        parts.append("<ul>" + "".join(f"<li>{escape(x.strip())}</li>" for x in lines) + "</ul>")
    parts += _node_sections(view)
    if view.skipped:
        parts.append("<h2>Files skipped</h2>")
        parts.append(_table(("file", "why"), [(s.path, s.reason) for s in view.skipped]))
    if view.not_compared:
        parts.append(
            f'<p class="dim">Not compared (not in ibdiag topo\'s JSON): {escape(", ".join(view.not_compared))}.</p>'
        )
    parts.append("</body></html>\n")
    return "\n".join(parts)


def _findings_section(view: FleetView) -> list[str]:
    """Each failing or warning node's findings, worst node first: what is wrong and what to do."""
    if not view.findings:
        return []
    parts = ["<h2>Findings per node</h2>"]
    for host, findings in view.findings:
        parts.append(f"<h3>{escape(host)}</h3>")
        rows = []
        for f in findings:
            text = escape(f.message) + (
                f'<br><span class="hint">hint: {escape(f.hint)}</span>' if f.hint else ""
            )
            rows.append(
                f'<tr><td class="{_cls(f.severity)}">{escape(f.severity.value.upper())}</td>'
                f'<td class="host">{escape(f.check)}</td><td class="host">{escape(f.subject)}</td><td>{text}</td></tr>'
            )
        parts.append(
            "<table><thead><tr><th>severity</th><th>check</th><th>subject</th><th>finding</th></tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table>"
        )
    return parts


def _node_sections(view: FleetView) -> list[str]:
    """The nodes (worst first), the configuration outliers and the top counter errors."""
    parts: list[str] = []
    order = view.worst_first()
    parts.append("<h2>Nodes</h2>")
    parts.append(
        _table(
            NODE_COLUMNS,
            [
                (
                    r.host,
                    (r.status.value, _cls(r.status)),
                    ", ".join(r.failing),
                    ", ".join(r.warnings),
                    ", ".join(r.outliers),
                    r.sweep or "",
                    ", ".join(r.sources),
                )
                for r in order
            ],
        )
    )
    if view.outlier_groups or view.split_groups:
        parts.append("<h2>Configuration outliers</h2>")
        rows = [
            ((nodes, "hostlist"), what, (value, "warn"), majority, share)
            for nodes, what, value, majority, share in outlier_rows(view)
        ]
        parts.append(_table(OUTLIER_COLUMNS, rows))
    if view.counter_errors:
        parts.append("<h2>Top counter errors</h2>")
        parts.append(
            _table(
                ("node", "port", "counter", "value"),
                [
                    (
                        c.host,
                        c.port,
                        c.counter,
                        (c.value_text, "warn") if c.saturated else c.value_text,
                    )
                    for c in view.counter_errors
                ],
                numeric=(3,),
            )
        )
    if view.flapping:
        parts.append("<h2>Most-flapping ports</h2>")
        parts.append(
            _table(
                ("node", "port", "flaps", "last flap"),
                [(f.host, f.port, str(f.flaps), f.last_flap or "-") for f in view.flapping],
                numeric=(2,),
            )
        )
    return parts

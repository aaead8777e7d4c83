"""The page's fabric section (``ibdiag report --fabric -o html``), right under the drain list: the saved
fabric's own health as ``ibdiag fabric --from`` judges it, the drawing (:mod:`ibdiag.report.fabricsvg`),
the likely culprits numbered as their badges, and every failing or warning finding of the fabric with
its hint, saying which lie on the slow pairs' paths. Every value from the files is escaped.
"""

from __future__ import annotations

from html import escape

from ibdiag.findings.model import Severity
from ibdiag.report.fabrichealth import FabricHealth
from ibdiag.report.fabricsvg import COLOUR, HALO, fabric_svg
from ibdiag.report.picturemodel import CULPRIT, FAIL, WARN, Picture
from ibdiag.report.view import FleetView

CSS = """
figure.fabric { margin: .4em 0; overflow-x: auto; } figure.fabric figcaption { max-width: 60em; }
.legend span.line { width: 1.6em; height: 0; border-top: 4px solid; }
ol.culprits li { margin: .2em 0; }
"""


def _legend() -> str:
    items = [
        (f"border-color:{HALO}", "slow pairs' path"),
        (f"border-color:{HALO};border-top-style:dashed", "maybe (one of a switch's uplinks)"),
        (f"border-color:{COLOUR[FAIL]}", "failing (saved fabric)"),
        (f"border-color:{COLOUR[WARN]}", "warning (saved fabric)"),
        (f"border-color:{COLOUR[CULPRIT]}", "likely culprit (numbered)"),
    ]
    return (
        '<p class="legend">'
        + "".join(f'<span class="line" style="{s}"></span>{escape(t)}' for s, t in items)
        + "</p>"
    )


def _caption(pic: Picture) -> str:
    tiers = ", ".join(
        f"{sum(len(b.members) for b in boxes)} {name}" for _t, name, boxes in pic.tiers
    )
    text = (
        f"{pic.switches} switches ({tiers}) and {pic.isls} ISLs; host adapters are the dots under "
        "their leaf. Hover an element for its names and findings."
    )
    if pic.notes:
        text += " " + "; ".join(pic.notes) + "."
    return escape(text)


def _health_table(health: FabricHealth) -> str:
    near: dict[int, int] = {}
    for o in health.on_paths:
        near[id(o.finding)] = max(near.get(id(o.finding), 0), len(o.slow_pairs))
    rows = []
    for f in sorted(health.findings, key=lambda f: (id(f) not in near, -f.severity.rank)):
        text = escape(f.message) + (
            f'<br><span class="hint">hint: {escape(f.hint)}</span>' if f.hint else ""
        )
        on = f"{near[id(f)]} slow pair(s)" if id(f) in near else ""
        rows.append(
            f'<tr><td class="{f.severity.value}">{escape(f.severity.value.upper())}</td>'
            f'<td class="host">{escape(f.check)}</td><td class="host">{escape(f.subject)}</td>'
            f'<td>{text}</td><td class="num">{escape(on)}</td></tr>'
        )
    return (
        '<table class="fabric-health"><thead><tr><th>severity</th><th>check</th><th>subject</th>'
        "<th>finding</th><th>on the path of</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def fabric_section(view: FleetView) -> list[str]:
    """The fabric's health, drawing, culprits and findings; nothing without ``--fabric``."""
    health, pic = view.fabric_health, view.fabric_picture
    if health is None:
        return []
    status = health.status
    parts = [
        f'<h2>The fabric <span class="dim">{escape(health.source)}</span></h2>',
        f'<p class="status {status.value}">{escape(status.value.upper())}: the saved fabric as '
        f"<code>ibdiag fabric --from</code> judges it ({escape(health.counts())})</p>",
    ]
    if pic is not None:
        title = f"the fabric {health.source}: leaves, spines and the slow pairs' paths"
        parts.append(
            f'<figure class="fabric">{fabric_svg(pic, title=title)}'
            f"<figcaption>{_caption(pic)}</figcaption></figure>"
        )
        parts.append(_legend())
        if pic.culprits:
            items = "".join(
                f'<li value="{n}">likely culprit: {escape(text)}</li>' for n, text in pic.culprits
            )
            parts.append(f'<ol class="culprits">{items}</ol>')
    if not any(p.culprits for p in view.fabric) and any(p.slow for p in view.fabric):
        parts.append(
            "<p>No port, ISL or uplink group is shared by enough slow pairs to name one.</p>"
        )
    if health.findings:
        parts.append(_health_table(health))
    elif health.status is Severity.OK:
        parts.append(f'<p class="ok">Nothing failing or warning ({health.passed} passed).</p>')
    return parts

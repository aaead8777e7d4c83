"""The fabric as inline SVG (``ibdiag report --fabric -o html``): :class:`~ibdiag.report.picturemodel.Picture`
drawn top tier first — cores, spines, leaves as boxes, the ISLs between them as lines (one per pair of
boxes, its cables counted), the host adapters as dots under their leaf.

The slow pairs' paths are a light-blue halo under every switch, ISL and host cable they cross (dashed
where they are only candidates: a switch's uplinks, routes not read); the saved fabric's failing
findings are red and its warnings amber; each likely culprit is dark red, thick, with a numbered badge
(the numbers of the culprit list under the drawing). Every element carries its names, state and
counts as ``data-`` attributes and a ``<title>`` (the tooltip): the page has no script, and the tests
read the structure. Every name from the files is escaped.
"""

from __future__ import annotations

from html import escape

from ibdiag.report.hostlists import host_list
from ibdiag.report.picturemodel import CULPRIT, FAIL, OK, WARN, Box, Bundle, Picture, Shown

#: Colours: the slow pairs' halo, a finding's, the culprit's, and the healthy elements'.
HALO = "#92c5de"
COLOUR = {CULPRIT: "#67001f", FAIL: "#b2182b", WARN: "#e08214", OK: "#9a9a9a"}
BOX_FILL = {CULPRIT: "#fddbc7", FAIL: "#fddbc7", WARN: "#fee0b6", OK: "#f7f7f7"}
DOT_SLOW = "#2166ac"

LEFT, RIGHT, TOP = 70, 16, 24
ROW, BOX_H = 96, 26
#: Host dots: drop from the leaf, spacing, the labels' room under them.
DROP, DOT_GAP, LABELS = 34, 14, 92
MIN_W, MAX_W, SLOT = 480, 1180, 96


def _attr(value: object) -> str:
    return escape(str(value), quote=True)


def _title(lines: list[str]) -> str:
    return f"<title>{escape(chr(10).join(lines))}</title>"


def _said(mark: Shown) -> list[str]:
    out = [f"likely culprit #{n}" for n in mark.culprits]
    out += [f"{f.severity.value.upper()} {f.check}: {f.message}" for f in mark.findings[:4]]
    if len(mark.findings) > 4:
        out.append(f"... {len(mark.findings) - 4} more findings")
    if mark.slow:
        out.append(f"{mark.slow} slow pair(s) cross it")
    if mark.candidate:
        out.append(f"{mark.candidate} slow pair(s) may cross it (one of the candidate uplinks)")
    return out


def _halo(mark: Shown) -> tuple[float, str] | None:
    """The halo's width and dash for what crosses an element (None: no slow pair does)."""
    n = mark.slow or mark.candidate
    if not n:
        return None
    return 7.0 + min(7.0, n / 2), "" if mark.slow else ' stroke-dasharray="7 4"'


class _Layout:
    def __init__(self, pic: Picture) -> None:
        widest = max((len(boxes) for _t, _n, boxes in pic.tiers), default=1)
        self.width = int(min(MAX_W, max(MIN_W, LEFT + RIGHT + widest * SLOT)))
        self.centre: dict[str, tuple[float, float]] = {}
        self.box_w: dict[str, float] = {}
        y = TOP
        self.dots = any(b.dots for _t, _n, boxes in pic.tiers for b in boxes)
        for _t, _name, boxes in pic.tiers:
            gap = (self.width - LEFT - RIGHT) / max(1, len(boxes))
            for i, b in enumerate(boxes):
                self.centre[b.key] = (LEFT + gap * (i + 0.5), y + BOX_H / 2)
                self.box_w[b.key] = min(120.0, gap - 8)
            y += ROW
        self.height = int(y - ROW + BOX_H + (DROP + LABELS if self.dots else 16))


def fabric_svg(pic: Picture, *, title: str) -> str:
    """The picture as one ``<svg class="fabric">`` element."""
    lay = _Layout(pic)
    out = [
        f'<svg class="fabric" xmlns="http://www.w3.org/2000/svg" width="{lay.width}" '
        f'height="{lay.height}" viewBox="0 0 {lay.width} {lay.height}" role="img" '
        f'aria-label="{_attr(title)}" font-family="ui-monospace, monospace">'
    ]
    y = TOP
    for _tier, name, _boxes in pic.tiers:
        out.append(
            f'<text class="tier" x="6" y="{y + BOX_H / 2 + 4:.0f}" font-size="11" fill="#555">'
            f"{escape(name)}</text>"
        )
        y += ROW
    out += [_bundle(b, lay, halo=True) for b in pic.bundles]
    out += [_bundle(b, lay, halo=False) for b in pic.bundles]
    for _tier, _name, boxes in pic.tiers:
        for b in boxes:
            out.append(_dots(b, lay))
            out.append(_box(b, lay))
    out += _badges(pic, lay)
    out.append("</svg>")
    return "".join(x for x in out if x)


def _bundle(b: Bundle, lay: _Layout, *, halo: bool) -> str:
    (x1, y1), (x2, y2) = lay.centre[b.low], lay.centre[b.high]
    y1, y2 = y1 - BOX_H / 2, y2 + BOX_H / 2  # from the lower box's top to the upper box's bottom
    ends = f'x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}"'
    m = b.mark
    if halo:
        h = _halo(m)
        if h is None:
            return ""
        return (
            f'<line class="halo" {ends} stroke="{HALO}" stroke-width="{h[0]:.1f}"{h[1]} '
            'stroke-linecap="round"/>'
        )
    width = (4.0 if m.state == CULPRIT else 2.5 if m.state != OK else 1.2) + min(2.0, b.cables / 8)
    return (
        f'<line class="isl" {ends} stroke="{COLOUR[m.state]}" stroke-width="{width:.1f}" '
        f'data-low="{_attr(b.low)}" data-high="{_attr(b.high)}" data-cables="{b.cables}" '
        f'data-state="{m.state}" data-slow="{m.slow}" data-candidate="{m.candidate}">'
        + _title([f"{b.cables} ISL(s)", *_said(m)])
        + "</line>"
    )


def _box(b: Box, lay: _Layout) -> str:
    cx, cy = lay.centre[b.key]
    w = lay.box_w[b.key]
    x, y = cx - w / 2, cy - BOX_H / 2
    state = b.mark.state
    parts = [
        f'<g class="switch" data-key="{_attr(b.key)}" data-name="{_attr(b.label)}" '
        f'data-tier="{b.tier}" data-state="{state}" data-members="{len(b.members)}" '
        f'data-slow="{b.path.slow}" data-candidate="{b.path.candidate}">'
    ]
    tip = [f"{b.label}: {host_list(b.names)}" if b.folded else b.label, *_said(b.mark)]
    if b.hosts:
        tip.append(f"{b.hosts} host link(s)")
    parts.append(_title(tip))
    halo = _halo(b.path)
    if halo is not None:
        parts.append(
            f'<rect class="halo" x="{x - 4:.1f}" y="{y - 4:.1f}" width="{w + 8:.1f}" '
            f'height="{BOX_H + 8}" rx="6" fill="none" stroke="{HALO}" stroke-width="5"{halo[1]}/>'
        )
    stroke = 3 if state == CULPRIT else 1.5 if state != OK else 1
    dash = ' stroke-dasharray="4 3"' if b.folded else ""
    parts.append(
        f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{BOX_H}" rx="4" '
        f'fill="{BOX_FILL[state]}" stroke="{COLOUR[state] if state != OK else "#666"}" '
        f'stroke-width="{stroke}"{dash}/>'
    )
    # a monospace character is about 0.6 of the font size wide: the largest size of 11, 10, 9 px
    # that fits the box, else the name cut with an ellipsis (the tooltip has it whole)
    size = next((px for px in (11, 10, 9) if len(b.label) * px * 0.6 <= w - 6), 9)
    chars = max(3, int((w - 6) / (size * 0.6)))
    label = b.label if len(b.label) <= chars else b.label[: chars - 1] + "…"
    parts.append(
        f'<text x="{cx:.1f}" y="{cy + 4:.1f}" font-size="{size}" text-anchor="middle" fill="#222">'
        f"{escape(label)}</text>"
    )
    if b.folded or (b.hosts and not b.dots):
        parts.append(
            f'<text class="count" x="{cx:.1f}" y="{y + BOX_H + 13:.1f}" font-size="10" '
            f'text-anchor="middle" fill="#555">{b.hosts} host link(s)</text>'
            if b.hosts
            else ""
        )
    parts.append("</g>")
    return "".join(parts)


def _dot_x(b: Box, lay: _Layout, i: int) -> float:
    cx, _cy = lay.centre[b.key]
    return cx + (i - (len(b.dots) - 1) / 2) * DOT_GAP


def _dots(b: Box, lay: _Layout) -> str:
    if not b.dots:
        return ""
    cx, cy = lay.centre[b.key]
    top, dot_y = cy + BOX_H / 2, cy + BOX_H / 2 + DROP
    parts = []
    for i, (name, m) in enumerate(b.dots):
        x = _dot_x(b, lay, i)
        halo = _halo(m)
        if halo is not None:
            parts.append(
                f'<line class="halo" x1="{cx:.1f}" y1="{top:.1f}" x2="{x:.1f}" y2="{dot_y:.1f}" '
                f'stroke="{HALO}" stroke-width="{halo[0]:.1f}"{halo[1]} stroke-linecap="round"/>'
                f'<circle class="halo" cx="{x:.1f}" cy="{dot_y:.1f}" r="8.5" fill="{HALO}"/>'
            )
        colour = COLOUR[m.state] if m.state != OK else DOT_SLOW if m.slow else "#bbbbbb"
        width = 3.5 if m.state == CULPRIT else 2 if m.state != OK else 1
        parts.append(
            f'<g class="host" data-name="{_attr(name)}" data-state="{m.state}" '
            f'data-slow="{m.slow}">{_title([name, *_said(m)])}'
            f'<line x1="{cx:.1f}" y1="{top:.1f}" x2="{x:.1f}" y2="{dot_y:.1f}" stroke="{colour}" '
            f'stroke-width="{width}"/><circle cx="{x:.1f}" cy="{dot_y:.1f}" r="4.5" fill="{colour}"/>'
            f'<text x="{x + 3:.1f}" y="{dot_y + 10:.1f}" font-size="10" fill="#333" '
            f'transform="rotate(90 {x + 3:.1f} {dot_y + 10:.1f})">{escape(name[:14])}</text></g>'
        )
    return "".join(parts)


def _badges(pic: Picture, lay: _Layout) -> list[str]:
    """A numbered dark-red badge on each culprit: an ISL line's middle, a switch's top right corner
    (its uplinks), a host dot's side."""
    out: list[str] = []
    placed: set[int] = set()

    def badge(n: int, x: float, y: float) -> None:
        if n in placed:
            return
        placed.add(n)
        out.append(
            f'<g class="badge" data-culprit="{n}"><circle cx="{x:.1f}" cy="{y:.1f}" r="9" '
            f'fill="{COLOUR[CULPRIT]}" stroke="#fff" stroke-width="1.5"/>'
            f'<text x="{x:.1f}" y="{y + 4:.1f}" font-size="11" font-weight="bold" '
            f'text-anchor="middle" fill="#fff">{n}</text></g>'
        )

    for b in pic.bundles:
        (x1, y1), (x2, y2) = lay.centre[b.low], lay.centre[b.high]
        for n in b.mark.culprits:
            badge(n, (x1 + x2) / 2, (y1 + y2) / 2)
    for _tier, _name, boxes in pic.tiers:
        for box in boxes:
            cx, cy = lay.centre[box.key]
            for n in box.mark.culprits:
                badge(n, cx + lay.box_w[box.key] / 2, cy - BOX_H / 2)
            for i, (_dot, m) in enumerate(box.dots):
                for n in m.culprits:
                    badge(n, _dot_x(box, lay, i) + 11, cy + BOX_H / 2 + DROP - 8)
    return out

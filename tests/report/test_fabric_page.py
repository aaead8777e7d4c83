"""``ibdiag report SWEEP --fabric SNAPSHOT -o html``: the drawn fabric (issue 38).

The SVG's structure is read back (every switch, ISL line, host dot and badge carries its names, state
and counts as attributes), on the real simulated fabric of tests/report/test_fabric_health.py (1x
uplink, 1x host cable under the slow pairs, EDR cable elsewhere), on a three-tier fat tree and on a
fabric of 160 switches and 4096 host adapters (``ibnetdiscover`` text written by
tests/support/fabric_topology.py, which ``--fabric`` reads as it is). Then Debian's headless Chromium
loads the page: no console message, and its screenshot shows the culprit's badge, the failing uplink
in red and the slow pairs' halo where Chromium laid them out.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from ibdiag.report.fabricpicture import MAX_BOXES, MAX_BUNDLES
from ibdiag.report.fabricsvg import COLOUR, HALO
from tests.report.test_fabric_health import PORT_SLOW, dumps  # noqa: F401 (the fixture)
from tests.report.test_fabric_sweep import write_sweep
from tests.report.test_html import _chromium, _run_chromium, _screenshot, _share_of_colour
from tests.support.cli import run_cli
from tests.support.fabric_topology import rail_fat_tree, three_tier

SVG = "{http://www.w3.org/2000/svg}"


def _page(sweep: Path, snapshot: Path, out: Path) -> str:
    r = run_cli("report", str(sweep), "--fabric", str(snapshot), "-o", "html")
    assert r.exit_code in (0, 1), r.stderr
    out.write_text(r.stdout, encoding="utf-8")
    return r.stdout


def _svg(html: str) -> ET.Element:
    found = re.search(r'<svg class="fabric".*?</svg>', html, re.S)
    assert found, "no fabric drawing on the page"
    return ET.fromstring(found.group(0))


def _elements(svg: ET.Element, tag: str, cls: str) -> list[ET.Element]:
    return [e for e in svg.iter(f"{SVG}{tag}") if e.get("class") == cls]


def _switches(svg: ET.Element) -> dict[str, ET.Element]:
    return {g.get("data-key"): g for g in _elements(svg, "g", "switch")}


def test_the_drawing_marks_the_paths_the_faults_and_the_culprit(dumps, tmp_path):  # noqa: F811
    _routed, plain, isl = dumps
    html = _page(write_sweep(tmp_path / "sweep.json", PORT_SLOW), plain, tmp_path / "page.html")
    assert "<script" not in html and not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    svg = _svg(html)
    switches = _switches(svg)
    by_name = {g.get("data-name"): g for g in switches.values()}
    assert {n: g.get("data-tier") for n, g in by_name.items()} == {
        **{f"leaf-r{r}-{n}": "0" for r in (0, 1) for n in (1, 2, 3)},
        "spine-1": "1",
        "spine-2": "1",
    }
    tiers = [t.text for t in _elements(svg, "text", "tier")]
    assert tiers == ["spines", "leaves"]
    hosts = {g.get("data-name"): g for g in _elements(svg, "g", "host")}
    assert len(hosts) == 24 and "gpu03 mlx5_0" in hosts
    # the culprit: gpu03 mlx5_0's cable, badge 1, and the list under the drawing says what it is
    assert hosts["gpu03 mlx5_0"].get("data-state") == "culprit"
    (badge,) = _elements(svg, "g", "badge")
    assert badge.get("data-culprit") == "1"
    assert re.search(
        r'<li value="1">likely culprit: leaf-r0-1 port 3 \(cable to gpu03 mlx5_0\)', html
    )
    # the slow pairs' ends (ranks 1, 2, 3, 6, 10 on rail 0) and nothing else are on a slow path
    slow = {n for n, g in hosts.items() if int(g.get("data-slow")) > 0}
    assert slow == {f"gpu{k:02d} mlx5_0" for k in (2, 3, 4, 7, 11)}
    # the faults the fabric found: the 1x uplink in red (a candidate of 2 slow pairs, not the
    # culprit), gpu07 mlx5_1's EDR cable in red on no path
    lines = {
        (
            switches[x.get("data-low")].get("data-name"),
            switches[x.get("data-high")].get("data-name"),
        ): x
        for x in _elements(svg, "line", "isl")
    }
    assert len(lines) == 12  # each leaf to each spine (2 cables each)
    leaf, spine = isl.split("<>")[0].split(":")[0], isl.split("<>")[1].split(":")[0]
    one_x = lines[(leaf, spine)]
    assert (one_x.get("data-state"), one_x.get("data-slow"), one_x.get("data-candidate")) == (
        "fail",
        "0",
        "2",
    )
    assert one_x.get("stroke") == COLOUR["fail"]
    assert hosts["gpu07 mlx5_1"].get("data-state") == "fail"
    assert hosts["gpu07 mlx5_1"].get("data-slow") == "0"
    # rail 1's leaves carry no slow pair and no fault
    for (low, _high), line in lines.items():
        if low.startswith("leaf-r1-"):
            assert (line.get("data-state"), line.get("data-candidate")) == ("ok", "0"), low
    # the halo is drawn under the slow hosts' cables and leaf-r0-1's candidate uplinks only
    halos = _elements(svg, "line", "halo")
    assert halos and all(h.get("stroke") == HALO for h in halos)


def test_three_tiers_are_drawn_with_their_cores(tmp_path):
    t = three_tier()  # 2 pods of 2 leaves and 2 spines, 2 cores, 16 hosts (one adapter each)
    net = tmp_path / "three.net"
    net.write_text(t.text())
    # ring pairs across the pods (7-8, 15-0) slow: their paths go up to the cores
    sweep = write_sweep(tmp_path / "sweep.json", {frozenset((7, 8)), frozenset((15, 0))}, hosts=16)
    html = _page(sweep, net, tmp_path / "three.html")
    svg = _svg(html)
    tiers = [t.text for t in _elements(svg, "text", "tier")]
    assert tiers == ["cores", "spines", "leaves"]
    rows: dict[str, list[str]] = {}
    for g in _switches(svg).values():
        rows.setdefault(g.get("data-tier"), []).append(g.get("data-name"))
    assert sorted(rows["2"]) == ["core-1", "core-2"] and len(rows["1"]) == 4 and len(rows["0"]) == 4
    # every slow pair leaves its pod: the spine-to-core lines are candidates of theirs
    switches = _switches(svg)
    up = [
        x
        for x in _elements(svg, "line", "isl")
        if switches[x.get("data-high")].get("data-tier") == "2"
    ]
    assert up and any(int(x.get("data-candidate")) > 0 for x in up)


def test_a_fabric_of_thousands_of_ports_is_folded_to_a_bounded_drawing(tmp_path):
    """128 leaves and 32 spines (8 rails of 16 leaves, 512 hosts): each tier folds to at most
    MAX_BOXES boxes, the switches with something to show stay alone, the rest are counted."""
    t = rail_fat_tree(hosts=512, rails=8, leaves_per_rail=16, spines=32)
    _leaf, port, _spine, _sport = t.isl("leaf-r0-2", 0)
    t.set_link("leaf-r0-2", port, "1xHDR")
    net = tmp_path / "big.net"
    net.write_text(t.text())
    # the ring pairs leaving leaf-r0-1 (hosts 1-32) slow: 31-32 and 511-0
    slow = {frozenset((31, 32)), frozenset((511, 0))}
    sweep = write_sweep(tmp_path / "sweep.json", slow, hosts=512)
    html = _page(sweep, net, tmp_path / "big.html")
    svg = _svg(html)
    switches = _switches(svg)
    rows: dict[str, list[ET.Element]] = {}
    for g in switches.values():
        rows.setdefault(g.get("data-tier"), []).append(g)
    assert all(len(boxes) <= MAX_BOXES for boxes in rows.values())
    assert sum(int(g.get("data-members")) for g in rows["0"]) == 128
    assert sum(int(g.get("data-members")) for g in rows["1"]) == 32
    alone = {g.get("data-name"): g for g in rows["0"] if g.get("data-members") == "1"}
    assert alone["leaf-r0-1"].get("data-state") == "culprit"
    assert alone["leaf-r0-2"].get("data-state") == "warn"  # its 1x uplink: fabric.oversubscription
    folded = [g for g in rows["0"] if g.get("data-members") != "1"]
    assert folded and all(re.fullmatch(r"\d+ leaves", g.get("data-name")) for g in folded)
    assert len(_elements(svg, "line", "isl")) <= MAX_BUNDLES
    drawing = re.search(r'<svg class="fabric".*?</svg>', html, re.S).group(0)
    assert "folded into" in html and len(drawing) < 150_000
    (badge,) = _elements(svg, "g", "badge")
    assert badge.get("data-culprit") == "1"


# --- in Chromium ---------------------------------------------------------------------------------

#: Injected into a copy of the page (which has no script): where Chromium laid out the badges, the
#: failing lines' ends, the slow hosts' dots and every text of the drawing.
_MEASURE = """<script>(function () {
  const box = e => { const b = e.getBoundingClientRect(); return [b.left, b.top, b.right, b.bottom]; };
  const svg = document.querySelector('svg.fabric');
  const o = svg.getBoundingClientRect();
  const out = {svg: box(svg), scroll_width: document.documentElement.scrollWidth,
               view_width: window.innerWidth, badges: [], fail_lines: [], dots: [], texts: []};
  for (const c of svg.querySelectorAll('g.badge circle')) out.badges.push(box(c));
  for (const l of svg.querySelectorAll('line.isl[data-state=fail]'))
    out.fail_lines.push(['x1', 'y1', 'x2', 'y2'].map((a, i) => +l.getAttribute(a) + (i % 2 ? o.top : o.left)));
  for (const g of svg.querySelectorAll('g.host'))
    out.dots.push([g.dataset.name, +g.dataset.slow, box(g.querySelector('circle'))]);
  for (const t of svg.querySelectorAll('text')) out.texts.push([t.textContent, box(t)]);
  document.body.setAttribute('data-measure', JSON.stringify(out));
})();</script>"""


def _measure(page: Path, tmp: Path, window: str) -> dict:
    import html

    text = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", page.read_text())
    copy = tmp / f"measure-{page.stem}.html"
    copy.write_text(text.replace("</body>", _MEASURE + "</body>"))
    proc = _run_chromium(copy, tmp / f"profile-m-{page.stem}", window, "--dump-dom")
    found = re.search(r'data-measure="([^"]*)"', proc.stdout)
    assert found, proc.stdout[-2000:]
    return json.loads(html.unescape(found.group(1)))


def _pixels_along(img, line: list[float], colour: str) -> float:
    """Share of points sampled along the middle of a line that are ``colour`` (within 2 levels)."""
    x1, y1, x2, y2 = line
    rgb = [int(colour[i : i + 2], 16) for i in (1, 3, 5)]
    hits = 0
    for k in range(3, 8):  # the middle of the line, away from its ends and a badge at its centre
        x, y = x1 + (x2 - x1) * k / 10, y1 + (y2 - y1) * k / 10
        px = img[round(y), round(x)]
        hits += int(max(abs(int(px[i]) - rgb[i]) for i in range(3)) <= 2)
    return hits / 5


@pytest.mark.slow
def test_chromium_draws_the_culprit_the_failing_uplink_and_the_slow_path(dumps, tmp_path):  # noqa: F811
    _routed, plain, _isl = dumps
    page = tmp_path / "fabric.html"
    _page(write_sweep(tmp_path / "sweep.json", PORT_SLOW), plain, page)
    window = "1400,1100"
    assert _chromium(page, tmp_path / "console.png", tmp_path / "profile-c", window) == []
    layout = _measure(page, tmp_path, window)
    img = _screenshot(page, tmp_path, window)
    width, height = (int(v) for v in window.split(","))
    left, top, right, bottom = layout["svg"]
    assert right <= width and bottom <= height, "the window is too short for the test"
    assert layout["scroll_width"] <= layout["view_width"]
    for text, (tl, tt, tr, tb) in layout["texts"]:  # nothing of the drawing outside it
        assert left - 1 <= tl and tr <= right + 1 and top - 1 <= tt and tb <= bottom + 1, text
    (badge,) = layout["badges"]
    bl, bt, _br, bb = badge  # left of the white number, inside the white rim: the badge's dark red
    assert (
        _share_of_colour(img, (bl + 2.5, bt + 6, bl + 6, bb - 6), COLOUR["culprit"], inset=0) > 0.9
    )
    (fail,) = layout["fail_lines"]
    assert _pixels_along(img, fail, COLOUR["fail"]) >= 0.8
    slow = {n for n, k, _b in layout["dots"] if k > 0}
    assert slow == {f"gpu{k:02d} mlx5_0" for k in (2, 3, 4, 7, 11)}
    for name, k, (dl, dt, dr, db) in layout["dots"]:
        # the halo: light blue in the 24 x 24 px around a slow pair's host dot, none around the
        # dots of rail 1 (their leaves carry no slow pair)
        around = img[round(dt) - 12 : round(db) + 12, round(dl) - 12 : round(dr) + 12]
        halo = int(
            (abs(around - [int(HALO[i : i + 2], 16) for i in (1, 3, 5)]).max(axis=-1) <= 2).sum()
        )
        if k > 0:
            assert halo >= 20, (name, halo)
        elif name.endswith("mlx5_1"):
            assert halo == 0, (name, halo)


def test_a_node_description_cannot_inject_markup(tmp_path):
    """Node descriptions are set by each host's administrator (untrusted): escaped in the drawing,
    its tooltips and attributes like everything else from the files."""
    t = three_tier()
    t.switch("leaf-p1-1").desc = "<img src=x onerror=alert(1)>"
    t.switch("spine-p1-1").desc = "sp&<b>1</b>"
    net = tmp_path / "evil.net"
    net.write_text(t.text())
    sweep = write_sweep(tmp_path / "sweep.json", {frozenset((3, 4)), frozenset((2, 3))}, hosts=16)
    html = _page(sweep, net, tmp_path / "evil.html")
    assert "<img" not in html and "<b>1" not in html
    svg = _svg(html)  # still well-formed XML
    names = {g.get("data-name") for g in _switches(svg).values()}
    assert {"<img src=x onerror=alert(1)>", "sp&<b>1</b>"} <= names

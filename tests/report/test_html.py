"""``ibdiag report -o html`` in a real headless Chromium (Debian's ``chromium``, from make system-deps):
the page loads with no console message at all (it has no script: any message is an error or a blocked
fetch), and a screenshot shows the sweep matrix — the matrix's colours, where the page has a sweep,
and none where it has not."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from ibdiag.sweep.chart import FAILED_COLOUR, PALETTE
from tests.support.env import need_tool

pytestmark = pytest.mark.slow


def _run_chromium(
    page: Path, profile: Path, window: str, *args: str
) -> subprocess.CompletedProcess:
    exe = need_tool("chromium")
    cmd = [
        exe,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={profile}",
        "--enable-logging=stderr",
        "--v=0",
        "--hide-scrollbars",
        "--force-device-scale-factor=1",
        f"--window-size={window}",
        *args,
        page.resolve().as_uri(),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


def _chromium(page: Path, shot: Path, profile: Path, window: str = "1400,2200") -> list[str]:
    """Load ``page``, write a screenshot, return the console messages Chromium logged."""
    proc = _run_chromium(page, profile, window, f"--screenshot={shot}")
    assert shot.exists(), proc.stderr[-2000:]
    # Chromium logs every console message (log, error, CSP violation, uncaught exception) as INFO:CONSOLE.
    return [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]


def _palette_pixels(shot: Path) -> dict[str, int]:
    from matplotlib.image import imread

    img = imread(str(shot))[..., :3]
    out = {}
    for _, colour in PALETTE:
        rgb = [int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
        match = (
            (abs(img[..., 0] - rgb[0]) < 0.01)
            & (abs(img[..., 1] - rgb[1]) < 0.01)
            & (abs(img[..., 2] - rgb[2]) < 0.01)
        )
        out[colour] = int(match.sum())
    return out


def _page(cli, out: Path, *inputs) -> Path:
    res = cli("report", *inputs, "-o", "html")
    assert res.exit_code in (0, 1), res.stderr
    out.write_text(res.stdout, encoding="utf-8")
    return out


def test_the_page_is_self_contained(cli, fleet_dir, tmp_path):
    html = _page(cli, tmp_path / "fleet.html", fleet_dir).read_text()
    assert html.startswith("<!DOCTYPE html>") and "Content-Security-Policy" in html
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert "<script" not in html and "url(" not in html and "@import" not in html
    assert html.count("<svg") == 8  # one matrix per rail
    assert "dgx-narrow" in html and "mlx5_3 firmware" in html and "28.39.2048" in html


def test_a_value_from_a_file_cannot_inject_markup(cli, fleet_dir, tmp_path):
    import json

    doc = json.loads((fleet_dir / "dgx-healthy.topo.json").read_text())
    doc["host"] = "evil-host"
    doc["adapters"][0]["fw_ver"] = "<img src=x onerror=alert(1)>"
    bad = tmp_path / "in"
    bad.mkdir()
    for f in fleet_dir.glob("*.topo.json"):
        (bad / f.name).write_text(f.read_text())
    (bad / "evil.topo.json").write_text(json.dumps(doc))
    html = _page(cli, tmp_path / "evil.html", bad).read_text()
    assert "<img src=x" not in html and "&lt;img src=x onerror=alert(1)&gt;" in html


def test_chromium_loads_it_without_console_errors_and_shows_the_matrix(cli, fleet_dir, tmp_path):
    page = _page(cli, tmp_path / "fleet.html", fleet_dir)
    messages = _chromium(page, tmp_path / "fleet.png", tmp_path / "profile-1")
    assert messages == []
    pixels = _palette_pixels(tmp_path / "fleet.png")
    green, _, orange, _ = (c for _, c in PALETTE)
    assert pixels[green] > 2000  # the healthy links of 8 rails' matrices
    assert pixels[orange] > 20  # the narrow node's slow rail (0.5 x the median)

    no_sweep = fleet_dir.parent / "no-sweep"
    if not no_sweep.exists():
        no_sweep.mkdir()
        for f in fleet_dir.glob("dgx-*.json"):
            (no_sweep / f.name).write_text(f.read_text())
    plain = _page(cli, tmp_path / "plain.html", no_sweep)
    assert _chromium(plain, tmp_path / "plain.png", tmp_path / "profile-2") == []
    assert _palette_pixels(tmp_path / "plain.png")[green] < 50  # no matrix, no matrix colours


def test_the_console_check_sees_errors(tmp_path):
    # The control: a page that breaks its own CSP and throws is reported, so an empty list above means something.
    page = tmp_path / "bad.html"
    page.write_text(
        "<!DOCTYPE html><html><head><meta charset='utf-8'><meta http-equiv='Content-Security-Policy' content=\"default-src 'none'\">"
        "<title>t</title></head><body><img src='http://192.0.2.1/x.png'><script>nothere()</script></body></html>"
    )
    messages = _chromium(page, tmp_path / "bad.png", tmp_path / "profile")
    assert any("Content Security Policy" in m for m in messages)


def test_the_page_an_operator_opens_first(cli, fleet_dir, tmp_path):
    """Issue #27: each failing node's findings with message and hint, host names never wrapped, a
    saturated counter shown as a floor (as counters shows it), a matrix caption never clipped."""
    import json

    inputs = tmp_path / "in"
    shutil.copytree(fleet_dir, inputs)
    sat = inputs / "dgx-errors.counters.json"
    doc = json.loads(sat.read_text())
    port = doc["ports"][0]
    port["counters"]["symbol_error"] = 65535
    port["saturated"] = ["symbol_error"]
    sat.write_text(json.dumps(doc))
    html = _page(cli, tmp_path / "fleet.html", inputs).read_text()
    findings = html[html.index("<h2>Findings per node</h2>") : html.index("<h2>Sweep")]
    assert "<h3>dgx-narrow</h3>" in findings and "<h3>dgx-healthy</h3>" not in findings
    assert "topo.pcie_width" in findings and 'class="hint">hint: ' in findings
    assert "white-space: nowrap" in html
    assert "≥65535 (saturated)" in html and "65535 since reset" not in html
    text = cli("report", inputs, env={"COLUMNS": "200"}).stdout
    assert "≥65535 (saturated)" in text
    for svg in re.findall(r"<svg[^>]*>.*?</svg>", html, re.S):
        width = int(re.search(r'width="(\d+)"', svg).group(1))
        caption = re.findall(r'<text x="(\d+)"[^>]*font-size="11">([^<]*)</text>', svg)[-1]
        assert int(caption[0]) + len(caption[1]) * 6.5 <= width  # the caption fits its drawing


# --- the rendered layout: a screenshot, and the same page measured by Chromium ------------------------

#: Injected into a copy of the page (the page itself has no script and a CSP that forbids one): where
#: Chromium laid out each coloured matrix cell, each text of a matrix, each host cell (in how many
#: lines) and the drain list, written into the DOM that --dump-dom prints.
_MEASURE = """<script>(function () {
  const box = e => { const b = e.getBoundingClientRect(); return [b.left, b.top, b.right, b.bottom]; };
  const out = {scroll_width: document.documentElement.scrollWidth, view_width: window.innerWidth,
               svgs: [], hosts: [], drain: null};
  for (const svg of document.querySelectorAll('svg.matrix')) {
    const cells = [...svg.querySelectorAll('rect:not(.mark)')].map(r => [r.getAttribute('fill'), box(r)]);
    const texts = [...svg.querySelectorAll('text')].map(t => [t.textContent, t.getAttribute('class'), box(t)]);
    out.svgs.push({box: box(svg), label: svg.getAttribute('aria-label'), cells: cells, texts: texts});
  }
  for (const td of document.querySelectorAll('td.host')) {
    const range = document.createRange();
    range.selectNodeContents(td);
    out.hosts.push([td.textContent, new Set([...range.getClientRects()].map(r => Math.round(r.top))).size]);
  }
  const drain = document.querySelector('.drain');
  if (drain) out.drain = box(drain);
  document.body.setAttribute('data-measure', JSON.stringify(out));
})();</script>"""


def _measure(page: Path, tmp: Path, window: str, *, css_off: str = "") -> dict:
    """Chromium's layout of ``page`` at ``window`` (a copy with the measuring script; ``css_off``: a CSS
    declaration removed from the copy, for the controls)."""
    import html
    import json

    text = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", page.read_text())
    if css_off:
        assert css_off in text
        text = text.replace(css_off, "")
    copy = tmp / f"measure-{page.stem}-{len(css_off)}.html"
    copy.write_text(text.replace("</body>", _MEASURE + "</body>"))
    proc = _run_chromium(copy, tmp / f"profile-m-{page.stem}", window, "--dump-dom")
    found = re.search(r'data-measure="([^"]*)"', proc.stdout)
    assert found, proc.stdout[-2000:]
    return json.loads(html.unescape(found.group(1)))


def _rgb(colour: str) -> tuple[int, ...]:
    return tuple(int(colour[i : i + 2], 16) for i in (1, 3, 5))


def _share_of_colour(img, box, colour: str, *, inset: float = 0.25) -> float:
    """Share of the pixels in the middle of ``box`` (left, top, right, bottom) that are ``colour``."""
    left, top, right, bottom = box
    dx, dy = (right - left) * inset, (bottom - top) * inset
    region = img[round(top + dy) : round(bottom - dy), round(left + dx) : round(right - dx)]
    assert region.size, box
    return float((abs(region - _rgb(colour)).max(axis=-1) <= 2).mean())


def _screenshot(page: Path, tmp: Path, window: str):
    from matplotlib.image import imread

    shot = tmp / f"{page.stem}.png"
    assert _chromium(page, shot, tmp / f"profile-s-{page.stem}", window) == []
    return (imread(str(shot))[..., :3] * 255).round().astype(int)


def _check_rendered(page: Path, tmp: Path, window: str) -> dict:
    """The screenshot shows every coloured cell where Chromium laid it out, in its colour; nothing of a
    matrix (numbers, captions, labels) lies outside its drawing, nor the page outside the window; every
    host cell is one line; the page is not blank."""
    width, height = (int(v) for v in window.split(","))
    layout = _measure(page, tmp, window)
    img = _screenshot(page, tmp, window)
    assert img.shape[:2] == (height, width)
    assert (abs(img - 255).max(axis=-1) > 8).mean() > 0.02  # not blank
    assert layout["scroll_width"] <= layout["view_width"] == width  # nothing off the right edge
    coloured = {c for _, c in PALETTE} | {FAILED_COLOUR}
    for svg in layout["svgs"]:
        left, top, right, bottom = svg["box"]
        assert right <= width and bottom <= height, "the window is too short for the test"
        for text, _, (tl, tt, tr, tb) in svg["texts"]:
            assert left - 1 <= tl and tr <= right + 1 and top - 1 <= tt and tb <= bottom + 1, text
        for fill, box in svg["cells"]:
            if fill in coloured:
                # > half: a numbered cell's label (with its halo) covers under a third of its middle
                assert _share_of_colour(img, box, fill, inset=0.15) > 0.5, (svg["label"], fill, box)
    assert layout["hosts"] and all(lines == 1 for _, lines in layout["hosts"]), layout["hosts"]
    return layout


def _cell_index(svg: dict, box: list[float]) -> tuple[int, int]:
    """(row, column) of a cell from where it was laid out: the matrix starts 40 px in, square cells."""
    cells = [b for _, b in svg["cells"]]
    px = cells[0][2] - cells[0][0]
    return round((box[1] - svg["box"][1] - 40) / px), round((box[0] - svg["box"][0] - 40) / px)


def test_the_screenshot_shows_the_drain_list_and_the_slow_links_where_they_are(
    cli, fleet_dir, tmp_path
):
    """Issue #27: the fleet's page as Chromium draws it: the drain list on its tinted background, the
    narrow node's slow rail (rank 5, rail 5) in the slow colours at its row and column, and only there,
    each of the worst links numbered in its cell and named in the list under the matrices."""
    page = _page(cli, tmp_path / "fleet.html", fleet_dir)
    window = "1400,4200"
    layout = _check_rendered(page, tmp_path, window)
    img = _screenshot(page, tmp_path, window)
    assert _share_of_colour(img, layout["drain"], "#fff0f0", inset=0.1) > 0.7
    green, light, orange, red = (c for _, c in PALETTE)
    slow = {}
    for k, svg in enumerate(layout["svgs"]):
        for fill, box in svg["cells"]:
            if fill in (orange, red):
                slow.setdefault(k, []).append(_cell_index(svg, box))
    assert set(slow) == {5}  # rail 5 only
    assert len(slow[5]) >= 4 and all(5 in cell for cell in slow[5])  # dgx-narrow is rank 5
    labels = [t for t, cls, _ in layout["svgs"][5]["texts"] if cls == "mark-label"]
    assert sorted(labels) == [str(n) for n in range(1, len(labels) + 1)] and len(labels) >= 4
    html = page.read_text()
    table = html[html.index('<table class="worst">') :]
    table = table[: table.index("</table>")]
    assert table.count("<tr>") == len(labels) + 1
    assert "dgx-narrow (rank 5) mlx5_7" in table and "x median" in table


@pytest.mark.parametrize("nodes", [2, 70])
def test_the_matrix_is_readable_for_two_nodes_and_for_seventy(cli, tmp_path, nodes):
    """Cells of 32 px for 2 nodes, 10 px for 70 (720 px a side): coloured where laid out, the worst
    links ringed and numbered without a label covering a cell, nothing clipped."""
    from tests.support.fleet_fixtures import write_sweep
    from tests.support.synthetic_fabric import PlantedFaults

    inputs = tmp_path / "in"
    inputs.mkdir()
    write_sweep(inputs / "sweep.json", nodes, PlantedFaults(slow_ends={(nodes // 2, 1): 0.3}))
    page = _page(cli, tmp_path / f"sweep{nodes}.html", inputs)
    layout = _check_rendered(page, tmp_path, "1400,2400")
    svg = layout["svgs"][1]
    box = svg["cells"][0][1]
    assert box[2] - box[0] == (32 if nodes == 2 else 10)
    marks = [(t, b) for t, cls, b in svg["texts"] if cls == "mark-label"]
    assert marks  # the slow end's links are numbered
    if nodes > 2:  # small cells: the labels stand right of the matrix, over no cell
        right = max(b[2] for _, b in svg["cells"])
        assert all(b[0] >= right for _, b in marks)
        red = [_cell_index(svg, b) for fill, b in svg["cells"] if fill == PALETTE[-1][1]]
        assert red and all(nodes // 2 in cell for cell in red)


def test_the_layout_checks_can_fail(cli, fleet_dir, tmp_path):
    """The controls: in a narrow window the host cells stay on one line, and the same measure sees them
    wrap once the page's nowrap is taken out."""
    page = _page(cli, tmp_path / "fleet.html", fleet_dir)
    kept = _measure(page, tmp_path, "420,3000")
    assert all(lines == 1 for _, lines in kept["hosts"])
    wrapped = _measure(page, tmp_path, "420,3000", css_off="white-space: nowrap;")
    assert any(lines > 1 for _, lines in wrapped["hosts"]), wrapped["hosts"]

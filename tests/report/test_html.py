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

from ibdiag.sweep.chart import PALETTE
from tests.support.env import need_tool

pytestmark = pytest.mark.slow


def _chromium(page: Path, shot: Path, profile: Path) -> list[str]:
    """Load ``page``, write a screenshot, return the console messages Chromium logged."""
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
        "--window-size=1400,2200",
        f"--screenshot={shot}",
        page.resolve().as_uri(),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
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

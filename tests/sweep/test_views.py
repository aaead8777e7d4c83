"""Views of a sweep: the drain line, the matrix (terminal, SVG, PNG), tables, prom, junit, csv."""

from __future__ import annotations

import io
import re
from xml.etree import ElementTree as ET

import pytest

from ibdiag.findings.model import Report, RunMeta
from ibdiag.output.csvout import render_csv
from ibdiag.output.junit import render_junit
from ibdiag.output.prom import finding_metrics, render_prom
from ibdiag.sweep import chart, views
from ibdiag.sweep.checks import sweep_findings
from ibdiag.sweep.matrix import matrix_grid, matrix_lines
from ibdiag.sweep.nodes import make_fleet
from ibdiag.sweep.passes import run_sweep
from tests.support.synthetic_fabric import PlantedFaults, SyntheticFabric

META = RunMeta(host="head", version="0.1.0", generated_at="2026-12-01T00:00:00Z")


def sweep(n=24, faults=PlantedFaults(), rails=("mlx5_0", "mlx5_1"), hosts=None):
    nodes = make_fleet(hosts or [f"gpu-node-{i:03d}" for i in range(n)], list(rails), rate_gbps=400)
    return run_sweep(nodes, SyntheticFabric(faults, noise=0.01))


@pytest.fixture(scope="module")
def faulty():
    return sweep(
        faults=PlantedFaults(
            slow_nodes={3: 0.5, 9: 0.4, 15: 0.45}, slow_links={(1, 20, 21): 0.6}, dead={6: 1, 12: 0}
        )
    )


def test_line_view_is_one_ascii_line_of_at_most_80_characters(faulty):
    line = views.line_view(faulty)
    assert "\n" not in line and len(line) <= 80 and line.isascii()
    assert line.startswith("sweep FAIL: drain gpu-node-003 gpu-node-009 ")
    assert line.endswith(" (24 nodes)")
    shown = re.findall(r"gpu-node-\d+", line)
    more = re.search(r"\+(\d+) more", line)
    assert len(shown) + (int(more.group(1)) if more else 0) == 5  # 3 bad + 2 unreachable, none lost
    assert views.drain_hosts(faulty)[:3] == ["gpu-node-003", "gpu-node-009", "gpu-node-015"]


def test_line_view_when_healthy_and_when_only_a_link_is_bad():
    assert views.line_view(sweep(8)) == "sweep OK: no bad node or link (8 nodes)"
    # faults well below the 0.5 ratio limit: at 0.5 the 1 % noise makes them a coin flip
    only_link = sweep(8, PlantedFaults(slow_links={(0, 2, 3): 0.3}))
    assert views.line_view(only_link) == "sweep FAIL: 1 bad link (8 nodes)"
    both = sweep(12, PlantedFaults(slow_nodes={9: 0.3}, slow_links={(0, 2, 3): 0.3}))
    assert views.line_view(both) == "sweep FAIL: drain gpu-node-009; 1 bad link (12 nodes)"


def test_line_view_keeps_whole_names_and_counts_the_rest():
    assert (
        views.fit_line("drain", ["a" * 30, "b" * 30, "c" * 30], " end", width=80)
        == "drain " + "a" * 30 + " " + "b" * 30 + " +1 more end"
    )
    assert views.fit_line("drain", ["x" * 100], "", width=80) == "drain +1 more"
    shared = sweep(6, PlantedFaults(slow_nodes={1: 0.3}), hosts=["box"] * 6)  # well below 0.5
    assert views.drain_hosts(shared) == [
        "box"
    ]  # one host to drain, even if several ranks live on it


def test_matrix_grid_marks_slow_failed_and_untested_pairs(faulty):
    grid = matrix_grid(faulty, 1, max_cells=64)
    assert grid.size == 24 and grid.block == 1
    assert (
        grid.cells[20][21] == pytest.approx(0.6, abs=0.05)
        and grid.cells[21][20] == grid.cells[20][21]
    )
    assert grid.cells[0][12] is None  # ring: 0 and 12 never met
    assert grid.cells[2][3] == pytest.approx(0.5, abs=0.05)  # node 3 is slow with its neighbour
    small = matrix_grid(faulty, 1, max_cells=8)
    assert small.block == 3 and small.size == 8
    assert small.cells[20 // 3][21 // 3] <= 0.65  # a block shows its worst pair


def test_matrix_lines_ascii_and_rich(faulty):
    from rich.console import Console

    grid = matrix_grid(faulty, 1)
    text = "\n".join(str(t) for t in matrix_lines(grid, ascii_only=True))
    assert text.isascii()
    rows = text.splitlines()
    assert rows[0].startswith("node x node bandwidth, rail 1 (median ")
    row20 = next(r for r in rows if r.startswith("20 "))
    assert row20[3 + 21] == "O" and row20[3 + 20] == "\\" and row20[3 + 19] == "."
    con = Console(file=io.StringIO(), width=100, force_terminal=True, color_system="truecolor")
    for line in matrix_lines(grid):
        con.print(line)
    out = con.file.getvalue()
    assert "█" in out and "\x1b[" in out  # coloured blocks


def test_worst_tables_lead_with_the_bad(faulty):
    from rich.console import Console

    con = Console(file=io.StringIO(), width=160)
    for t in views.worst_tables(faulty):
        con.print(t)
    out = con.file.getvalue()
    nodes_part, links_part = out.split("Slowest links")
    first_rows = [line for line in nodes_part.splitlines() if "(rank" in line][:5]
    assert all(("UNREACHABLE" in r) or ("BAD" in r) for r in first_rows)
    assert "BAD LINK" in links_part.splitlines()[4]


def test_prom_has_one_status_per_node_and_bandwidth_per_rail(faulty):
    report = Report("sweep", {}, tuple(sweep_findings(faulty)))
    text = render_prom([*views.prom_metrics(faulty), *finding_metrics(report)])
    assert len(re.findall(r"^ibdiag_sweep_node_status\{", text, re.M)) == 24
    assert 'ibdiag_sweep_node_status{host="gpu-node-006",rank="6"} 3' in text
    assert 'ibdiag_sweep_node_status{host="gpu-node-003",rank="3"} 2' in text
    assert re.search(
        r'^ibdiag_sweep_node_bw_bytes_per_second\{host="gpu-node-003",rank="3",rail="0",adapter="mlx5_0"\} 2[0-9]{9,10}(\.[0-9]+)?$',
        text,
        re.M,
    )
    assert (
        len(
            re.findall(
                r'^ibdiag_check_severity\{command="sweep",check="sweep\.(node|unreachable)"',
                text,
                re.M,
            )
        )
        == 24
    )


def test_junit_has_a_case_per_node(faulty):
    report = Report("sweep", {}, tuple(sweep_findings(faulty)))
    root = ET.fromstring(render_junit(report, META))
    cases = root.findall(".//testcase")
    per_node = [c for c in cases if c.get("classname") in ("sweep.node", "sweep.unreachable")]
    assert sorted(c.get("name") for c in per_node) == sorted(n.label for n in faulty.nodes)
    failed = {c.get("name") for c in per_node if c.find("failure") is not None}
    assert failed == {
        "gpu-node-003 (rank 3)",
        "gpu-node-009 (rank 9)",
        "gpu-node-015 (rank 15)",
        "gpu-node-006 (rank 6)",
        "gpu-node-012 (rank 12)",
    }


def test_csv_is_one_row_per_pair_test(faulty):
    import pandas as pd

    text = render_csv(views.CSV_HEADER, views.csv_rows(faulty))
    df = pd.read_csv(io.StringIO(text))
    assert len(df) == len(faulty.pairs)
    assert set(df["a_adapter"]) == {"mlx5_0", "mlx5_1"}
    assert df["unreachable"].dropna().astype(str).str.contains("6|12").all()


def test_svg_is_self_contained_and_uses_the_palette(faulty):
    svg = chart.matrix_svg(matrix_grid(faulty, 1), title="rail 1 <test>")
    assert svg.startswith("<svg ") and svg.endswith("</svg>")
    assert "http" not in svg and "href" not in svg and "<test>" not in svg
    ET.fromstring(svg)  # well-formed
    for colour in (chart.PALETTE[0][1], chart.PALETTE[2][1], chart.UNTESTED_COLOUR):
        assert f'fill="{colour}"' in svg


def test_worst_links_failed_first_then_slowest_and_never_a_typical_one():
    res = sweep(
        12,
        PlantedFaults(
            slow_links={(0, 2, 3): 0.6, (1, 4, 5): 0.3}, broken_links=frozenset({(0, 7, 8)})
        ),
    )
    worst = views.worst_links(res)
    keys = [(w.link.rail, w.link.a, w.link.b) for w in worst]
    assert keys == [(0, 7, 8), (1, 4, 5), (0, 2, 3)]
    assert worst[1].share is not None and 0.25 < worst[1].share < 0.35
    assert views.worst_links(sweep(8)) == []  # a healthy sweep names no link
    assert len(views.worst_links(res, limit=1)) == 1


def test_svg_marks_label_big_cells_inside_and_small_ones_beside(faulty):
    grid = matrix_grid(faulty, 1)
    big = chart.matrix_svg(grid, cell_px=24, marks=[(3, 4, "1")])
    small = chart.matrix_svg(grid, cell_px=8, marks=[(3, 4, "1"), (3, 9, "2")])
    ET.fromstring(big), ET.fromstring(small)
    assert re.search(
        r'class="mark-label" x="108" y="88"[^>]*>1<', big
    )  # the middle of row 3, column 4
    side = grid.size * 8
    assert re.search(
        rf'class="mark-label" x="{side + 4}" y="31.5"[^>]*>1,2<', small
    )  # right of row 3
    assert big.count('class="mark"') == 1 and small.count('class="mark"') == 2


def test_png_has_a_panel_per_rail(faulty):
    from matplotlib.image import imread

    png = chart.matrix_png([matrix_grid(faulty, k) for k in (0, 1)])
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    img = imread(io.BytesIO(png))
    assert img.shape[1] > img.shape[0]  # two panels side by side
    green = tuple(int(chart.PALETTE[0][1][i : i + 2], 16) / 255 for i in (1, 3, 5))
    close = (
        (abs(img[..., 0] - green[0]) < 0.02)
        & (abs(img[..., 1] - green[1]) < 0.02)
        & (abs(img[..., 2] - green[2]) < 0.02)
    ).sum()
    assert close > 100  # the typical links are drawn

"""The nccl-tests-layout table, CSV and metrics of a collective run; the table reads back through the importer."""

from __future__ import annotations

import csv
import io
import re

import pytest

from ibdiag.bench import importers
from ibdiag.bench.collective import views
from ibdiag.bench.collective.analysis import to_bench_run
from ibdiag.bench.collective.measurement import MeasuredRow, Measurement, RankInfo
from ibdiag.bench.collective.plan import plan_size
from ibdiag.bench.results.collective_config import CollectiveConfig
from ibdiag.collectives import DTYPES, OPS
from ibdiag.output.prom import render_prom


@pytest.mark.parametrize(
    ("value", "width", "text"),
    [
        (52.4321, 7, "  52.43"),
        (1234.567, 7, "1234.57"),
        (12345.6, 7, "12345.6"),
        (123456.7, 7, " 123457"),
        (1.2e8, 7, "1.2e+08"),
        (0.0, 6, "  0.00"),
        (397.88, 6, "397.88"),
        (1234.5, 6, "1234.5"),
    ],
)
def test_numbers_get_nccl_tests_precision(value, width, text):
    assert views.nccl_float(value, width) == text


def _run(op: str, n: int = 4, placements=None):
    spec = OPS[op]
    rows = []
    for i, size in enumerate((1 << 20, 1 << 24)):
        plan = plan_size(spec, size, n, DTYPES["bfloat16"])
        for in_place in placements or spec.placements:
            t = 100.0 + size / 20e3 + i
            rows.append(MeasuredRow(plan, in_place, tuple([t] * n), tuple([t * 0.9] * n), 0))
    ranks = tuple(RankInfo(r, f"node{r // 2}", r % 2, 100 + r, "cpu", 0.25) for r in range(n))
    m = Measurement(
        op, "gloo", "bfloat16", n, 20, 5, False, True, "ibdiag", "host timer", ranks, tuple(rows)
    )
    return to_bench_run(m, CollectiveConfig())


@pytest.mark.parametrize(
    "op",
    ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "sendrecv", "reduce"],
)
def test_table_reads_back_through_the_nccl_tests_importer(op):
    run, _ = _run(op)
    lines = views.summary_lines(run) + views.table_lines(run)
    back = importers.parse_text("\n".join(lines) + "\n", "ibdiag-table.txt", op=op)
    assert [(r.bytes, r.count, r.in_place, r.wrong) for r in back.results] == [
        (r.bytes, r.count, r.in_place, r.wrong) for r in run.results
    ]
    for a, b in zip(back.results, run.results, strict=False):
        assert a.busbw_gbs == pytest.approx(b.busbw_gbs, abs=0.006)
        assert a.time_us == pytest.approx(b.time_us, rel=1e-3)
    assert back.meta.nccl_tests.avg_busbw_gbs_reported == pytest.approx(
        run.meta.avg_busbw_gbs, rel=1e-5
    )


def test_table_layout():
    run, _ = _run("all_reduce")
    lines = views.table_lines(run)
    header = [ln for ln in lines if "#wrong" in ln][0]
    row = [ln for ln in lines if ln.lstrip().startswith("1048576")][0]
    # nccl-tests' widths: every value ends in the column where its header name ends (right-aligned)
    ends = [m.end() for m in re.finditer(r"\S+", header)][1:]  # skip the leading '#'
    assert [m.end() for m in re.finditer(r"\S+", row)] == ends
    assert row.split()[:5] == ["1048576", "524288", "bfloat16", "sum", "-1"]
    assert row.split()[5:9] == ["-", "-", "-", "-"]  # all_reduce runs in place only
    assert lines[-3].startswith("# Out of bounds values : 0 OK")
    assert lines[-2].startswith("# Avg bus bandwidth    : ")


def test_summary_says_what_was_not_measured():
    run, _ = _run("all_to_all")
    text = "\n".join(views.summary_lines(run))
    assert "in-place: not measured" in text and "4 ranks on 2 hosts (2 per host)" in text
    run, _ = _run("all_reduce")
    assert "out-of-place: not measured" in "\n".join(views.summary_lines(run))


def test_csv_loads_as_a_table():
    pandas = pytest.importorskip("pandas")
    run, _ = _run("all_gather")
    header, rows = views.CSV_HEADER, views.csv_rows(run)
    from ibdiag.output.csvout import render_csv

    text = render_csv(header, rows)
    df = pandas.read_csv(io.StringIO(text))
    assert list(df.columns) == list(header) and len(df) == 4
    assert set(df["op"]) == {"all_gather"} and df["busbw_gbs"].max() > 0
    assert list(csv.reader(io.StringIO(text)))[1][:4] == ["all_gather", "gloo", "4", "1048576"]


def test_metrics_render():
    run, _ = _run("reduce_scatter")
    text = render_prom(views.prom_metrics(run))
    assert (
        'ibdiag_collective_busbw_bytes_per_second{op="reduce_scatter",backend="gloo",bytes="1048576",placement="out_of_place"}'
        in text
    )
    assert (
        "ibdiag_collective_setup_seconds" in text
        and "ibdiag_collective_avg_busbw_bytes_per_second" in text
    )


def test_chart_and_spread():
    run, _ = _run("all_reduce")
    chart = views.busbw_chart(run)
    assert chart.startswith("busbw by size (in-place)") and "16 MiB" in chart
    assert views.spread_table(run) is not None and views.per_rank_table(run) is not None
    assert views.per_rank_table(run, limit=2) is None

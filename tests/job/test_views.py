"""One result, every format: the shared JSON envelope, CSV, the table, line, JUnit and Prometheus."""

from __future__ import annotations

import csv
import io
import xml.etree.ElementTree as ET

from rich.console import Console

from ibdiag.findings.model import RunMeta
from ibdiag.job.command import SCHEMA, JobRequest, RasFile, run
from ibdiag.job.views import outputs
from ibdiag.jsonread import loads
from ibdiag.output.csvout import render_csv
from ibdiag.output.jsonout import render_json
from ibdiag.output.junit import render_junit
from ibdiag.output.line import render_line
from ibdiag.output.outputs import TableLayout
from ibdiag.output.prom import render_prom
from tests.support.env import FIXTURES

NCCL = FIXTURES / "nccl"
META = RunMeta("gpu03", "test", "2026-05-19T22:42:00Z")


def result():
    return run(
        JobRequest(
            ras=RasFile(NCCL / "ras-2.29.7-mismatch.json"),
            inspector=(NCCL / "inspector-2.30.7",),
            topo=tuple(sorted((NCCL / "topo").glob("*.json"))),
            hosts_file=NCCL / "hosts",
            fabric=FIXTURES / "fabric" / "rail-fat-tree-faulty",
        )
    )


def test_json_envelope_and_data():
    r = result()
    doc = loads(render_json(r.report, META))
    assert doc["schema"] == SCHEMA == "ibdiag.job/1" and doc["status"] == "fail"
    assert doc["ras"]["format"] == "json" and doc["ras"]["nccl_version"] == "2.29.7"
    world = doc["ras"]["communicators"][0]
    assert world["hash"] == "d3a85c21e07f4b96" and world["mismatches"][0]["op"] == "AllReduce"
    ranks = {(x["comm"], x["rank"]): x for x in doc["ranks"]}
    behind = ranks[("d3a85c21e07f4b96", 20)]
    assert behind["roles"] == ["behind"] and behind["node"] == "gpu03" and behind["gpu"] == 4
    assert behind["nics"] == ["mlx5_2"] and behind["leaf_ports"] == ["leaf-r2-1 port 3"]
    assert behind["path_findings"][0]["check"] == "fabric.errors"
    assert doc["communicators"][0]["stragglers"][0]["ranks"] == [4]
    assert doc["inspector"]["records"] == 576


def test_csv_one_row_per_rank_named():
    r = result()
    out = outputs(r)
    assert out.csv is not None
    rows = list(csv.DictReader(io.StringIO(render_csv(*out.csv()))))
    assert len(rows) == len(r.ranks)
    row = next(x for x in rows if x["rank"] == "21" and x["comm"] == "d3a85c21e07f4b96")
    assert (row["roles"], row["node"], row["gpu"], row["leaf_ports"]) == (
        "behind",
        "gpu03",
        "5",
        "leaf-r2-1 port 3",
    )
    assert row["path_findings"] == "fabric.errors leaf-r2-1:3"


def test_table_line_junit_prom():
    r = result()
    out = outputs(r)
    assert out.table is not None and out.prom is not None and out.meta == r.meta
    console = Console(width=160, record=True, file=io.StringIO())
    for item in out.table(TableLayout(strict=False, width=160)):
        console.print(item)
    text = console.export_text()
    assert "RAS: NCCL 2.29.7 json status" in text and "leaf-r2-1 port 3" in text
    assert "Inspector: bus bandwidth per communicator" in text
    line = render_line(r.report)
    assert line.startswith("FAIL job.ras_error gpu04:GPU4") and len(line) <= 80
    xml = ET.fromstring(render_junit(r.report, META))
    cases = {(c.get("classname"), c.get("name")) for c in xml.iter("testcase")}
    assert ("job.ras_op_mismatch", "gpu03:GPU4") in cases and (
        "job.ras_error",
        "gpu04:GPU4",
    ) in cases
    prom = render_prom(out.prom())
    assert 'ibdiag_job_ras_processes{state="dead"} 0' in prom
    assert (
        'ibdiag_job_busbw_bytes_per_second{comm="4e1d5c2b3a697088",collective="AllReduce"' in prom
    )

"""``ibdiag report`` reads ``ibdiag.job/1`` documents: each finding under the node it names."""

from __future__ import annotations

from ibdiag.findings.model import RunMeta, Severity
from ibdiag.job.command import JobRequest, RasFile, run
from ibdiag.output.jsonout import render_json
from ibdiag.report.inputs import read_all
from ibdiag.report.view import build_view
from tests.support.env import FIXTURES

NCCL = FIXTURES / "nccl"


def test_a_job_document_in_the_fleet_view(tmp_path):
    result = run(
        JobRequest(
            ras=RasFile(NCCL / "ras-2.29.7-mismatch.json"),
            topo=tuple(sorted((NCCL / "topo").glob("*.json"))),
            hosts_file=NCCL / "hosts",
        )
    )
    path = tmp_path / "job.json"
    path.write_text(render_json(result.report, RunMeta("gpu01", "test", "2026-05-19T22:42:00Z")))
    docs, skipped = read_all([str(path)])
    assert skipped == []
    (doc,) = docs
    assert doc.kind == "job" and doc.job is not None and doc.job.nccl_version == "2.29.7"
    assert set(doc.job.nodes) == {"gpu03", "gpu04"}
    view = build_view(docs, skipped)
    rows = {r.host: r for r in view.rows}
    assert rows["gpu04"].status is Severity.FAIL and "job.ras_error" in rows["gpu04"].failing[0]
    assert rows["gpu03"].status is Severity.WARN and rows["gpu03"].sources == ("job",)
    # the job-wide warning (RAS's timeouts) stays with the node that wrote the document
    assert rows["gpu01"].status is Severity.WARN

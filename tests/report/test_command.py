"""``ibdiag report`` as a library, without the command line: :func:`ibdiag.report.command.run` on the
fixture fleet's JSON, and the outputs its views give."""

from __future__ import annotations

import io

import pytest

from ibdiag.errors import InputError, UsageError
from ibdiag.findings.model import Severity
from ibdiag.report import views
from ibdiag.report.command import ReportRequest, run
from tests.support.fleet_fixtures import host_of, variants


def test_the_fleet_view_of_a_directory_names_its_outliers_and_the_sweeps_slow_node(fleet_dir):
    res = run(ReportRequest([str(fleet_dir)]))
    assert res.report.command == "report" and res.report.failing(False)
    assert {r.host for r in res.view.rows} == {host_of(v) for v in variants()}
    assert len(res.view.sweeps) == 1 and not res.view.skipped
    firmware = [o for o in res.view.outliers if o.key == "mlx5_3 firmware"]
    assert [o.host for o in firmware] == [host_of("firmware")]
    # the sweep's planted fault: the narrow node's x8 adapter slow on its rail
    sweep_part = res.view.sweeps[0]
    narrow = [n for n in sweep_part.result.nodes if n.host == host_of("narrow")]
    assert narrow and any(
        f.check.startswith("sweep.") and host_of("narrow") in f.subject
        for f in sweep_part.findings
        if f.severity is not Severity.OK
    )
    out = views.outputs(res)
    assert out.line is not None and out.line().startswith("fleet FAIL")
    assert out.html is not None and out.html().startswith("<!DOCTYPE html>")
    assert out.csv is not None and len(out.csv()[1]) == len(res.view.rows)
    assert out.png is not None  # the sweep's matrix, drawn when asked


def test_the_last_sweeps_matrix_is_the_png(fleet_dir, tmp_path):
    pytest.importorskip("matplotlib")
    res = run(ReportRequest([str(fleet_dir)], png=tmp_path / "m.png"))
    out = views.outputs(res)
    assert out.png is not None
    buf = io.BytesIO()
    out.png(buf)
    assert buf.getvalue().startswith(b"\x89PNG\r\n\x1a\n")
    assert not (tmp_path / "m.png").exists()  # the writer (the command line) writes it


def test_without_a_sweep_fabric_and_png_are_usage_errors(fleet_dir, tmp_path):
    topo_only = [str(p) for p in sorted(fleet_dir.glob("*.topo.json"))]
    plain = run(ReportRequest(topo_only))
    assert not plain.view.sweeps and views.outputs(plain).png is None
    with pytest.raises(UsageError, match="--png draws a sweep's matrix"):
        run(ReportRequest(topo_only, png=tmp_path / "m.png"))
    with pytest.raises(UsageError, match="--fabric places a sweep's pairs"):
        run(ReportRequest(topo_only, fabric=tmp_path / "no-such-fabric"))


def test_bad_requests_are_refused_before_anything_is_read(tmp_path):
    with pytest.raises(UsageError, match="--max-file-size 512 is below 1 KiB"):
        run(ReportRequest([str(tmp_path)], max_file_size="512"))
    with pytest.raises(UsageError, match="--max-file-size"):
        run(ReportRequest([str(tmp_path)], max_file_size="lots"))
    with pytest.raises(UsageError, match="--png"):
        run(ReportRequest([str(tmp_path)], png=tmp_path))  # a directory
    with pytest.raises(InputError, match="no input"):
        run(ReportRequest([]))
    (tmp_path / "x.json").write_text("{}")
    with pytest.raises(InputError, match="nothing readable among the inputs"):
        run(ReportRequest([str(tmp_path)]))

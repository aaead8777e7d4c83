"""``ibdiag bench import`` as a library: ``run(ImportRequest(...))`` without the command line."""

from __future__ import annotations

import pytest

from ibdiag.bench import views
from ibdiag.bench.importers.command import ImportRequest, run
from ibdiag.config import load_config
from ibdiag.errors import InputError, UsageError
from tests.support.env import FIXTURES

LOGS = FIXTURES / "logs"


def test_one_run_is_read_judged_and_drawn():
    result = run(ImportRequest(str(LOGS / "nccl-tests-2025_all_reduce_perf.log")))
    (one,) = result.runs
    assert one.kind == "collective" and one.meta.op == "all_reduce" and one.meta.world_size == 32
    assert result.report.command == "bench" and result.report.data["kind"] == "collective"
    assert result.report.data["results"][-1]["bytes"] == 8589934592
    assert [(f.check, f.severity.value) for f in result.report.findings] == [
        ("collective.wrong", "ok")
    ]
    out = views.outputs(result)
    assert out.prom is not None and out.png is None  # a collective run has metrics, no chart
    assert out.csv is not None
    header, rows = out.csv()
    assert "busbw_gbs" in header and len(rows) == len(one.results)


def test_a_file_of_runs_one_after_the_other_gives_them_all():
    log = LOGS / "nccl-tests-shape-all-reduce-then-alltoall-empty-redop.log"
    result = run(ImportRequest(str(log)))
    assert len(result.runs) == 2
    assert [r["op"] for r in result.report.data["runs"]] == [r.meta.op for r in result.runs]
    assert all(f.subject.startswith(("run 1: ", "run 2: ")) for f in result.report.findings)
    assert views.outputs(result).prom is None  # several runs: no metrics of one run
    picked = run(ImportRequest(str(log), run_index=2))
    assert len(picked.runs) == 1 and picked.runs[0].meta.op == result.runs[1].meta.op
    assert "import.multiple_runs" in {f.check for f in picked.report.findings}


def test_the_settings_judge_the_run(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text("[collective]\nmin_busbw_gbs = 1000\n")
    log = str(LOGS / "nccl-tests-2025_all_reduce_perf.log")
    low = run(ImportRequest(log, config=load_config(cfg)))
    assert [f.check for f in low.report.failing(strict=False)] == ["collective.busbw"]
    assert not run(ImportRequest(log)).report.failing(strict=False)


def test_refusals_are_ibdiag_errors(tmp_path):
    log = LOGS / "nccl-tests-shape-all-reduce-then-alltoall-empty-redop.log"
    with pytest.raises(UsageError, match="a saved result is one run"):
        run(ImportRequest(str(log), save=tmp_path / "run.json"))
    with pytest.raises(UsageError, match="does not exist"):
        run(ImportRequest(str(log), save=tmp_path / "missing" / "run.json"))
    empty = tmp_path / "empty.log"
    empty.write_text("")
    with pytest.raises(InputError, match="empty"):
        run(ImportRequest(str(empty)))

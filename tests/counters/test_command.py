"""``ibdiag counters`` as a library, without the command line: ``run(CountersRequest)`` in each mode, the
progress of a series, the frames of ``--watch``, hooks added to the reading, refusals."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import ibdiag.counters.sampler as sampler_mod
from ibdiag.config import load_config
from ibdiag.counters.command import (
    CountersReading,
    CountersRequest,
    check,
    run,
    watching,
)
from ibdiag.counters.result import SeriesProgress
from ibdiag.counters.views import outputs as views
from ibdiag.errors import CannotRunError, UsageError
from ibdiag.findings.model import Finding, Severity
from ibdiag.output.jsonout import render_json
from ibdiag.output.outputs import Addition, TableLayout
from tests.support.counters import HOST, node, write
from tests.support.env import SYSFS_FIXTURES

FAULTY = SYSFS_FIXTURES / "counters-faulty"


def test_a_snapshot_of_a_fixture_is_judged_and_drawn_without_the_cli():
    result = run(CountersRequest(root=FAULTY))
    report = result.report
    assert report.command == "counters" and result.meta.host == "gpu-node-12"
    assert result.span is None and report.data["mode"] == "snapshot"
    assert report.status is Severity.FAIL
    fails = {(f.check, f.subject) for f in report.findings if f.severity is Severity.FAIL}
    assert ("counters.errors", "mlx5_1:1") in fails, fails
    out = views.outputs(result)
    assert out.csv is not None and out.prom is not None and out.table is not None
    header, rows = out.csv()
    assert "counter" in header and {r["adapter"] for r in rows} >= {"mlx5_0", "mlx5_5"}
    symbol = [m for m in out.prom() if m.name == "node_infiniband_symbol_error_total"]
    by_device = {s.labels["device"]: s.value for s in symbol[0].samples}
    assert by_device["mlx5_1"] == 4811 and by_device["mlx5_0"] == 0
    items = out.table(TableLayout(strict=False, width=200))
    assert str(items[0]).startswith("gpu-node-12: 6 RDMA port(s)")


def test_hooks_see_the_reading_and_add_data_findings_and_a_table_above_the_ports():
    seen: list[CountersReading] = []

    def hook(reading: CountersReading) -> Addition:
        seen.append(reading)
        ports = sum(1 for p in reading.sample.ports if p.port is not None)
        finding = Finding("test.hook", Severity.WARN, reading.host, f"{ports} ports seen")
        return Addition(
            data={"hooked": ports},
            findings=(finding,),
            table=lambda layout: [f"hooked at {layout.width}"],
        )

    result = run(CountersRequest(root=FAULTY, extras=(hook,), far_end=hook))
    assert len(seen) == 2 and seen[0].host == "gpu-node-12"
    assert seen[0].sysfs.is_dir("class/infiniband")  # the tree is still open while the hooks run
    assert result.report.data["hooked"] == 6
    assert [f.message for f in result.report.findings if f.check == "test.hook"] == [
        "6 ports seen"
    ] * 2
    items = views.table_items(result, TableLayout(strict=False, width=123))
    assert items[1:3] == ["hooked at 123"] * 2  # after the host line, before the ports' table


@pytest.fixture
def job(monkeypatch, tmp_path):
    """A node whose counters change while the sampler waits between samples."""
    node(tmp_path, {"counters": {"symbol_error": 0, "port_xmit_data": 0}}, {})
    plan: list = []

    def wait(seconds):
        if plan:
            plan.pop(0)()
        time.sleep(seconds)

    monkeypatch.setattr(sampler_mod, "wait", wait)
    return tmp_path, plan


def test_a_series_tells_its_progress_and_each_step_as_it_comes(job):
    root, plan = job
    plan += [
        lambda: write(root, "mlx5_0", "symbol_error", 2),
        lambda: write(root, "mlx5_0", "symbol_error", 7),
    ]
    told: list[SeriesProgress] = []
    result = run(
        CountersRequest(
            root=root, interval_s=0.1, count=2, keep_steps=False, on_progress=told.append
        )
    )
    assert [(p.ports, p.count) for p in told] == [(2, 2)] * 3
    assert told[0].step is None and [p.step.index for p in told[1:]] == [1, 2]
    assert [d.deltas["symbol_error"] for d in told[2].step.deltas if d.adapter == "mlx5_0"] == [5]
    span = result.span
    assert span is not None and span.mode == "series" and span.samples_count == 2
    assert span.steps == ()  # keep_steps=False: constant memory, the steps went to on_progress
    total = span.total(("mlx5_0", 1))
    assert total is not None and total.deltas["symbol_error"] == 7
    assert result.report.status is Severity.FAIL  # symbol errors while the link is up
    assert views.span_title(result).startswith("2 samples every 0.1 s")
    text = views.csv_step_text(told[1].step, header=True) + views.csv_step_text(
        told[2].step, header=False
    )
    lines = text.splitlines()
    assert lines[0].startswith("sample,") and sum(1 for x in lines if x.startswith("sample,")) == 1
    assert {x.split(",")[0] for x in lines[1:]} == {"1", "2"}


def test_since_a_saved_reading_counts_what_happened_in_between(tmp_path):
    node(tmp_path, {"counters": {"symbol_error": 3}})
    first = run(CountersRequest(root=tmp_path))
    before = tmp_path / "before.json"
    before.write_text(render_json(first.report, first.meta))
    time.sleep(0.05)
    write(tmp_path, "mlx5_0", "symbol_error", 10)
    result = run(CountersRequest(root=tmp_path, since=before))
    assert result.span is not None and result.span.mode == "since"
    total = result.span.total(("mlx5_0", 1))
    assert total is not None and total.deltas["symbol_error"] == 7
    assert result.baseline is not None and result.baseline["host"] == HOST
    assert f"baseline {before}" in views.span_title(result)


def test_watching_yields_a_frame_per_sample_until_count(job):
    root, plan = job
    plan += [lambda: None, lambda: write(root, "mlx5_1", "symbol_error", 4)]
    with watching(CountersRequest(root=root, watch=True, interval_s=0.1, count=2)) as w:
        assert w.host == HOST and w.interval_s == 0.1
        frames = list(w.frames)
    assert [f.index for f in frames] == [1, 2]
    assert frames[0].report.status is Severity.OK
    assert frames[1].report.status is Severity.FAIL
    total = frames[1].span.total(("mlx5_1", 1))
    assert total is not None and total.deltas["symbol_error"] == 4


def test_a_watch_stopped_early_leaves_no_extracted_tree(tmp_path, monkeypatch):
    """A snapshot archive is extracted for the run: a caller that stops after one frame still gets
    the extracted tree removed when it leaves the block."""
    import tarfile
    import tempfile

    node(tmp_path / "n", {})
    archive = tmp_path / "n.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(tmp_path / "n" / "sys", arcname="sys")
        tar.add(tmp_path / "n" / "ibdiag-snapshot.json", arcname="ibdiag-snapshot.json")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    with watching(CountersRequest(root=archive, watch=True, interval_s=0.1)) as w:
        assert [p.name for p in scratch.iterdir()][0].startswith("ibdiag-root-")
        assert next(w.frames).index == 1 and w.host == HOST
    assert list(scratch.iterdir()) == []


@pytest.mark.parametrize(
    "request_kw,needle",
    [
        ({"interval_s": 0.01}, "--interval 0.01 is out of range"),
        ({"count": 3}, "--count needs --interval"),
        ({"interval_s": 1.0, "count": 0}, "--count 0 is out of range"),
        ({"since": Path("x.json"), "interval_s": 1.0}, "--since cannot be combined"),
        ({"far_end": lambda r: Addition(), "interval_s": 1.0}, "--far-end reads the far ends once"),
    ],
)
def test_meaningless_requests_are_usage_errors_before_anything_is_read(request_kw, needle):
    req = CountersRequest(root=Path("/nonexistent"), **request_kw)
    with pytest.raises(UsageError) as e:
        check(req)
    assert needle in e.value.message and e.value.hint
    with pytest.raises(UsageError):
        run(req)


def test_run_refuses_a_watch_and_a_node_without_ports():
    with pytest.raises(UsageError) as e:
        run(CountersRequest(root=FAULTY, watch=True))
    assert "watching" in (e.value.hint or "")
    with pytest.raises(CannotRunError) as c:
        run(CountersRequest(root=SYSFS_FIXTURES / "vm-no-rdma"))
    assert "no RDMA port" in c.value.message


def test_the_config_and_expected_rate_reach_the_judgement(tmp_path):
    node(tmp_path, {"rate": "200 Gb/sec (4X HDR)"}, {})
    slow = run(CountersRequest(root=tmp_path, expect_rate_gbps=400))
    assert any(
        f.check == "port.rate" and f.severity is not Severity.OK and f.subject == "mlx5_0:1"
        for f in slow.report.findings
    )
    cfg_file = tmp_path / "ibdiag.toml"
    cfg_file.write_text('[ports]\nignore = ["mlx5_0:1"]\n')
    ignored = run(
        CountersRequest(root=tmp_path, config=load_config(cfg_file), expect_rate_gbps=400)
    )
    assert not any(
        f.subject == "mlx5_0:1" and f.severity is not Severity.OK for f in ignored.report.findings
    )

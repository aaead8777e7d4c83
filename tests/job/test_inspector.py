"""Inspector's JSONL: records, bad lines, budgets; stragglers by bench collective's late-share method;
busbw against [job] min_busbw_gbs; the join through Inspector's host names."""

from __future__ import annotations

import json
import shutil

import pytest

from ibdiag.bench.collective.analysis import find_stragglers
from ibdiag.bench.results.collective_config import CollectiveConfig
from ibdiag.errors import InputError
from ibdiag.findings.model import Severity
from ibdiag.job.command import JobRequest, RasFile, run
from ibdiag.job.config import JobConfig
from ibdiag.job.inspector import MAX_LINE, parse_record, read_inspector
from ibdiag.job.timing import comm_timing
from tests.support.env import FIXTURES

NCCL = FIXTURES / "nccl"
LINE = (NCCL / "inspector-2.30.7" / "gpu03-pid55000.log").read_text().splitlines()[0]


def read(*paths, **kw):
    kw.setdefault("max_file_bytes", 1 << 30)
    kw.setdefault("max_records", 1 << 20)
    return read_inspector(paths, **kw)


def test_a_record_of_each_version():
    rec = parse_record(LINE.encode())
    assert rec.comm == "4e1d5c2b3a697088" and rec.name == "DP Group 0"
    assert (rec.rank, rec.nranks, rec.nnodes, rec.host, rec.pid) == (0, 16, 2, "gpu03", 55000)
    assert (rec.coll, rec.sn, rec.bytes, rec.gpu_timed) == ("AllReduce", 1, 256 << 20, True)
    old = (NCCL / "inspector-2.28.9" / "gpu03-pid55000.log").read_text().splitlines()[0]
    assert parse_record(old.encode()).name is None


def test_the_2_30_directory_stragglers_and_p2p():
    r = read(NCCL / "inspector-2.30.7")
    assert len(r.files) == 16 and len(r.records) == 16 * 36 and r.p2p == 1 and r.skipped == 0
    assert r.versions == ("v4.0",)
    (t,) = [comm_timing("4e1d5c2b3a697088", r.records, CollectiveConfig())]
    (s,) = t.stragglers
    assert (s.kind, s.ranks, s.rows_late, s.rows_judged) == ("rank", (4,), 3, 3)
    assert s.share == pytest.approx(0.35, abs=0.01)
    assert t.host_of(4) == ("gpu03", 55004)


def test_the_method_is_bench_collectives_own(monkeypatch):
    """job.timing calls bench collective's find_stragglers, not a copy of it."""
    import ibdiag.job.timing as timing

    calls = []

    def spy(rows, hosts, cfg):
        calls.append((len(rows), list(hosts)))
        return find_stragglers(rows, hosts, cfg)

    monkeypatch.setattr(timing, "find_stragglers", spy)
    r = read(NCCL / "inspector-2.30.7")
    timing.timings(r.records, CollectiveConfig())
    assert calls == [(3, ["gpu03"] * 8 + ["gpu04"] * 8)]


def test_no_straggler_in_2_28_and_a_low_busbw_warns():
    res = run(
        JobRequest(inspector=(NCCL / "inspector-2.28.9",), config=JobConfig(min_busbw_gbs=190))
    )
    by = {(f.check, f.severity) for f in res.findings}
    assert ("job.straggler", Severity.OK) in by
    low = [f for f in res.findings if f.check == "job.busbw" and f.severity is Severity.WARN]
    assert [f.message.split(": ")[1].split(" ran")[0] for f in low] == ["AllGather of 64 MiB"]
    assert low[0].value == pytest.approx(179.8, abs=0.1) and low[0].limit == 190
    assert res.busbw_gbs() == pytest.approx(193.6, abs=0.1)
    # below the size judged, nothing is said
    res = run(
        JobRequest(
            inspector=(NCCL / "inspector-2.28.9",),
            config=JobConfig(min_busbw_gbs=190, busbw_min_bytes=2 << 30),
        )
    )
    assert [f for f in res.findings if f.check == "job.busbw"] == []


def test_straggler_joined_to_ras_and_the_fabric():
    res = run(
        JobRequest(
            ras=RasFile(NCCL / "ras-2.30.7-healthy.json"),
            inspector=(NCCL / "inspector-2.30.7",),
            topo=tuple(sorted((NCCL / "topo").glob("*.json"))),
            fabric=FIXTURES / "fabric" / "rail-fat-tree-faulty",
        )
    )
    (s,) = [f for f in res.findings if f.check == "job.straggler" and f.severity is Severity.WARN]
    # no hosts file: RAS's address 10.20.0.3 is named gpu03 by Inspector's record of the same rank
    assert s.subject == "gpu03:GPU4"
    assert (
        "rank 4 (gpu03 (10.20.0.3) GPU 4, process 55004 -> mlx5_2 -> leaf-r2-1 port 3)" in s.message
    )
    (p,) = [f for f in res.findings if f.check == "job.path"]
    assert "straggler" in p.message and "symbol_error 57" in p.message


def test_inspector_alone_places_by_host_name():
    res = run(
        JobRequest(
            inspector=(NCCL / "inspector-2.30.7",),
            topo=tuple(sorted((NCCL / "topo").glob("*.json"))),
        )
    )
    (s,) = [f for f in res.findings if f.check == "job.straggler" and f.severity is Severity.WARN]
    assert s.subject == "gpu03:pid55004"  # Inspector does not say which GPU
    (joined,) = [f for f in res.findings if f.check == "job.join"]
    assert "1 on a known node, 0 on a NIC" in joined.message and "GPU not known" in joined.message


def test_bad_lines_are_skipped_and_counted(tmp_path):
    d = tmp_path / "insp"
    shutil.copytree(NCCL / "inspector-2.30.7", d)
    f = d / "gpu03-pid55001.log"
    lines = f.read_text().splitlines()
    doc = json.loads(lines[0])
    doc["coll_perf"]["coll_busbw_gbs"] = "nan"
    nan_line = json.dumps(doc)
    doc["metadata"]["hostname"] = "evil\x1b[2J"
    evil = json.dumps(doc)
    lines[1:1] = [
        "not json",
        '{"header": {}}',
        nan_line,
        evil,
        "x" * (MAX_LINE + 10),
        '{"a":' * 40 + "1" + "}" * 40,
        json.dumps(
            {**json.loads(lines[0]), "header": {**json.loads(lines[0])["header"], "rank": 99}}
        ),
        "",
    ]
    f.write_text("\n".join(lines) + "\n")
    r = read(d)
    assert r.skipped == 6
    assert len(r.records) == 16 * 36 + 1  # the nan line is a record, its busbw unknown
    assert any(x.busbw_gbs is None for x in r.records)
    assert len(r.problems) == 5 and all("\x1b" not in p for p in r.problems)
    res = run(JobRequest(inspector=(d,)))
    (ins,) = [x for x in res.findings if x.check == "job.inspector"]
    assert ins.severity is Severity.WARN and "6 line(s) skipped" in ins.message


def test_budgets(tmp_path):
    with pytest.raises(InputError, match="more than the 1000 bytes"):
        read(NCCL / "inspector-2.30.7", max_file_bytes=1000)
    r = read(NCCL / "inspector-2.30.7", max_records=100)
    assert r.truncated and len(r.records) == 100
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InputError, match="no Inspector file"):
        read(empty)
    (empty / "x.log").write_text("garbage\n")
    with pytest.raises(InputError, match="no Inspector record"):
        read(empty)
    with pytest.raises(InputError, match="cannot read|No such"):
        read(tmp_path / "absent.log")


def test_a_rank_missing_from_a_communicator_is_said(tmp_path):
    d = tmp_path / "insp"
    shutil.copytree(NCCL / "inspector-2.30.7", d)
    (d / "gpu04-pid55015.log").unlink()
    res = run(JobRequest(inspector=(d,)))
    (ins,) = [x for x in res.findings if x.check == "job.inspector"]
    assert "15 of 16" in ins.message and ins.severity is Severity.WARN
    # the late rank is still found among the 15 that wrote
    assert any(f.check == "job.straggler" and f.severity is Severity.WARN for f in res.findings)

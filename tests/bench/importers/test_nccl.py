"""nccl-tests logs -> BenchRun: literal snippets of every format era and the awkward cases, then fixtures."""

from __future__ import annotations

import gzip
import importlib.util
import json

import pytest

from ibdiag.bench import importers
from ibdiag.bench.importers.checks import import_findings
from ibdiag.collectives import OPS, op_in_text
from ibdiag.errors import InputError
from ibdiag.findings.model import Severity
from tests.support.env import FIXTURES

LOGS = FIXTURES / "logs"

MODERN = """\
# nThread 1 nGpus 1 minBytes 1048576 maxBytes 2097152 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid   1001 on     node01 device  0 [0x18] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid   1002 on     node02 device  0 [0x18] NVIDIA H100 80GB HBM3
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)
     1048576        262144     float     sum      -1    52.43   20.00   20.00       0    52.43   20.00   20.00       0
     2097152        524288     float     sum      -1    83.89   25.00   25.00       0    87.38   24.00   24.00       0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 22.25
#
"""


def test_modern_rows_and_header():
    run = importers.parse_text(MODERN, "m.log")
    assert run.kind == "collective"
    assert [
        (r.bytes, r.in_place, r.time_us, r.algbw_gbs, r.busbw_gbs, r.wrong) for r in run.results
    ] == [
        (1048576, False, 52.43, 20.0, 20.0, 0),
        (1048576, True, 52.43, 20.0, 20.0, 0),
        (2097152, False, 83.89, 25.0, 25.0, 0),
        (2097152, True, 87.38, 24.0, 24.0, 0),
    ]
    r0 = run.results[0]
    assert (r0.count, r0.dtype, r0.redop, r0.root) == (262144, "float", "sum", None)
    m, log = run.meta, run.meta.nccl_tests
    assert (m.op, log.op_source) == (
        "all_reduce",
        "inferred from the table",
    )  # redop sum, count x 4 B == size
    assert (m.world_size, m.ranks_per_node, m.nodes, m.hosts) == (2, 1, 2, ("node01", "node02"))
    assert log.ranks[1].to_json() == {
        "rank": 1,
        "group": 0,
        "pid": 1002,
        "host": "node02",
        "device": 0,
        "bus_id": "0x18",
        "gpu": "NVIDIA H100 80GB HBM3",
    }
    assert m.avg_busbw_gbs == pytest.approx(22.25) and log.avg_busbw_gbs_reported == 22.25
    assert (run.provenance.imported.format, log.complete, log.out_of_bounds) == (
        "2022-2025",
        True,
        0,
    )
    assert (
        log.params["iters"] == 20
        and log.params["warmup_iters"] == 5
        and log.params["agg_iters"] == 1
    )


OLD = """\
# nThread 1 nGpus 8 minBytes 8 maxBytes 16 step: 2(factor) warmup iters: 5 iters: 20 validation: 1
#
# Using devices
#   Rank  0 Pid  12345 on    oldnode device  0 [0x07] Tesla V100-SXM2-32GB
#   Rank  1 Pid  12345 on    oldnode device  1 [0x0a] Tesla V100-SXM2-32GB
#
#                                                     out-of-place                       in-place
#       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  error
#        (B)    (elements)                     (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
           8             2   float     sum    21.10    0.00    0.00  2e-07    20.63    0.00    0.00  0e+00
          16             4   float     sum    20.91    0.00    0.00  0e+00    21.02    0.00    0.00  0e+00
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 0
#
"""


def test_before_2022_float_error_column_and_no_root():
    run = importers.parse_text(OLD, "old.log")
    assert run.provenance.imported.format == "before 2022"
    assert [r.wrong for r in run.results] == [None] * 4
    assert [r.max_error for r in run.results] == [2e-07, 0.0, 0.0, 0.0]
    assert {r.root for r in run.results} == {None}
    # -g 8 in one process: two rank lines with the same pid are two ranks
    assert run.meta.world_size == 2 and run.meta.ranks_per_node == 2


NEW_2025 = """\
# nccl-tests version 2.17.1 nccl-headers=22703 nccl-library=22703
# Collective test starting: all_gather_perf
# nThread 1 nGpus 1 minBytes 4096 maxBytes 4096 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0 unalign: 0
#
# Using devices
#  Rank  0 Group  0 Pid   9001 on       gpu1 device  0 [000f:01:00] NVIDIA H200
#  Rank  1 Group  0 Pid   9002 on       gpu1 device  1 [000f:02:00] NVIDIA H200
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)
        4096           512     float    none      -1    10.24    0.40    0.20       0    10.24    0.40    0.20       0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 0.2
#
# Collective test concluded: all_gather_perf
"""


def test_2025_version_starting_line_and_pci_ids():
    run = importers.parse_text(NEW_2025, "x.log")
    m, log = run.meta, run.meta.nccl_tests
    assert (
        run.provenance.imported.format,
        m.op,
        log.op_source,
        run.provenance.nccl_tests_version,
    ) == ("2025", "all_gather", "header", "2.17.1")
    assert log.ranks[1].bus_id == "000f:02:00"
    assert log.params["unalign"] == 0
    assert run.results[0].redop is None


def test_sendrecv_na_wrong_is_none():
    text = MODERN.replace(
        "     sum      -1    83.89   25.00   25.00       0    87.38   24.00   24.00       0",
        "    none      -1    83.89   25.00   25.00       0    87.38   24.00   24.00     N/A",
    )
    run = importers.parse_text(text, "s.log")
    assert [r.wrong for r in run.results][-2:] == [0, None]


def test_timestamp_and_cputime_columns():
    text = MODERN.replace("  #wrong\n#        (B)", "  #wrong timestamp\n#        (B)", 1).replace(
        "#wrong     time", "#wrong  cputime"
    )
    text = text.replace("24.00       0\n", "24.00       0  2026-03-01 10:11:12\n")
    run = importers.parse_text(text, "t.log")
    assert run.results[-1].busbw_gbs == 24.0 and len(run.results) == 4


def test_blank_out_of_place_half():
    # nccl-tests leaves the out-of-place half blank in some modes: only the in-place half is read
    text = MODERN.replace(
        "    52.43   20.00   20.00       0    52.43", "                                    52.43"
    )
    run = importers.parse_text(text, "b.log")
    assert [(r.bytes, r.in_place) for r in run.results][:1] == [(1048576, True)]
    assert len(run.results) == 3


def test_exponent_and_large_wrong_counts():
    text = MODERN.replace(
        "    83.89   25.00   25.00       0", "  1.2e+08   25.00   25.00  1.04858e+06"
    )
    run = importers.parse_text(text, "e.log")
    r = [x for x in run.results if x.bytes == 2097152 and not x.in_place][0]
    assert r.time_us == 1.2e8 and r.wrong == 1048580


@pytest.mark.parametrize(
    ("prefix", "tag"),
    [("[1,0]<stdout>:", "1,0"), ("[0] ", "0"), ("0: ", "0")],
)
def test_launcher_prefixes(prefix, tag):
    text = "".join(prefix + ln + "\n" for ln in MODERN.splitlines())
    run = importers.parse_text(text, "p.log")
    assert len(run.results) == 4 and run.provenance.imported.tag == tag


def test_nccl_debug_lines_are_skipped_and_warnings_kept():
    lines = MODERN.splitlines()
    lines.insert(3, "node01:1001:1001 [0] NCCL INFO Bootstrap : Using ib0:10.0.0.1<0>")
    lines.insert(
        4,
        "node02:1002:1044 [0] NCCL WARN NET/IB : Got completion with error 12, opcode 0, len 0, vendor err 129",
    )
    lines.insert(5, "NCCL version 2.18.5+cuda12.2")
    run = importers.parse_text("\n".join(lines) + "\n", "d.log")
    assert run.provenance.nccl_warning_count == 1 and "line 5" in run.provenance.nccl_warnings[0]
    assert run.provenance.nccl_version == "2.18.5+cuda12.2"


def test_a_line_that_is_not_the_tables_is_skipped_and_counted():
    lines = MODERN.splitlines()
    lines.insert(10, "Segmentation fault (core dumped)")
    run = importers.parse_text("\n".join(lines), "noise.log")
    assert run.results == importers.parse_text(MODERN, "bare.log").results
    assert run.provenance.skipped_lines == 1


def test_row_with_a_missing_column():
    text = MODERN.replace("    87.38   24.00   24.00       0\n", "    87.38   24.00\n")
    with pytest.raises(InputError) as e:
        importers.parse_text(text, "c.log")
    assert "c.log:11:" in e.value.message and "expected 13 columns" in e.value.message


def test_not_a_number():
    with pytest.raises(InputError) as e:
        importers.parse_text(
            MODERN.replace(
                "   20.00   20.00       0    52.43", "   20.00   abc       0    52.43", 1
            ),
            "n.log",
        )
    assert "n.log:10:" in e.value.message and "busbw" in e.value.message


def test_a_failed_run_is_read_with_its_failure_line_and_fails(tmp_path):
    text = (
        MODERN.split("     2097152")[0]
        + "node01: Test NCCL failure common.cu:958 'unhandled cuda error'\n"
        + "node02: Test NCCL failure common.cu:958 'unhandled cuda error'\n"
    )
    run = importers.parse_text(text, "f.log")
    assert run.provenance.failure.startswith("line 11: node01: Test NCCL failure common.cu:958")
    assert len(run.results) == 2  # the row printed before the failure is kept
    failed = [f for f in import_findings(run) if f.check == "import.run_failed"]
    assert failed and failed[0].severity is Severity.FAIL and "line 11" in failed[0].message
    with pytest.raises(InputError) as e:  # verdict's reader: a failed run is no measurement
        (tmp_path / "f.log").write_text(text)
        importers.load(tmp_path / "f.log")
    assert "the run failed" in e.value.message


def test_rows_without_their_header_are_read_by_shape_and_said_so():
    run = importers.parse_text(
        "# nThread 1 nGpus 1 minBytes 8\n     8   2  float  sum  -1  1.0  0.0  0.0  0  1.0  0.0  0.0  0\n",
        "r.log",
    )
    assert run.meta.nccl_tests.header == "cut: from the rows" and len(run.results) == 2
    with pytest.raises(InputError) as e:  # a row-shaped line that is no table row of any era
        importers.parse_text(
            "# nThread 1 nGpus 1 minBytes 8\n     8   2  float  sum  -1  1.0\n", "r.log"
        )
    assert "no result rows" in e.value.message


def test_two_runs_one_after_the_other_are_separate():
    runs = importers.parse_runs(MODERN + NEW_2025, "two.log")
    assert [r.meta.op for r in runs] == ["all_reduce", "all_gather"]
    assert [r.provenance.imported.position.separation for r in runs] == ["one after the other"] * 2
    assert [
        (r.provenance.imported.position.index, r.provenance.imported.position.count) for r in runs
    ] == [(1, 2), (2, 2)]
    with pytest.raises(InputError) as e:
        importers.parse_text(MODERN + NEW_2025, "two.log")
    assert (
        "2 runs" in e.value.message
        and "not averaged" in e.value.message
        and "--run" in e.value.hint
    )


def test_interleaved_untagged_runs_are_separated_by_order():
    runs = importers.parse_runs(
        (LOGS / "nccl-tests-nompi-interleaved_all_reduce_perf.log").read_text(), "i.log"
    )
    assert len(runs) == 2
    for r, pid in zip(runs, (7301, 7302), strict=False):
        assert "interleaved" in r.provenance.imported.position.separation
        assert r.meta.world_size == 1 and r.meta.nccl_tests.ranks[0].pid == pid
        sizes = [x.bytes for x in r.results if not x.in_place]
        assert sizes == sorted(sizes) and len(sizes) == 6  # every size once, in order
        assert r.meta.avg_busbw_gbs == pytest.approx(
            r.meta.nccl_tests.avg_busbw_gbs_reported, abs=0.01
        )
    with pytest.raises(InputError) as e:
        importers.load(LOGS / "nccl-tests-nompi-interleaved_all_reduce_perf.log")
    assert "2 runs" in e.value.message and "MPI=1" in e.value.hint


def test_interleaved_tagged_runs_are_separated_by_tag():
    runs = importers.parse_runs(
        (LOGS / "nccl-tests-nompi-tagged_all_reduce_perf.log").read_text(), "t.log"
    )
    assert [(r.provenance.imported.tag, r.meta.nccl_tests.ranks[0].pid) for r in runs] == [
        ("1,1", 7402),
        ("1,0", 7401),
    ]
    assert {r.provenance.imported.position.separation for r in runs} == {"one run per output tag"}
    assert all(len(r.results) == 12 for r in runs)


@pytest.mark.parametrize(
    ("body", "op", "cands"),
    [
        ("     1048576        262144     float     sum      -1", "all_reduce", []),
        ("     1048576        131072     float     sum      -1", "reduce_scatter", []),
        ("     1048576        262144     float    none       0", "broadcast", []),
        ("     1048576        262144     float     sum       0", "reduce", []),
        ("     1048576        262144     float    none      -1", "sendrecv", []),
        (
            "     1048576        131072     float    none      -1",
            None,
            ["all_gather", "all_to_all"],
        ),
    ],
)
def test_op_inferred_from_the_table(body, op, cands):
    text = (
        MODERN.split("     1048576")[0]
        + body
        + "    52.43   20.00   20.00       0    52.43   20.00   20.00       0\n"
    )
    run = importers.parse_text(text, "x.log")
    assert run.meta.op == op
    assert list(run.meta.nccl_tests.op_candidates) == cands


def test_op_from_option_and_file_name():
    amb = (LOGS / "nccl-tests-rank-prefix.log").read_text()
    assert importers.parse_text(amb, "x.log").meta.op is None
    assert importers.parse_text(amb, "x.log", op="alltoall").meta.op == "all_to_all"
    run = importers.parse_text(amb, "x.log", file_name="alltoall_perf-8n.log")
    assert (run.meta.op, run.meta.nccl_tests.op_source) == ("all_to_all", "file name")
    assert op_in_text("reduce_scatter_perf") == "reduce_scatter"
    assert op_in_text("logs/allreduce.txt") == "all_reduce"


def test_json_output():
    run = importers.load(LOGS / "nccl-tests-json_reduce_scatter.json")
    m = run.meta
    assert (m.op, m.nccl_tests.op_source, m.world_size, run.provenance.imported.format) == (
        "reduce_scatter",
        "header",
        8,
        "json v2",
    )
    assert len(run.results) == 10 and run.results[0].root is None and run.results[1].in_place
    assert m.avg_busbw_gbs == pytest.approx(m.nccl_tests.avg_busbw_gbs_reported, rel=1e-6)


def test_gzip_and_errors_reading_files(tmp_path):
    gz = tmp_path / "all_reduce.log.gz"
    gz.write_bytes(gzip.compress(MODERN.encode()))
    assert len(importers.load(gz).results) == 4
    with pytest.raises(InputError, match="no such file"):
        importers.load(tmp_path / "missing.log")
    with pytest.raises(InputError, match="directory"):
        importers.load(tmp_path)
    (tmp_path / "bin").write_bytes(b"\x7fELF\x00\x00\x01")
    with pytest.raises(InputError, match="binary"):
        importers.load(tmp_path / "bin")
    (tmp_path / "empty").write_text("\n\n")
    with pytest.raises(InputError, match="empty"):
        importers.load(tmp_path / "empty")
    (tmp_path / "other").write_text("hello world\n")
    with pytest.raises(
        InputError,
        match=r"other: no benchmark table found: neither nccl-tests nor perftest output \(first line 1",
    ):
        importers.load(tmp_path / "other")


def test_header_without_rows():
    with pytest.raises(InputError, match="no result rows"):
        importers.parse_text(MODERN.split("     1048576")[0], "h.log")


def test_ibdiag_json_is_read_back():
    run = importers.parse_text(MODERN, "m.log")
    doc = {
        "schema": "ibdiag.bench/1",
        "version": "0",
        "host": "h",
        "generated_at": "t",
        "status": "ok",
        "findings": [],
        **run.to_data(),
    }
    back = importers.parse_text(json.dumps(doc), "saved.json")
    assert back.results == run.results and back.meta.op == "all_reduce"


# --- the fixtures: each era parses, and the arithmetic in them holds -----------------------------------

ERAS = [
    ("nccl-tests-2021_all_reduce_perf.log", "all_reduce", 16, "before 2022", 25),
    ("nccl-tests-2023_all_gather_perf.log", "all_gather", 16, "2022-2025", 19),
    ("nccl-tests-2025_all_reduce_perf.log", "all_reduce", 32, "2025", 31),
    ("nccl-tests-2023_sendrecv_perf.log", "sendrecv", 8, "2022-2025", 7),
    ("nccl-tests-tag-output_all_reduce_perf.log", "all_reduce", 16, "2022-2025", 11),
    ("nccl-tests-wrong_all_reduce_perf.log", "all_reduce", 8, "2022-2025", 5),
]


@pytest.mark.parametrize(("name", "op", "n", "era", "sizes"), ERAS)
def test_fixture_eras(name, op, n, era, sizes):
    run = importers.load(LOGS / name)
    m = run.meta
    assert (m.op, m.world_size, run.provenance.imported.format, m.nccl_tests.complete) == (
        op,
        n,
        era,
        True,
    )
    assert len(run.results) == 2 * sizes
    f = OPS[op].busbw_factor(n)
    for r in run.results:
        assert r.busbw_gbs == pytest.approx(r.algbw_gbs * f, abs=0.011 * max(1.0, f))
        assert r.algbw_gbs == pytest.approx(r.bytes / r.time_us / 1e3, rel=0.01, abs=0.011)
    assert m.avg_busbw_gbs == pytest.approx(m.nccl_tests.avg_busbw_gbs_reported, abs=0.006)


def test_fixtures_are_what_the_generator_writes(tmp_path):
    spec = importlib.util.spec_from_file_location("logs_generate", LOGS / "generate.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)  # type: ignore[union-attr]
    for name, text in gen.render_all().items():
        assert (LOGS / name).read_bytes() == text.encode(), (
            f"{name} is stale: run python fixtures/logs/generate.py"
        )

"""Logs of every shape (issue 26): each fixture imports to the right op, rows, sizes, transport and findings.

The fixtures are written by ``fixtures/logs/shapes.py`` (through ``generate.py``), one per shape and
named after it; each is read through the real file path and its findings are the import's own
(``import_findings``). The transport cases also go through ``ibdiag bench import`` and
``ibdiag verdict --nccl-tests`` (exit status and check ids).
"""

from __future__ import annotations

import json

import pytest

from ibdiag.bench import importers
from ibdiag.bench.importers import perftest
from ibdiag.bench.importers.checks import import_findings
from ibdiag.bench.importers.context import Context, node_list
from ibdiag.bench.importers.lines import Line, clean, row_tokens, tagged
from ibdiag.collectives import find_op, op_in_text
from ibdiag.errors import InputError
from tests.support.env import FIXTURES

LOGS = FIXTURES / "logs"
BARE = importers.load(LOGS / "nccl-tests-bare_all_reduce_perf.log")


def _runs(name: str):
    runs, _ = importers.read_runs(LOGS / name)
    return runs


def _one(name: str):
    runs = _runs(name)
    assert len(runs) == 1, name
    return runs[0]


def _failing(run) -> list[str]:
    return sorted(f.check for f in import_findings(run) if f.severity.name == "FAIL")


# name -> (op, op_source, row halves, world size, failing check ids); rows equal to the bare table's
# where the fixture wraps it (None: checked by count only)
NCCL_SHAPES = {
    "nccl-tests-shape-srun-label-and-rank-label_all_reduce_perf.log": ("all_reduce", "file name", "bare", 16, []),
    "nccl-tests-shape-tag-output-and-rank-label_all_reduce_perf.log": ("all_reduce", "file name", "bare", 16, []),
    "nccl-tests-shape-label-inside-rows_all_reduce_perf.log": ("all_reduce", "file name", "bare", 16, []),
    "nccl-tests-shape-info-splits-rows_all_reduce_perf.log": ("all_reduce", "file name", "bare", 16, []),
    "nccl-tests-shape-markdown-bold_all_reduce_perf.log": ("all_reduce", "file name", "bare", 16, []),
    "nccl-tests-shape-no-hash-2021-oob-failed_all_gather_perf.log": (
        "all_gather",
        "file name",
        32,
        16,
        ["import.out_of_bounds"],
    ),
    "nccl-tests-shape-zero-byte-rows.log": ("all_to_all", "header", 14, 64, []),
    "nccl-tests-shape-op-spelling_reduce-scatter.log": ("reduce_scatter", "file name", 12, None, []),
    "nccl-tests-shape-op-from-table_named-all_reduce.log": (
        "broadcast",
        "inferred from the table (the file name says all_reduce)",
        14,
        16,
        [],
    ),
    "nccl-tests-shape-test-nccl-failure_all_reduce_perf.log": (
        "all_reduce",
        "file name",
        6,
        16,
        ["import.network_error", "import.run_failed"],
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(NCCL_SHAPES))
def test_nccl_shapes(name):
    op, source, rows, world, failing = NCCL_SHAPES[name]
    run = _one(name)
    m = run.meta
    assert (m.op, m.nccl_tests.op_source, m.world_size) == (op, source, world)
    if rows == "bare":
        assert run.results == BARE.results
        assert m.avg_busbw_gbs == pytest.approx(m.nccl_tests.avg_busbw_gbs_reported, abs=0.006)
    else:
        assert len(run.results) == rows
    assert _failing(run) == failing


def test_stacked_labels_name_the_outer_writer():
    assert (
        _one(
            "nccl-tests-shape-srun-label-and-rank-label_all_reduce_perf.log"
        ).provenance.imported.tag
        == "0"
    )
    assert (
        _one(
            "nccl-tests-shape-tag-output-and-rank-label_all_reduce_perf.log"
        ).provenance.imported.tag
        == "1,0"
    )
    assert tagged(clean("0: [0] # nThread 1")) == ("# nThread 1", "0")
    assert row_tokens("1024 256 float sum -1 [0] 29.86 0: 0.03 [1,2]<stdout>: 0.06") == [
        "1024", "256", "float", "sum", "-1", "29.86", "0.03", "0.06",
    ]  # fmt: skip


def test_rows_split_by_nccl_lines_are_joined_and_the_lines_read():
    run = _one("nccl-tests-shape-info-splits-rows_all_reduce_perf.log")
    path = run.provenance.nccl_path
    assert (path.transport, path.gdr, path.hosts) == ("IB", True, ("node01", "node02"))
    assert path.gdr_source.startswith("line 39: Channel 01/0")  # the line a row ran into


def test_markdown_emphasis_is_stripped():
    run = _one("nccl-tests-shape-markdown-bold_all_reduce_perf.log")
    assert run.meta.nccl_tests.avg_busbw_gbs_reported == BARE.meta.nccl_tests.avg_busbw_gbs_reported
    assert clean("  **5544.28**  *1.5*  __7__  `42`  a_b*c") == "  5544.28  1.5  7  42  a_b*c"
    p = _one("perftest-shape-markdown-bold_ib_write_bw.log")
    assert len(p.results) == 1 and p.results[0].bw_gbs == pytest.approx(5544.28 * 2**20 / 1e9)


def test_no_hash_header_and_footer_and_eleven_cell_rows():
    run = _one("nccl-tests-shape-no-hash-2021-oob-failed_all_gather_perf.log")
    log = run.meta.nccl_tests
    assert (log.out_of_bounds, log.complete, log.header, run.provenance.imported.format) == (
        2,
        True,
        None,
        "before 2022",
    )
    assert run.results[0].redop is None and run.results[0].root is None
    assert [r.max_error for r in run.results if r.max_error] == [1.0, 1.0]


def test_a_paste_of_two_runs_imports_each_and_an_empty_redop_cell_is_no_reduction():
    runs = _runs("nccl-tests-shape-all-reduce-then-alltoall-empty-redop.log")
    assert [(r.meta.op, r.meta.nccl_tests.op_source, len(r.results)) for r in runs] == [
        ("all_reduce", "command line", 10),
        ("all_to_all", "command line", 10),
    ]
    assert runs[1].results[0].redop is None and importers.separate_runs(runs)
    assert [_failing(r) for r in runs] == [[], []]


def test_zero_byte_rows_are_rows_and_cycles_need_a_marker():
    run = _one("nccl-tests-shape-zero-byte-rows.log")
    assert [r.bytes for r in run.results if not r.in_place] == [0, 0, 0, 0, 0, 256, 512]
    assert run.meta.nccl_tests.cycles is None
    assert run.meta.avg_busbw_gbs == pytest.approx(
        run.meta.nccl_tests.avg_busbw_gbs_reported, abs=0.006
    )
    # the same size again is a cycle when the command line says -N
    row = "     4194304       1048576     float     sum      -1    53.30   78.69  147.54       0    53.97   77.72  145.72       0\n"
    head = "# nThread 1 nGpus 1 minBytes 4194304 maxBytes 4194304 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0\n"
    with_n = importers.parse_text(
        "$ ./all_reduce_perf -b 4M -e 4M -N 3\n" + head + row * 3, "n.log"
    )
    without = importers.parse_text(head + row * 3, "n.log")
    assert (with_n.meta.nccl_tests.cycles, len(with_n.results)) == (3, 2)
    assert (without.meta.nccl_tests.cycles, len(without.results)) == (None, 6)


def test_op_spellings():
    for text in ("reduce-scatter", "ReduceScatter", "reduce scatter", "logs/reduce_scatter.log"):
        assert op_in_text(text) == "reduce_scatter", text
    assert op_in_text("all-to-all") == "all_to_all" and op_in_text("reduce.log") == "reduce"
    assert (
        find_op("ReduceScatter").name == "reduce_scatter"
        and find_op("All-Reduce").name == "all_reduce"
    )


def test_the_table_decides_over_a_file_name_it_contradicts():
    run = importers.parse_runs(
        (LOGS / "nccl-tests-2023_sendrecv_perf.log").read_text(),
        "x.log",
        file_name="all_reduce.log",
    )[0]
    assert (run.meta.op, run.meta.nccl_tests.op_source) == (
        "sendrecv",
        "inferred from the table (the file name says all_reduce)",
    )


def test_nccl_failure_is_the_result():
    run = _one("nccl-tests-shape-test-nccl-failure_all_reduce_perf.log")
    assert run.provenance.failure.startswith("line 29: node02: Test NCCL failure common.cu:1005")
    assert not run.meta.nccl_tests.complete
    msg = next(f.message for f in import_findings(run) if f.check == "import.run_failed")
    assert "after 6 result rows" in msg


@pytest.mark.parametrize(
    ("name", "failure", "rows", "test"),
    [
        ("perftest-shape-couldnt-connect_ib_write_bw.log", "line 2: Couldn't connect to 10.0.0.2:18515", 0, "ib_write_bw"),
        ("perftest-shape-modify-qp-rtr_ib_write_bw.log", "line 23: Failed to modify QP 265 to RTR", 0, "ib_write_bw"),
        ("perftest-shape-completion-error_ib_write_bw.log", "line 22: Completion with error at client", 2, "ib_write_bw"),
    ],
)  # fmt: skip
def test_perftest_error_lines_are_the_result(name, failure, rows, test):
    run = _one(name)
    assert (run.provenance.failure, len(run.results), run.meta.perftest.test) == (
        failure,
        rows,
        test,
    )
    assert _failing(run) == ["import.run_failed"]


def test_nothing_to_read_is_still_refused():
    with pytest.raises(InputError, match="no benchmark table found"):
        importers.parse_runs("hello\nworld\n", "x.log")
    assert perftest.marks(Line(1, "Couldn't connect to 10.0.0.2:18515", None))


# name -> (transport, where it came from (start), gdr, socket_fallback expected)
TRANSPORTS = {
    "nccl-tests-transport-ib-disable-no-info_all_reduce_perf.log": ("Socket", "command line: NCCL_IB_DISABLE=1", False, True),
    "nccl-tests-transport-libibverbs-warn-hosts-in-prefixes_all_reduce_perf.log": ("Socket", "line 1: NCCL WARN Failed to open libibverbs", False, True),
    "nccl-tests-transport-gdr1-on-socket_all_reduce_perf.log": ("Socket", "line 22: Using network Socket", False, True),
    "nccl-tests-transport-net-socket-env-srun-nodelist_all_reduce_perf.log": ("Socket", "line 2: NCCL_NET=Socket", False, True),
    "nccl-tests-transport-ibext-plugin_all_reduce_perf.log": ("IB", "line 23: Using network IBext_v8", True, False),
    "nccl-tests-transport-ofi_all_reduce_perf.log": ("OFI", "line 23: Using network AWS Libfabric", True, False),
    "nccl-tests-transport-gdr-level-loc_all_reduce_perf.log": ("IB", "line 22: Using network IB", False, False),
    "nccl-tests-noise-socket-fallback_all_reduce_perf.log": ("Socket", "line 26: Using network Socket", False, True),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(TRANSPORTS))
def test_transport_from_every_signal(name):
    transport, source, gdr, fails = TRANSPORTS[name]
    run = _one(name)
    path = run.provenance.nccl_path
    assert (path.transport, path.gdr) == (transport, gdr)
    assert path.transport_source.startswith(source), path.transport_source
    assert ("import.socket_fallback" in _failing(run)) is fails
    if fails:
        finding = next(f for f in import_findings(run) if f.check == "import.socket_fallback")
        assert source in finding.message and "2 nodes" in finding.message


def test_hosts_named_anywhere_count_as_nodes():
    prefixes = _one("nccl-tests-transport-libibverbs-warn-hosts-in-prefixes_all_reduce_perf.log")
    assert prefixes.meta.nodes is None and prefixes.provenance.nccl_path.hosts == (
        "node01",
        "node02",
    )
    srun = _one("nccl-tests-transport-net-socket-env-srun-nodelist_all_reduce_perf.log")
    assert srun.provenance.command.hosts == ("node01", "node02") and srun.meta.nodes == 2
    assert node_list("gpu[001-003,007],login1") == (
        ["gpu001", "gpu002", "gpu003", "gpu007", "login1"],
        5,
    )
    # a job of more names than a log's command keeps is counted, not expanded; a bad list names none
    assert node_list("gpu[00001-16384]") == ([], 16384)
    assert node_list("gpu[1-\u00b2]") == ([], 0)


def test_plugin_names_and_gdr_level():
    ibext = _one("nccl-tests-transport-ibext-plugin_all_reduce_perf.log").provenance.nccl_path
    assert (ibext.net_plugin, ibext.devices) == (
        "NCCL RDMA Plugin v8",
        ("mlx5_0:1/IB", "mlx5_1:1/IB"),
    )
    loc = _one("nccl-tests-transport-gdr-level-loc_all_reduce_perf.log").provenance.nccl_path
    assert loc.gdr_source == "command line: NCCL_NET_GDR_LEVEL=LOC"


def test_environment_lines_and_a_requested_transport():
    ctx = Context()
    lines = list(ctx.table_lines(["export NCCL_IB_HCA=mlx5_0,mlx5_1", "some other line"]))
    assert [ln.text for ln in lines] == ["some other line"]
    path = ctx.nccl_path()
    assert (path.transport, path.devices, path.info_lines) == ("IB", ("mlx5_0", "mlx5_1"), 0)
    assert "requested" in path.transport_source
    ctx = Context()
    list(ctx.table_lines(["node01:1:1 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 1."]))
    assert (ctx.nccl_path().transport, ctx.nccl_path().transport_source[:7]) == (
        "Socket",
        "line 1:",
    )


def test_cli_exit_status_by_shape(cli):
    res = cli(
        "bench",
        "import",
        LOGS / "nccl-tests-transport-ib-disable-no-info_all_reduce_perf.log",
        "-o",
        "json",
    )
    doc = json.loads(res.stdout)
    assert res.exit_code == 1 and "import.socket_fallback" in {f["check"] for f in doc["findings"]}
    assert doc["nccl_path"]["transport_source"] == "command line: NCCL_IB_DISABLE=1"
    res = cli("bench", "import", LOGS / "perftest-shape-couldnt-connect_ib_write_bw.log")
    assert res.exit_code == 1 and "Couldn't connect to 10.0.0.2:18515" in res.stdout
    res = cli(
        "bench",
        "import",
        LOGS / "nccl-tests-shape-all-reduce-then-alltoall-empty-redop.log",
        "-o",
        "json",
    )
    assert res.exit_code == 0, res.stderr
    assert [r["op"] for r in json.loads(res.stdout)["runs"]] == ["all_reduce", "all_to_all"]
    res = cli("bench", "import", LOGS / "nccl-tests-shape-all-reduce-then-alltoall-empty-redop.log")
    assert res.exit_code == 0 and "run 2 of 2" in res.stdout
    res = cli("bench", "import", LOGS / "nccl-tests-nompi-interleaved_all_reduce_perf.log")
    assert res.exit_code == 2  # interleaved runs are still refused


def test_verdict_counts_a_socket_run_however_it_is_told(cli):
    res = cli(
        "verdict", "--params", "8e9", "--dtype", "bf16", "--ranks", "16", "--ranks-per-node", "8",
        "--compute-s", "0.5", "--nccl-tests",
        LOGS / "nccl-tests-transport-ib-disable-no-info_all_reduce_perf.log", "-o", "json",
    )  # fmt: skip
    assert "import.socket_fallback" in res.stdout, res.stdout + res.stderr

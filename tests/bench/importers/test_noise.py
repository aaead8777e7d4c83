"""Logs as people capture them (issue 10): every noise kind has a fixture, read to the bare table's rows.

The fixtures are written by ``fixtures/logs/generate.py`` (``noisy_logs.py``); each wraps the bare
table in one kind of noise. Each is read through the real file path (``importers.read_runs``), and
its op, sizes, rank count and provenance are checked against what the fixture reproduces.
"""

from __future__ import annotations

import pytest

from ibdiag.bench import importers
from ibdiag.bench.importers.checks import import_findings
from ibdiag.errors import InputError
from tests.support.env import FIXTURES

LOGS = FIXTURES / "logs"
BARE_NCCL = importers.load(LOGS / "nccl-tests-bare_all_reduce_perf.log")
BARE_PERFTEST = importers.load(LOGS / "perftest-bare_ib_write_bw-gbits.log")


def _one(name: str):
    runs, _ = importers.read_runs(LOGS / name)
    assert len(runs) == 1, name
    return runs[0]


def _cmd(run):
    assert run.provenance.command is not None
    return run.provenance.command


# name -> (op, op source, world size, a check of its provenance)
NCCL_CASES = {
    "nccl-tests-noise-prompt-command.log": (
        "all_reduce",
        "command line",
        16,
        lambda r: (
            _cmd(r).options
            == {"min_bytes": 1024, "max_bytes": 268435456, "step_factor": 2, "gpus_per_thread": 1}
            and (_cmd(r).launcher, _cmd(r).ranks, _cmd(r).hosts, _cmd(r).nodes, dict(_cmd(r).env))
            == (
                "mpirun",
                16,
                ("node01", "node02"),
                2,
                {"NCCL_IB_HCA": "mlx5", "NCCL_DEBUG": "INFO"},
            )
        ),
    ),
    "nccl-tests-noise-nccl-info_all_reduce_perf.log": (
        "all_reduce",
        "file name",
        16,
        lambda r: (
            (
                r.provenance.nccl_version,
                r.provenance.nccl_path.transport,
                r.provenance.nccl_path.gdr,
                r.provenance.nccl_path.devices[:2],
                r.provenance.nccl_path.net_plugin,
                r.provenance.nccl_path.algorithms,
                r.provenance.nccl_path.channels,
                r.provenance.nccl_path.collnet,
                r.provenance.nccl_path.nvls,
                r.provenance.nccl_path.nodes,
                r.provenance.nccl_warning_count,
            )
            == (
                "2.21.5+cuda12.4",
                "IB",
                True,
                ("mlx5_0:1/IB", "mlx5_1:1/IB"),
                "internal",
                ("ring", "tree"),
                8,
                True,
                False,
                2,
                1,
            )
        ),
    ),
    "nccl-tests-noise-socket-fallback_all_reduce_perf.log": (
        "all_reduce",
        "file name",
        16,
        lambda r: (
            (
                r.provenance.nccl_path.transport,
                r.provenance.nccl_path.devices,
                r.provenance.nccl_path.gdr,
            )
            == ("Socket", ("eth0",), False)
        ),
    ),
    "nccl-tests-noise-ssh-openmpi_all_reduce_perf.log": (
        "all_reduce",
        "command line",
        16,
        lambda r: r.provenance.skipped_lines >= 8,
    ),
    "nccl-tests-noise-srun_all_reduce_perf.log": (
        "all_reduce",
        "command line",
        16,
        lambda r: (_cmd(r).launcher, _cmd(r).nodes, _cmd(r).tasks_per_node) == ("srun", 2, 8),
    ),
    "nccl-tests-noise-quoted_all_reduce_perf.log": (
        "all_reduce",
        "command line",
        16,
        lambda r: _cmd(r).ranks == 16,
    ),
    "nccl-tests-noise-crlf_all_reduce_perf.log": (
        "all_reduce",
        "command line",
        16,
        lambda r: r.meta.hosts == ("node01", "node02"),
    ),
    "nccl-tests-noise-ansi_all_reduce_perf.log": (
        "all_reduce",
        "command line",
        16,
        lambda r: r.provenance.nccl_warning_count == 1 and r.meta.nccl_tests.complete,
    ),
}


@pytest.mark.parametrize("name", sorted(NCCL_CASES))
def test_noisy_nccl_logs_give_the_bare_tables_rows(name):
    op, source, world, check = NCCL_CASES[name]
    run = _one(name)
    assert run.results == BARE_NCCL.results
    assert (run.meta.op, run.meta.nccl_tests.op_source, run.meta.world_size, run.meta.nodes) == (
        op,
        source,
        world,
        2,
    )
    assert sorted({r.bytes for r in run.results}) == [1024 * 2**k for k in range(19)]
    assert run.meta.nccl_tests.header is None and run.meta.nccl_tests.complete
    assert check(run), name


def test_the_socket_fallback_across_nodes_is_a_failing_finding_naming_it():
    run = _one("nccl-tests-noise-socket-fallback_all_reduce_perf.log")
    fails = [f for f in import_findings(run) if f.check == "import.socket_fallback"]
    assert (
        len(fails) == 1
        and fails[0].severity.value == "fail"
        and "NET/Socket" in fails[0].message
        and "2 nodes" in fails[0].message
    )
    ib = _one("nccl-tests-noise-nccl-info_all_reduce_perf.log")
    assert not [f for f in import_findings(ib) if f.check == "import.socket_fallback"]


def test_a_paste_cut_at_the_units_line_and_before_the_footer():
    run = _one("nccl-tests-noise-cut-units_all_reduce_perf.log")
    assert run.results == BARE_NCCL.results[:-4]
    assert (
        run.meta.nccl_tests.header == "cut: from the units line"
        and not run.meta.nccl_tests.complete
    )
    checks = {f.check for f in import_findings(run)}
    assert {"import.header_incomplete", "import.incomplete"} <= checks
    assert run.meta.op == "all_reduce" and run.meta.world_size is None


def test_a_paste_of_rows_only():
    run = _one("nccl-tests-noise-cut-rows_all_reduce_perf.log")
    assert run.results == BARE_NCCL.results and run.meta.nccl_tests.header == "cut: from the rows"
    assert (run.meta.op, run.meta.nccl_tests.op_source) == ("all_reduce", "file name")


@pytest.mark.parametrize(
    "name",
    ["perftest-noise-script-log_ib_write_bw.log", "perftest-noise-tabs-as-spaces_ib_write_bw.log"],
)
def test_noisy_perftest_logs_give_the_bare_rows_and_banner(name):
    run = _one(name)
    assert run.results == BARE_PERFTEST.results and run.results[0].bw_gbs == pytest.approx(
        191.64 / 8
    )
    log = run.meta.perftest
    assert (
        log.test,
        log.device,
        log.link_layer,
        log.gid_index,
        log.mtu,
        log.qps,
        log.bw_unit,
        log.duration_mode,
        log.peak_measured,
    ) == ("ib_write_bw", "mlx5_0", "Ethernet", "3", "4096[B]", "2", "Gb/sec", True, False)


def test_the_perftest_command_line_is_read():
    cmd = _cmd(_one("perftest-noise-script-log_ib_write_bw.log"))
    assert (cmd.binary, cmd.launcher) == ("ib_write_bw", None)
    assert cmd.options == {
        "device": "mlx5_0",
        "gid_index": 3,
        "qps": 2,
        "size": 65536,
        "duration_s": 10,
        "report_gbits": True,
    }


def test_per_iteration_columns_and_cycles_are_kept():
    run = _one("nccl-tests-per-iter-cycles_all_reduce_perf.log")
    log = run.meta.nccl_tests
    assert len(run.results) == 10 and log.cycles == 3 and log.per_iter_timing is True
    assert all(
        r.iter_us is not None
        and r.iter_us.cv_pct == 2.5
        and r.iter_us.min_us < r.time_us < r.iter_us.max_us
        for r in run.results
    )
    assert len(log.cycle_stats) == 10 and all(
        c.cycles == 3 and c.busbw_gbs_min <= c.busbw_gbs_mean <= c.busbw_gbs_max
        for c in log.cycle_stats
    )
    assert log.avg_busbw_gbs_all_cycles == pytest.approx(log.avg_busbw_gbs_reported, abs=0.01)
    assert "import.avg_mismatch" not in {f.check for f in import_findings(run)}
    back = importers.parse_text(
        __import__("json").dumps(
            {
                "schema": "ibdiag.bench/1",
                "version": "0",
                "host": "h",
                "generated_at": "t",
                "status": "ok",
                "findings": [],
                **run.to_data(),
            }
        ),
        "saved.json",
    )
    assert (
        back.results == run.results
        and back.meta.nccl_tests == log
        and back.provenance == run.provenance
    )


def test_provenance_round_trips_through_json():
    for name in (
        "nccl-tests-noise-nccl-info_all_reduce_perf.log",
        "nccl-tests-noise-prompt-command.log",
        "perftest-noise-script-log_ib_write_bw.log",
    ):
        run = _one(name)
        doc = {
            "schema": "ibdiag.bench/1",
            "version": "0",
            "host": "h",
            "generated_at": "t",
            "status": "ok",
            "findings": [],
            **run.to_data(),
        }
        back = importers.parse_text(__import__("json").dumps(doc), "saved.json")
        assert back.provenance == run.provenance and back.meta == run.meta, name


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "empty"),
        (b"\n  \n\n", "empty"),
        (b"\x7fELF\x02\x01\x01\x00\x00\x00" + bytes(range(256)) * 4, "binary"),
        (b"the quick brown fox\njumps over the lazy dog\n" * 20, "no benchmark table found"),
    ],
    ids=["empty", "blank", "binary", "garbage"],
)
def test_refused_inputs_are_exit_2_with_a_clear_message(cli, tmp_path, content, message):
    path = tmp_path / "input.log"
    path.write_bytes(content)
    with pytest.raises(InputError, match=message):
        importers.load(path)
    res = cli("bench", "import", path)
    assert (
        res.exit_code == 2
        and res.exception is None
        and message in res.stderr
        and "hint:" in res.stderr
    )


@pytest.mark.parametrize(
    ("content", "refused", "said"),
    [
        (
            b"# nThread 1 nGpus 1 minBytes 8 maxBytes 64 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0\n#\n# Using devices\n",
            "no result rows",
            "the run printed no result row",
        ),
        (
            b"root@node01:~# mpirun -np 2 ./all_reduce_perf -b 8 -e 64\nnode01:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB\n",
            "no measurement",
            "the log has the command (all_reduce_perf) and NCCL's lines, but no result table",
        ),
    ],
    ids=["header-no-rows", "command-no-table"],
)
def test_a_run_that_measured_nothing_is_read_and_fails(cli, tmp_path, content, refused, said):
    """Not "unreadable" (exit 2): what the log says is read, and a benchmark that printed no result
    row fails (exit 1). Where a measurement is needed (verdict --nccl-tests) it is still refused."""
    path = tmp_path / "input.log"
    path.write_bytes(content)
    with pytest.raises(InputError, match=refused):
        importers.load(path)
    res = cli("bench", "import", path, "-o", "json")
    assert res.exit_code == 1 and res.exception is None, res.stderr
    doc = __import__("json").loads(res.stdout)
    incomplete = [f for f in doc["findings"] if f["check"] == "import.incomplete"]
    assert incomplete and incomplete[0]["severity"] == "fail" and said in incomplete[0]["message"]


def test_binary_data_later_in_a_text_log_names_its_line(tmp_path):
    path = tmp_path / "late.log"
    path.write_bytes(
        b"a line of a job log\n" * 5000
        + (LOGS / "nccl-tests-bare_all_reduce_perf.log").read_bytes()
        + b"\x00\x01\x02\n"
    )
    with pytest.raises(InputError, match=r"late.log:\d+: binary data"):
        importers.load(path)


def test_a_huge_line_is_skipped_not_read_whole(tmp_path):
    path = tmp_path / "huge.log"
    bare = (LOGS / "nccl-tests-bare_all_reduce_perf.log").read_bytes()
    path.write_bytes(b"x" * (3 * 2**20) + b"\n" + bare)
    run = importers.load(path)
    assert run.results == BARE_NCCL.results and run.provenance.skipped_lines == 1


def test_the_cli_shows_the_important_provenance_above_the_table(cli):
    res = cli("bench", "import", LOGS / "nccl-tests-noise-socket-fallback_all_reduce_perf.log")
    assert res.exit_code == 1 and "import.socket_fallback" in res.stdout
    assert "# NCCL 2.21.5+cuda12.4: network Socket (eth0)" in res.stdout
    res = cli("bench", "import", LOGS / "nccl-tests-noise-nccl-info_all_reduce_perf.log")
    assert (
        "network IB (mlx5_0:1/IB, mlx5_1:1/IB, mlx5_2:1/IB, mlx5_3:1/IB), plugin internal, GPUDirect RDMA on"
        in res.stdout
    )
    res = cli("bench", "import", LOGS / "nccl-tests-noise-prompt-command.log")
    assert (
        "# command: mpirun --allow-run-as-root -np 16" in res.stdout
        and "launched by mpirun: 16 ranks, 2 nodes" in res.stdout
    )


def test_perftest_rows_without_their_header_are_read_by_shape(tmp_path):
    bare = (LOGS / "perftest-bare_ib_write_bw-gbits.log").read_text().splitlines()
    row = next(ln for ln in bare if ln.strip().startswith("65536"))
    path = tmp_path / "rows.log"
    path.write_text(row + "\n")
    run = importers.load(path)
    assert run.results == BARE_PERFTEST.results  # the unit (Gb/sec) told from MsgRate x size
    assert (
        run.meta.perftest.header == "cut: from the rows" and run.meta.perftest.bw_unit == "Gb/sec"
    )
    assert "import.header_incomplete" in {f.check for f in import_findings(run)}

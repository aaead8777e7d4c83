"""``ibdiag bench import``: outputs, several runs, findings, errors, --save; one real console-script run."""

from __future__ import annotations

import csv
import io
import json
import subprocess

from ibdiag.bench import importers
from ibdiag.bench.p2p.views import CSV_HEADER as P2P_CSV_HEADER
from ibdiag.bench.results.model import load_bench_file
from tests.support.env import FIXTURES

LOGS = FIXTURES / "logs"


def test_table_has_nccl_tests_layout_and_chart(cli):
    res = cli("bench", "import", LOGS / "nccl-tests-2025_all_reduce_perf.log")
    assert res.exit_code == 0, res.stderr
    out = res.stdout
    assert (
        "nccl-tests all_reduce (2025 format)" in out and "32 ranks on 4 hosts (8 per host)" in out
    )
    assert (
        "#       size         count      type   redop    root     time   algbw   busbw  #wrong"
        in out
    )
    assert "  8589934592    2147483648     float     sum      -1" in out
    assert "# Avg bus bandwidth    : 139.068" in out and "busbw by size" in out
    assert "status: OK" in out


def test_json_envelope(cli):
    res = cli("bench", "import", LOGS / "nccl-tests-2023_all_gather_perf.log", "-o", "json")
    assert res.exit_code == 0
    doc = json.loads(res.stdout)
    assert (doc["schema"], doc["kind"], doc["op"], doc["world_size"], doc["backend"]) == (
        "ibdiag.bench/1",
        "collective",
        "all_gather",
        16,
        "nccl",
    )
    assert doc["results"][0] == {
        "bytes": 1024,
        "count": 32,
        "type": "bfloat16",
        "redop": None,
        "root": None,
        "in_place": False,
        "time_us": doc["results"][0]["time_us"],
        "algbw_gbs": doc["results"][0]["algbw_gbs"],
        "busbw_gbs": doc["results"][0]["busbw_gbs"],
        "wrong": 0,
        "time_us_min": None,
        "time_us_max": None,
    }


def test_perftest_table_and_csv(cli):
    res = cli("bench", "import", LOGS / "perftest-ib_write_bw-MB.log")
    assert (
        res.exit_code == 0
        and "perftest ib_write_bw (RDMA_Write BW Test)" in res.stdout
        and "read as MB/sec" in res.stdout
    )
    res = cli("bench", "import", LOGS / "perftest-ib_write_lat.log", "-o", "csv")
    assert res.exit_code == 0
    lines = res.stdout.splitlines()
    assert (
        lines[0] == ",".join(P2P_CSV_HEADER) and len(lines) == 14
    )  # the same columns as bench p2p -o csv
    first = next(csv.DictReader(io.StringIO(res.stdout)))
    assert (
        first["test"],
        first["bytes"],
        first["iters"],
        first["bw_gbs"],
        first["lat_min_us"],
    ) == ("ib_write_lat", "2", "1000", "", "0.96")
    res = cli("bench", "import", LOGS / "perftest-ib_write_lat.log", "-o", "prom")
    assert res.exit_code == 2 and "cannot write prom" in res.stderr


def test_several_runs_are_refused_unless_one_is_picked(cli):
    log = LOGS / "nccl-tests-nompi-interleaved_all_reduce_perf.log"
    res = cli("bench", "import", log)
    assert res.exit_code == 2 and res.exception is None
    assert (
        "holds 2 runs, interleaved" in res.stderr
        and "not averaged" in res.stderr
        and "MPI=1" in res.stderr
    )
    res = cli("bench", "import", log, "--run", "2", "-o", "json")
    assert res.exit_code == 0
    doc = json.loads(res.stdout)
    assert doc["run_index"] == 2 and doc["ranks"][0]["pid"] == 7302
    checks = {f["check"]: f["severity"] for f in doc["findings"]}
    assert checks["import.multiple_runs"] == "warn" and checks["import.single_rank"] == "warn"
    assert cli("bench", "import", log, "--run", "2", "--strict").exit_code == 1
    res = cli("bench", "import", log, "--run", "3")
    assert res.exit_code == 2 and "--run 1..2" in res.stderr


def test_wrong_elements_fail_the_import(cli):
    res = cli("bench", "import", LOGS / "nccl-tests-wrong_all_reduce_perf.log")
    assert res.exit_code == 1
    assert "collective.wrong" in res.stdout and "import.out_of_bounds" in res.stdout
    assert "# Out of bounds values : 2 FAILED" in res.stdout


def test_busbw_expectation_from_config(cli, tmp_path):
    cfg = tmp_path / "ibdiag.toml"
    cfg.write_text("[collective]\nmin_busbw_gbs = 450\n")
    res = cli(
        "bench",
        "import",
        LOGS / "nccl-tests-2025_all_reduce_perf.log",
        "--config",
        cfg,
        "-o",
        "json",
    )
    assert res.exit_code == 1
    f = [x for x in json.loads(res.stdout)["findings"] if x["check"] == "collective.busbw"][0]
    assert f["severity"] == "fail" and f["limit"] == 450 and 390 < f["value"] < 402
    cfg.write_text("[collective]\nmin_busbw = 1\n")
    res = cli("bench", "import", LOGS / "nccl-tests-2025_all_reduce_perf.log", "--config", cfg)
    assert res.exit_code == 2 and "unknown key" in res.stderr


def test_a_row_that_does_not_fit_its_header_is_exit_2_with_the_line(cli, tmp_path):
    bad = tmp_path / "all_reduce.log"
    text = (LOGS / "nccl-tests-2023_sendrecv_perf.log").read_text().splitlines()
    text.insert(20, "     1048576        262144     float     sum      -1    23.31   44.98")
    bad.write_text("\n".join(text) + "\n")
    res = cli("bench", "import", bad)
    assert res.exit_code == 2 and res.exception is None
    assert f"{bad}:21: expected 13 columns as in the header" in res.stderr and "hint:" in res.stderr
    res = cli("bench", "import", tmp_path / "nope.log")
    assert res.exit_code == 2 and "no such file" in res.stderr


def test_ambiguous_op_warns_and_option_resolves(cli):
    log = LOGS / "nccl-tests-rank-prefix.log"
    doc = json.loads(cli("bench", "import", log, "-o", "json").stdout)
    assert doc["op"] is None and {f["check"] for f in doc["findings"]} >= {"import.op_unknown"}
    doc = json.loads(cli("bench", "import", log, "--op", "alltoall", "-o", "json").stdout)
    assert doc["op"] == "all_to_all" and "import.op_unknown" not in {
        f["check"] for f in doc["findings"]
    }
    assert cli("bench", "import", log, "--op", "allscatter").exit_code == 2


def test_stdin(cli):
    text = (LOGS / "perftest-ib_write_bw-MiB-roce.log").read_text()
    res = cli("bench", "import", "-", "-o", "json", input=text)
    assert res.exit_code == 0
    doc = json.loads(res.stdout)
    assert (
        doc["source"] == "<stdin>" and doc["link_layer"] == "Ethernet" and doc["gid_index"] == "3"
    )


def test_save_is_a_bench_file_verdict_can_read(cli, tmp_path):
    out = tmp_path / "imported.json"
    res = cli("bench", "import", LOGS / "nccl-tests-2021_all_reduce_perf.log", "--save", out)
    assert res.exit_code == 0 and out.exists()
    assert not [
        p for p in tmp_path.iterdir() if p.name != "imported.json"
    ]  # no temporary file left
    run = load_bench_file(out)
    assert run.kind == "collective" and run.meta.op == "all_reduce" and run.meta.world_size == 16
    assert run.results[0].max_error == 2e-07  # the old era's error column survives the round trip
    again = importers.load(out)  # the importer reads ibdiag's own files too
    assert again.results == run.results
    res = cli(
        "bench",
        "import",
        LOGS / "nccl-tests-2021_all_reduce_perf.log",
        "--save",
        tmp_path / "no" / "x.json",
    )
    assert res.exit_code == 2 and "does not exist" in res.stderr


def test_console_script(ibdiag_exe):
    proc = subprocess.run(
        [
            ibdiag_exe,
            "bench",
            "import",
            str(LOGS / "nccl-tests-tag-output_all_reduce_perf.log"),
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert (doc["tag"], doc["world_size"], doc["op"]) == ("1,0", 16, "all_reduce")
    assert "import.nccl_warnings" in {f["check"] for f in doc["findings"]}
    proc = subprocess.run(
        [ibdiag_exe, "bench", "import", "/dev/null"], capture_output=True, text=True, timeout=60
    )
    assert (
        proc.returncode == 2
        and proc.stderr.startswith("ibdiag: error:")
        and "Traceback" not in proc.stderr
    )


def test_a_saved_p2p_run_prints_like_bench_p2p(cli, tmp_path):
    """One p2p view: a measured run read back is shown with its server and line rate, not as a perftest log."""
    from ibdiag.bench.results.model import BenchRun, P2PResult
    from ibdiag.bench.results.p2p_meta import LineRate, P2PMeta, P2PSetup
    from ibdiag.findings.model import Report, RunMeta
    from ibdiag.output.jsonout import render_json

    setup = P2PSetup(
        peer="node-a:18516",
        server_host="node-a",
        server_version="0.1.0",
        duration_s=1.0,
        line_rate=LineRate(100.0, "--line-rate-gbps"),
    )
    run = BenchRun(
        P2PMeta(transport="tcp", mode="bw", measured=setup),
        (
            P2PResult(
                bytes=1 << 20, iters=900, bw_gbs=10.0, cpu_s_per_gb={"client": 0.2, "server": 0.1}
            ),
        ),
    )
    saved = tmp_path / "ab.json"
    saved.write_text(
        render_json(
            Report("bench", run.to_data(), ()),
            RunMeta(host="b", version="0.1.0", generated_at="2026-01-01T00:00:00Z"),
        )
    )
    res = cli("bench", "import", saved)
    assert res.exit_code == 0, res.stderr
    assert (
        "server node-a (ibdiag 0.1.0) at node-a:18516" in res.stdout
        and "line rate 100 Gb/s" in res.stdout
    )
    assert (
        "ibdiag bench p2p: tcp bw, 1 MiB, 1 s per size to node-a:18516" in res.stdout
        and "perftest" not in res.stdout
    )
    rows = list(csv.DictReader(io.StringIO(cli("bench", "import", saved, "-o", "csv").stdout)))
    assert list(rows[0]) == list(P2P_CSV_HEADER) and (
        rows[0]["peer"],
        rows[0]["line_rate_share"],
    ) == ("node-a:18516", "0.8")

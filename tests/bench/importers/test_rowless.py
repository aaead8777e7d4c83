"""Logs without a result table are read for what they hold (issue 36): NCCL's own lines (transport,
GPUDirect RDMA, devices, hosts, ranks, version, the RoCE GID, fatal network errors), a benchmark that
died before its table, and a table whose header does not name its collective. Through the file, stdin
and ``ibdiag bench import``; fixtures written by ``fixtures/logs/rowless.py``."""

from __future__ import annotations

import json

import pytest

from ibdiag.bench import importers
from ibdiag.bench.importers.checks import import_findings
from ibdiag.bench.importers.transport import decode_gid
from ibdiag.errors import InputError
from tests.support.env import FIXTURES

LOGS = FIXTURES / "logs"


def _one(name: str):
    runs, _ = importers.read_runs(LOGS / name)
    assert len(runs) == 1, name
    return runs[0]


def _failing(run) -> list[str]:
    return sorted(f.check for f in import_findings(run) if f.severity.name == "FAIL")


# name -> (tool, transport, gdr, hosts, ranks, gid_index, completion errors, failing checks)
NCCL_LOGS = {
    "nccl-log-socket-fallback-4-hosts.log": ("NCCL", "Socket", False, 4, 32, None, 0, ["import.socket_fallback"]),
    "nccl-log-roce-gdr-gid-index-3.log": ("NCCL", "IB", True, 2, 16, 3, 0, []),
    "nccl-log-ib-without-gdr.log": ("NCCL", "IB", False, 2, None, None, 0, []),
    "nccl-log-retry-exceeded-link-local-gid.log": ("NCCL", "IB", None, 2, None, 0, 4, ["import.network_error"]),
    "nccl-tests-died-cqe-dump-completion-error-4_all_reduce_perf.log": (
        "nccl-tests", "IB", True, 2, None, None, 2, ["import.incomplete", "import.network_error"],
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(NCCL_LOGS))
def test_what_nccl_lines_say(name: str) -> None:
    tool, transport, gdr, hosts, ranks, gid, errors, failing = NCCL_LOGS[name]
    run = _one(name)
    path = run.provenance.nccl_path
    assert run.results == () and run.provenance.imported.tool == tool
    assert (path.transport, path.gdr, len(path.hosts), path.ranks, path.gid_index) == (
        transport,
        gdr,
        hosts,
        ranks,
        gid,
    )
    assert path.completion_error_count == errors
    assert _failing(run) == failing
    with pytest.raises(InputError, match="no result rows|no measurement"):
        importers.load(LOGS / name)  # verdict --nccl-tests: still no measurement to compare


@pytest.mark.parametrize("name", sorted(NCCL_LOGS))
def test_bench_import_reads_them_from_a_file_and_from_stdin(cli, name: str) -> None:
    text = (LOGS / name).read_text()
    want = 1 if NCCL_LOGS[name][-1] else 0
    for res in (
        cli("bench", "import", LOGS / name, "-o", "json"),
        cli("bench", "import", "-", "-o", "json", input=text),
    ):
        assert res.exit_code == want and res.exception is None, res.stderr
        doc = json.loads(res.stdout)
        assert doc["kind"] == "collective" and doc["results"] == []
        assert (
            sorted(f["check"] for f in doc["findings"] if f["severity"] == "fail")
            == NCCL_LOGS[name][-1]
        )
    table = cli("bench", "import", "-", input=text, columns=200)
    assert "no result table" in table.stdout or "no result row" in table.stdout
    assert "Out of bounds values" not in table.stdout or NCCL_LOGS[name][0] == "nccl-tests"


def test_the_died_run_is_no_longer_refused_for_its_cqe_dump() -> None:
    """The provider's four hex lines were read as table rows: ``expected 12 columns …, found 4``."""
    run = _one("nccl-tests-died-cqe-dump-completion-error-4_all_reduce_perf.log")
    cqe, warn = run.provenance.nccl_path.completion_errors
    assert (cqe.status, cqe.vendor_err, cqe.host, cqe.where) == (
        4,
        81,
        "v100-n2",
        "line 15, CQE dump",
    )
    assert (warn.status, warn.vendor_err, warn.host, warn.where) == (4, 81, "v100-n2", "line 21")
    assert run.meta.world_size == 2 and run.meta.hosts == ("v100-n1", "v100-n2")
    net = [f for f in import_findings(run) if f.check == "import.network_error"][0]
    assert "local protection error" in net.message and "nvidia-peermem" in net.hint


def test_network_error_names_status_peer_hca_and_the_gid() -> None:
    run = _one("nccl-log-retry-exceeded-link-local-gid.log")
    path = run.provenance.nccl_path
    assert path.gids == ("0 fe80::/64 (link-local)",)
    first = path.completion_errors[0]
    assert (first.status, first.vendor_err, first.peer, first.hca, first.direction, first.host) == (
        12,
        129,
        "10.51.3.9<41007>",
        "mlx5_3",
        "Recv",
        "roce-b03",
    )
    net = [f for f in import_findings(run) if f.check == "import.network_error"][0]
    assert "transport retry counter exceeded" in net.message and "on 2 hosts" in net.message
    assert (
        "GID index 0 (0 fe80::/64 (link-local))" in net.message and "NCCL_IB_GID_INDEX" in net.hint
    )


def test_gids_are_decoded_as_nccl_prints_them() -> None:
    assert decode_gid("3", "0", "1064A8C0FFFF0000") == "3 ::ffff:192.168.100.16"
    assert decode_gid("0", "80FE", "46442FFEFF47BB4E") == "0 fe80::/64 (link-local)"
    assert decode_gid("1", "4811FD", "2000300040005") == "1 fd11:4800:0:0::/64"


def test_a_json_round_trip_keeps_every_fact(cli, tmp_path) -> None:
    saved = tmp_path / "run.json"
    res = cli(
        "bench",
        "import",
        LOGS / "nccl-log-retry-exceeded-link-local-gid.log",
        "--save",
        saved,
        "-o",
        "json",
    )
    assert res.exit_code == 1, res.stderr
    back = importers.parse_runs(saved.read_text(), "run.json")[0]
    assert back.provenance == _one("nccl-log-retry-exceeded-link-local-gid.log").provenance
    assert back.meta.nccl_tests is None


# name -> (op, world size) read from the rows alone, through stdin (no file name to go by)
TABLES = {
    "nccl-tests-table-only-count-per-rank-8-ranks.log": ("reduce_scatter", 8),
    "nccl-tests-table-only-root-0-sum.log": ("reduce", None),
    "nccl-tests-table-only-root-0-none.log": ("broadcast", None),
    "nccl-tests-table-only-count-per-rank-no-redop.log": (None, None),
    "nccl-tests-table-only-srun-label-16-ranks.log": ("all_reduce", 16),
}


@pytest.mark.parametrize("name", sorted(TABLES))
def test_the_collective_from_the_table_itself(cli, name: str) -> None:
    op, world = TABLES[name]
    res = cli("bench", "import", "-", "-o", "json", input=(LOGS / name).read_text())
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert (doc["op"], doc["world_size"], len(doc["results"])) == (op, world, 32)
    if op is None:
        assert doc["op_candidates"] == ["all_gather", "all_to_all"]
    else:
        assert doc["op_source"] == "inferred from the table"
        assert not [
            f for f in doc["findings"] if f["check"] in ("import.op_unknown", "import.busbw_factor")
        ]


def test_a_text_log_that_starts_with_a_bracket_is_not_json(cli) -> None:
    text = "[rank0]: starting\n" + (LOGS / "nccl-log-socket-fallback-4-hosts.log").read_text()
    res = cli("bench", "import", "-", "-o", "json", input=text)
    assert res.exit_code == 1 and json.loads(res.stdout)["nccl_path"]["transport"] == "Socket"
    with pytest.raises(InputError, match="JSON, but neither"):  # a JSON list is still read as JSON
        importers.parse_runs('[{"schema": 1}]', "x.json")

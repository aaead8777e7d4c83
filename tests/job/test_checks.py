"""What ``ibdiag job`` says of each RAS fixture, through the library entry point (``run``), and the
join: node names from a hosts file, the nodes' topo files, a rank map, RoCE addresses and Inspector;
NICs and leaf ports from a saved fabric."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from ibdiag.errors import UsageError
from ibdiag.findings.model import Severity
from ibdiag.job.command import JobRequest, RasFile, RasStream, run
from tests.support.env import FIXTURES

NCCL = FIXTURES / "nccl"
TOPO = tuple(sorted((NCCL / "topo").glob("*.json")))
FABRIC = FIXTURES / "fabric" / "rail-fat-tree-faulty"


def judge(name: str, **kw: object):
    kw.setdefault("topo", TOPO)
    kw.setdefault("hosts_file", NCCL / "hosts")
    return run(JobRequest(ras=RasFile(NCCL / name), **kw))  # type: ignore[arg-type]


def bad(result, check: str | None = None):
    return [
        f
        for f in result.findings
        if f.severity is not Severity.OK and (check is None or f.check == check)
    ]


def test_healthy_256_is_all_ok():
    r = judge("ras-2.26.2-healthy-256.txt")
    assert bad(r) == []
    assert r.report.status is Severity.OK
    states = [f for f in r.findings if f.check == "job.ras_comm_state"]
    assert states[0].message == "all 1 communicator(s) are RUNNING"


def test_ranks_behind_found_by_elimination_and_placed_with_a_rank_map(tmp_path):
    """NVIDIA/nccl#1911's ask: RAS lists the 2 ranks ahead; the 30 behind are the others."""
    r = judge("ras-2.26.2-allgather-ahead.txt")
    (f,) = bad(r)
    assert f.check == "job.ras_op_mismatch" and f.severity is Severity.WARN
    assert "behind: rank(s) 0-19, 22-31 (by elimination" in f.message
    assert (
        "ahead: rank(s) 20-21 — rank 20: gpu03 (10.20.0.3) GPU 4, process 40420 -> mlx5_2"
        in f.message
    )
    assert f.value == 30
    rank_map = tmp_path / "ranks"
    rank_map.write_text("".join(f"{n}: gpu0{n // 8 + 1}\n" for n in range(32)))
    r = judge("ras-2.26.2-allgather-ahead.txt", rank_map=rank_map)
    (f,) = bad(r)
    assert "rank 0: gpu01" in f.message and f.subject == "gpu01"
    behind = {row.rank for row in r.ranks if "behind" in row.roles}
    assert behind == set(range(20)) | set(range(22, 32))
    assert {row.place.node for row in r.ranks if row.rank == 30} == {"gpu04"}


def test_a_rank_map_of_another_size_is_not_applied(tmp_path):
    rank_map = tmp_path / "ranks"
    rank_map.write_text("0: gpu01\n1: gpu02\n")
    r = judge("ras-2.26.2-allgather-ahead.txt", rank_map=rank_map)
    assert "their nodes are not known" in bad(r)[0].message


def test_dead_unresponsive_and_errors():
    r = judge("ras-2.26.5-dead-errors.txt")
    (dead,) = bad(r, "job.ras_dead")
    assert dead.severity is Severity.FAIL and dead.subject == "gpu03:GPU4"
    assert "process 73020 (gpu03 (10.20.0.3) GPU 4, process 73020 -> mlx5_2)" in dead.message
    assert "#0-0 rank 20" in dead.message
    errors = bad(r, "job.ras_error")
    assert [f.subject for f in errors] == ["gpu03:GPU5", "gpu04:GPU4"]
    assert "remote process error" in errors[0].message and "another rank" in (errors[0].hint or "")
    assert "system error" in errors[1].message
    assert bad(r, "job.ras_unresponsive") == []  # the dead one is not counted twice
    assert {f.check for f in bad(r, "job.ras_collection")} == {"job.ras_collection"}


def test_2_24_missing_process_and_anonymous_rank():
    r = judge("ras-2.24.3-incomplete.txt")
    un = bad(r, "job.ras_unresponsive")
    assert [f.subject for f in un] == ["gpu03:GPU5", "5d1c2e0f:r21"]
    assert "no data from rank(s) 21" in un[1].message
    assert all(f.severity is Severity.FAIL for f in un)


def test_teardown_states_warn():
    r = judge("ras-2.25.1-teardown.txt")
    states = bad(r, "job.ras_comm_state")
    assert [f.severity for f in states] == [Severity.WARN] * 3
    assert "FINALIZE" in states[0].message and "INIT" in states[1].message
    assert "26 rank(s) NOCOMM; 4 rank(s) RUNNING: rank 0: gpu01" in states[2].message
    (mm,) = bad(r, "job.ras_op_mismatch")
    assert "collective counts differ" in mm.message and "behind: rank(s) 20" in mm.message


def test_the_walk_bug_warns_and_judges_nothing_of_the_misread_group():
    r = judge("ras-2.27.3-walk-bug.txt")
    coll = bad(r, "job.ras_collection")
    assert coll and "1057455228" in coll[0].message
    assert [f.check for f in bad(r) if f.check == "job.ras_comm_state"] == []
    (un,) = bad(r, "job.ras_unresponsive")
    assert un.subject == "gpu02:GPU0"


def test_json_mismatch_with_the_fabric_names_the_leaf_port_and_its_errors():
    r = judge("ras-2.29.7-mismatch.json", fabric=FABRIC)
    (mm,) = bad(r, "job.ras_op_mismatch")
    assert mm.subject == "gpu03:GPU4"
    assert (
        "behind: rank(s) 20-21 — rank 20: gpu03 (10.20.0.3) GPU 4, process 70020 -> mlx5_2 -> leaf-r2-1 port 3"
        in mm.message
    )
    assert "ahead: rank(s) 0-19, 22-63" in mm.message  # 62 ranks: named by their ranges only
    paths = bad(r, "job.path")
    assert [p.subject for p in paths] == ["gpu03:GPU4", "gpu03:GPU5"]
    assert "fabric.errors leaf-r2-1:3" in paths[0].message and "symbol_error 57" in paths[0].message
    assert paths[0].severity is Severity.WARN
    (err,) = bad(r, "job.ras_error")
    assert "'timeout'" in err.message and "leaf-r2-1 port 4" in err.message
    (joined,) = [f for f in r.findings if f.check == "job.join"]
    assert "3 on a leaf port of" in joined.message
    assert {row.rank for row in r.ranks} == {20, 21, 28}


def test_without_a_hosts_file_the_address_is_the_subject():
    r = run(JobRequest(ras=RasFile(NCCL / "ras-2.29.7-mismatch.json")))
    (mm,) = bad(r, "job.ras_op_mismatch")
    assert mm.subject == "10.20.0.3:GPU4"
    (joined,) = [f for f in r.findings if f.check == "job.join"]
    assert "0 on a known node" in joined.message and "node name not known" in joined.message


def test_roce_addresses_of_the_topo_files_name_the_node(tmp_path):
    topo = json.loads((NCCL / "topo" / "gpu03.json").read_text())
    topo["adapters"][0]["ports"][0]["gids"] = [
        {"index": 3, "gid": "0000:0000:0000:0000:0000:ffff:0a14:0003", "type": "RoCE v2"}
    ]
    (tmp_path / "gpu03.json").write_text(json.dumps(topo))
    r = run(
        JobRequest(ras=RasFile(NCCL / "ras-2.29.7-mismatch.json"), topo=(tmp_path / "gpu03.json",))
    )
    (mm,) = bad(r, "job.ras_op_mismatch")
    assert mm.subject == "gpu03:GPU4"


def test_stdin_stream_and_the_request_must_name_something():
    data = (NCCL / "ras-2.26.2-healthy-256.txt").read_bytes()
    r = run(JobRequest(ras=RasStream(io.BytesIO(data))))
    assert r.ras is not None and r.ras.source == "stdin"
    with pytest.raises(UsageError):
        run(JobRequest())


@pytest.mark.parametrize(
    "content, problem", [("", "no 'ADDRESS NAME'"), ("10.0.0.1\n", "no 'ADDRESS NAME'")]
)
def test_bad_hosts_file(tmp_path, content, problem):
    from ibdiag.errors import InputError

    p = tmp_path / "hosts"
    p.write_text(content)
    with pytest.raises(InputError, match=problem):
        judge("ras-2.26.2-healthy-256.txt", hosts_file=p)


def test_bad_rank_map(tmp_path):
    from ibdiag.errors import InputError

    p = tmp_path / "ranks"
    p.write_text("0: gpu01\nnot a rank line\n")
    with pytest.raises(InputError, match="line 2"):
        judge("ras-2.26.2-healthy-256.txt", rank_map=p)
    with pytest.raises(InputError, match="FIFO|not a regular"):
        import os

        fifo = tmp_path / "fifo"
        os.mkfifo(fifo)
        judge("ras-2.26.2-healthy-256.txt", rank_map=Path(fifo))


def test_messages_stay_short_at_any_size():
    """A 16384-rank communicator whose every other rank is behind: ranges are capped, messages fit
    ibdiag report's 2000 characters."""
    ranks = []
    for r in range(16384):
        count = 10 if r % 2 else 11
        ranks.append(
            {
                "rank": r,
                "host": f"10.1.{r // 2048}.{(r // 8) % 256}",
                "pid": 1000 + r,
                "cuda_dev": r % 8,
                "nvml_dev": r % 8,
                "status": {"init_state": 0, "async_error": 6 if r % 3 == 0 else 0},
                "collective_counts": {"AllReduce": count},
            }
        )
    doc = {
        "nccl_version": "2.30.7",
        "communicators": [{"hash": "0xabc", "size": 16384, "ranks": ranks, "missing_ranks": []}],
    }
    r = run(JobRequest(ras=RasStream(io.BytesIO(json.dumps(doc).encode()))))
    (mm,) = bad(r, "job.ras_op_mismatch")
    assert "more range(s)" in mm.message and len(mm.message) <= 1800
    assert all(len(f.message) <= 1800 for f in r.findings)
    assert mm.value == 8192
    behind = [row for row in r.ranks if "behind" in row.roles]
    assert behind == []  # 8192 ranks: named by ranges, not placed one by one

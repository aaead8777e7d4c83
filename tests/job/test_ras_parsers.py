"""The RAS text report and JSON status, as NCCL 2.24-2.30 write them (fixtures/nccl), and what the
parsers make of damaged, hostile or foreign input."""

from __future__ import annotations

import json

import pytest

from ibdiag.errors import InputError
from ibdiag.job.ras import parse_ras, version_tuple
from ibdiag.job.rastext import MAX_LINE, parse_text
from tests.support.env import FIXTURES

NCCL = FIXTURES / "nccl"


def ras(name: str):
    return parse_ras((NCCL / name).read_bytes(), name)


def test_2_26_mismatch_names_the_listed_ranks_and_the_unlisted_group():
    s = ras("ras-2.26.2-allgather-ahead.txt")
    assert (s.format, s.nccl_version, s.cuda_runtime, s.cuda_driver) == (
        "text",
        "2.26.2",
        12060,
        12060,
    )
    assert (s.nodes, s.processes, s.gpus) == (4, 32, 32)
    (g,) = s.groups
    assert (g.comms, g.nodes, g.size, g.status, g.errors) == (1, 4, 32, "RUNNING", ("MISMATCH",))
    (c,) = s.comms
    assert (c.label, c.hash, c.size) == ("#0-0", "3c9f01d27e85b6a4", 32)
    (m,) = c.mismatches
    assert m.op == "AllGather"
    assert [(x.value, x.count, x.ranks) for x in m.groups] == [(512, 30, ()), (513, 2, (20, 21))]
    r20 = c.rank(20)
    assert r20 is not None and (r20.host, r20.pid, r20.cuda_dev, r20.nvml_dev) == (
        "10.20.0.3",
        40420,
        4,
        4,
    )
    assert s.notes == ()


def test_2_24_layout_missing_ranks_by_number_and_job_level_processes():
    s = ras("ras-2.24.3-incomplete.txt")
    assert s.collection_s == 2.05 and s.timeouts == 2
    assert s.missing_processes_count == 1
    (p,) = s.missing_processes
    assert (p.host, p.pid, p.gpus) == ("10.20.0.3", 52140, (5,))
    (c,) = s.comms
    (m,) = c.missing
    assert (m.rank, m.pid, m.unresponsive, m.missing) == (21, None, True, True)
    assert c.missing_count == 1


def test_2_25_status_groups_unknown_is_nocomm_and_one_collective_count():
    s = ras("ras-2.25.1-teardown.txt")
    assert [(g.status, g.comms) for g in s.groups] == [("FINALIZE", 1), ("RUNNING", 7), ("INIT", 1)]
    (c,) = s.comms
    assert [(g.status, g.count, g.ranks) for g in c.status_groups] == [
        ("NOCOMM", 26, ()),
        ("RUNNING", 4, (0, 8, 16, 24)),
        ("FINALIZE", 2, (4, 20)),
    ]
    (m,) = c.mismatches
    assert m.op is None and [(g.value, g.count, g.ranks) for g in m.groups] == [
        (880, 5, ()),
        (879, 1, (20,)),
    ]
    assert c.rank(20).status == "FINALIZE"


def test_dead_processes_errors_and_the_dead_rank():
    s = ras("ras-2.26.5-dead-errors.txt")
    assert s.dead_count == 1 and s.dead_processes[0].pid == 73020
    (c,) = s.comms
    (m,) = c.missing
    assert (m.rank, m.dead, m.pid) == (20, True, 73020)
    assert c.rank(21).async_error == "remote process error"
    assert c.rank(28).async_error == "system error"
    assert any("nccl#1762" in n for n in s.notes)  # 2.26.5 with a missing rank: suspect walk


def test_the_misread_group_of_2_27_is_dropped_with_a_note_and_the_noise_before_is_counted():
    s = ras("ras-2.27.3-walk-bug.txt")
    assert [g.index for g in s.groups] == [0, 1]
    assert [c.label for c in s.comms] == ["#0-0"]
    assert s.outlier_nodes == ("10.20.0.2",)
    assert (s.nodes, s.processes, s.gpus) == (2, 10, 10)
    assert any("1057455228" in n for n in s.notes)
    assert any("before the report" in n for n in s.notes)


def test_healthy_256():
    s = ras("ras-2.26.2-healthy-256.txt")
    assert (s.nodes, s.processes) == (32, 256) and s.comms == () and s.notes == ()
    assert s.groups[0].status == "RUNNING" and s.groups[0].errors == ("OK",)


def test_json_2_29_derives_ras_own_verdicts():
    s = ras("ras-2.29.7-mismatch.json")
    assert s.format == "json" and s.nccl_version == "2.29.7" and s.timeouts == 1
    world = s.comm("d3a85c21e07f4b96")
    assert world is not None and world.complete and world.size == 64
    assert world.errors == ("MISMATCH", "ERROR") and world.status == "RUNNING"
    (m,) = world.mismatches
    assert m.op == "AllReduce"
    assert [(g.value, g.count) for g in m.groups] == [(9218, 62), (9216, 2)]
    assert m.groups[1].ranks == (20, 21)
    assert world.rank(28).async_error == "timeout"
    assert [g.errors for g in s.groups[1:]] == [("OK",), ("OK",)]
    assert s.groups[0].hashes == ("d3a85c21e07f4b96",)


def test_json_2_28_missing_comma_is_put_back_and_noted():
    text = (NCCL / "ras-2.28.9-missing-comma.json").read_text()
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)  # the file is what NCCL 2.28.9 writes: not JSON as it stands
    s = ras("ras-2.28.9-missing-comma.json")
    (c,) = s.comms
    (m,) = c.missing
    assert (m.rank, m.unresponsive, m.dead, m.host) == (9, True, False, "10.20.0.2")
    assert c.errors == ("INCOMPLETE",)
    assert any("comma" in n for n in s.notes)
    assert s.missing_processes_count == 1 and s.dead_count == 0


def test_json_null_status_unknown_host_and_pid():
    doc = {
        "nccl_version": "2.29.7",
        "communicators": [
            {
                "hash": "0x1",
                "size": 2,
                "ranks": [
                    {
                        "rank": 0,
                        "host": "unknown",
                        "pid": -1,
                        "cuda_dev": 0,
                        "nvml_dev": 0,
                        "status": None,
                    },
                    {
                        "rank": 1,
                        "host": "10.0.0.2",
                        "pid": 7,
                        "cuda_dev": 1,
                        "nvml_dev": 1,
                        "status": {"init_state": 7, "async_error": 0},
                    },
                ],
                "missing_ranks": [],
            }
        ],
    }
    s = parse_ras(json.dumps(doc).encode(), "j")
    (c,) = s.comms
    r0, r1 = c.ranks
    assert (r0.host, r0.pid, r0.status) == (None, None, None)
    assert r1.status == "INIT" and r1.init_error is None  # 7: in progress, not an error
    assert c.hash == "0000000000000001" and c.complete
    assert any("null" in n for n in s.notes)


@pytest.mark.parametrize(
    "text, problem",
    [
        ("{", "not JSON"),
        ('{"communicators": "x"}', "must be a list"),
        ('{"communicators": [{"hash": "zz"}]}', "not a 64-bit hex"),
        ('{"communicators": [{"hash": "0x1", "ranks": [{"rank": -1}]}]}', "outside"),
        (
            '{"communicators": [{"hash": "0x1", "ranks": [{"rank": 0, "host": "a\\u001b[2J"}]}]}',
            "control",
        ),
        ('{"communicators": [{"hash": "0x1", "size": ' + "9" * 150 + "}]}", "digits"),
        ('{"a": ' * 100 + "1" + "}" * 100, "nested too deeply"),
        ('{"nccl_version": "2.29"}', "no communicators"),
    ],
)
def test_bad_json_is_an_input_error_naming_the_place(text, problem):
    with pytest.raises(InputError) as e:
        parse_ras(text.encode(), "bad.json")
    assert problem in e.value.message and e.value.message.startswith("bad.json")


def test_not_a_report_at_all():
    with pytest.raises(InputError, match="not a NCCL RAS report"):
        parse_ras(b"hello\nworld\n", "x")
    with pytest.raises(InputError):
        parse_ras(b"", "x")


def test_a_raw_nc_capture_with_the_protocol_lines_before_the_json():
    body = (NCCL / "ras-2.30.7-healthy.json").read_bytes()
    s = parse_ras(b"SERVER PROTOCOL 2\nOK\n" + body, "nc")
    assert s.format == "json" and len(s.comms) == 1


def test_unknown_lines_are_counted_and_quoted_escaped_long_lines_cut():
    base = (NCCL / "ras-2.26.2-allgather-ahead.txt").read_text()
    hostile = base.replace(
        "  30 ranks have launched up to operation 512\n",
        "  30 ranks have launched up to operation 512\n  \x1b[31mred\x1b[0m\n  "
        + "A" * 50000
        + "\n",
    )
    s = parse_text(hostile, "h")
    assert s is not None
    (note,) = [n for n in s.notes if "not understood" in n]
    assert note.startswith("2 line(s)") and "\\x1b" in note and "\x1b" not in note
    assert len(note) < 400
    # the rest of the block still parsed
    assert s.comms[0].mismatches[0].groups[1].ranks == (20, 21)


def test_a_host_with_control_characters_is_not_taken():
    base = (NCCL / "ras-2.26.2-allgather-ahead.txt").read_text()
    s = parse_text(base.replace("on node 10.20.0.3\n", "on node 10.20.0.3\x07\n", 1), "h")
    assert s.comms[0].rank(20) is None or s.comms[0].rank(20).host is None
    assert any("not understood" in n for n in s.notes)


def test_trailing_log_after_the_warnings_is_skipped():
    base = (NCCL / "ras-2.26.2-healthy-256.txt").read_text()
    s = parse_text(
        base + "[rank118]:[E603 17:48:01] Watchdog caught collective operation timeout\n", "h"
    )
    assert any("after the report" in n for n in s.notes)
    assert not any("not understood" in n for n in s.notes)


def test_line_cut_before_matching():
    assert MAX_LINE == 4096
    s = parse_text("NCCL version 2.26.2 compiled with CUDA 12.8\n" + "x" * 10_000_000 + "\n", "big")
    assert s is not None and s.nccl_version == "2.26.2"


def test_version_tuple():
    assert version_tuple("2.28.9+cuda12.9") == (2, 28, 9)
    assert version_tuple("2.26.2") == (2, 26, 2)
    assert version_tuple(None) is None and version_tuple("x") is None


def test_endless_rank_lines_cost_bounded_memory(monkeypatch):
    import ibdiag.job.rastext as rastext

    MAX_LISTED = 2000  # the real bound (2**18) takes the same path, slower
    monkeypatch.setattr(rastext, "MAX_LISTED", MAX_LISTED)
    head = (NCCL / "ras-2.26.2-allgather-ahead.txt").read_text()
    lines = "".join(
        f"  Rank {n} -- GPU 1 managed by process {n} on node 10.0.0.1\n"
        for n in range(MAX_LISTED + 50)
    )
    s = parse_text(head + lines, "endless")
    (c,) = s.comms
    assert len(c.ranks) == MAX_LISTED
    assert any(n.startswith("50 line(s) of the report not understood") for n in s.notes)
